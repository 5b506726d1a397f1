"""`engine validate` replays an agent test's golden conversation and scores it as the run would."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.engine_proc import run_engine

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agent"


def _validate(*paths: Path) -> subprocess.CompletedProcess[str]:
    return run_engine("validate", *paths, timeout=120)


def test_golden_conversations_of_the_examples_pass_validate() -> None:
    done = _validate(FIXTURES / "weather_agent.yaml", FIXTURES / "agent_booking.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 errors" in done.stdout + done.stderr


def test_a_golden_conversation_that_fails_its_checks_is_reported_at_its_test(tmp_path: Path) -> None:
    """The golden answers from memory (no tool call): the replay fails `tool_sequence` and validate says where."""
    text = (FIXTURES / "weather_agent.yaml").read_text(encoding="utf-8")
    broken = text.replace("      - tool_calls: [{name: get_weather, arguments: {city: Paris}}]\n", "")
    assert broken != text
    suite = tmp_path / "weather.yaml"
    suite.write_text(broken, encoding="utf-8")
    done = _validate(suite)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    line = next(i for i, row in enumerate(broken.splitlines(), 1) if "id: weather-then-answer" in row)
    assert f"{suite}:{line}:5: error: test 'weather-then-answer':" in out, out
    assert "get_weather" in out, out


def test_a_golden_conversation_whose_tool_call_hits_the_error_rule_fails(tmp_path: Path) -> None:
    """Asking for Lyon gets the declared `error: unknown city`; the final answer lacks 18: validate fails."""
    text = (FIXTURES / "weather_agent.yaml").read_text(encoding="utf-8")
    broken = text.replace("arguments: {city: Paris}", "arguments: {city: Lyon}").replace(
        "It is 18°C and cloudy in Paris", "I could not find the weather")
    suite = tmp_path / "weather.yaml"
    suite.write_text(broken, encoding="utf-8")
    done = _validate(suite)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "test 'weather-then-answer'" in out and "18" in out, out
