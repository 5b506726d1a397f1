"""The example agent suites, checked with the parts that exist before the suite schema knows agents.

suites/agent_booking.yaml (kept identical to tests/fixtures/agent/agent_booking.yaml) and the smallest
agent suite (tests/fixtures/agent/weather_agent.yaml) are read as plain YAML; their tools compile
with `compile_tools`, every evaluator with `compile_spec`, and each golden conversation is replayed
through the real loop with the declared tool results and scored as the runner scores an agent test
(`transcript.answer()` with the transcript in the context). Conversations that go wrong must fail,
naming what failed: a check that passes every transcript would pass these too.
"""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from engine.agent.golden import replay_golden
from engine.evaluators import compile_spec, score
from engine.model.agent import AgentSettings, GoldenTurn
from engine.model.scoring import ScoringContext
from engine.model.test import Test
from engine.model.transcript import Transcript
from engine.model.verdict import Verdict
from engine.suite.agent import compile_golden
from engine.suite.tools import compile_tools
from tests.factories import make_test

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "agent"
SUITES = [FIXTURES / "agent_booking.yaml", FIXTURES / "weather_agent.yaml"]


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    return data


def _tests() -> list[Any]:
    return [pytest.param(path, test, id=f"{path.stem}:{test['id']}") for path in SUITES
            for test in _load(path)["tests"]]


def _play(suite: dict[str, Any], test: dict[str, Any], turns: Any = None) -> tuple[Test, Transcript]:
    """Replay `turns` (default: the test's golden) and return the Test and the transcript."""
    tools, problems = compile_tools(suite["tools"])
    assert problems == []
    offered = {name: tools[name] for name in test["tools"]}
    agent = {**(suite.get("defaults") or {}).get("agent", {}), **test.get("agent", {})}
    state = agent.pop("state", None)
    compiled, golden_problems = compile_golden(turns if turns is not None else test["golden"])
    assert golden_problems == []
    transcript = asyncio.run(replay_golden(compiled, [{"role": "user", "content": test["prompt"]}], offered,
                                           AgentSettings(**agent), state=state))
    return make_test(id=test["id"], eval=test["eval"], tools=tuple(t.definition for t in offered.values())), transcript


def _judge(test: Test, transcript: Transcript) -> Verdict:
    return score(test, transcript.answer(), ScoringContext(test, test.variables, transcript=transcript))


def test_the_example_suite_is_the_fixture() -> None:
    assert (ROOT / "suites" / "agent_booking.yaml").read_bytes() == (FIXTURES / "agent_booking.yaml").read_bytes()


@pytest.mark.parametrize(("path", "test"), _tests())
def test_every_evaluator_compiles(path: Path, test: dict[str, Any]) -> None:
    node = compile_spec(test["eval"], {"golden": test["golden"]})
    assert [(where, n.problem) for where, n in node.walk() if n.problem] == []


@pytest.mark.parametrize(("path", "test"), _tests())
def test_every_golden_conversation_passes_its_checks(path: Path, test: dict[str, Any]) -> None:
    built, transcript = _play(_load(path), test)
    assert transcript.outcome == "completed"
    verdict = _judge(built, transcript)
    assert verdict.passed, verdict.reason
    assert [c.reason for c in verdict.children if not c.passed] == []


def _booking(test_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    suite = _load(FIXTURES / "agent_booking.yaml")
    return suite, next(t for t in suite["tests"] if t["id"] == test_id)


def _failed(verdict: Verdict) -> dict[str, str]:
    return {c.name or c.kind: c.reason for c in verdict.children if not c.passed}


def test_booking_without_looking_at_a_taken_time_fails_every_check_it_breaks() -> None:
    suite, test = _booking("lookup-then-book")
    blind = [{"tool_calls": [{"name": "book_table", "arguments": {"restaurant": "Chez Marie", "day": "friday",
                                                                 "time": "20:00", "party_size": 4,
                                                                 "name": "Dupont"}}]},
             "Booked for 20:00."]
    built, transcript = _play(suite, test, blind)
    verdict = _judge(built, transcript)
    assert not verdict.passed and transcript.state == {"booked": False}
    failed = _failed(verdict)
    assert set(failed) == {"looked before booking", "tool_call", "the table is booked", "final_answer"}
    assert failed["the table is booked"] == ("final state: booked is False, expected one of [True]; "
                                             "booked_time is unset, expected one of ['19:00']")
    assert verdict.reason.startswith("required check the table is booked failed")


def test_asking_one_restaurant_after_the_other_is_not_parallel() -> None:
    suite, test = _booking("compare-two-restaurants")
    serial = [{"tool_calls": [{"name": "find_slots", "arguments": {"restaurant": "Chez Marie", "day": "friday"}}]},
              {"tool_calls": [{"name": "find_slots", "arguments": {"restaurant": "Le Petit Bistro",
                                                                  "day": "friday"}}]},
              "Chez Marie at 19:00 or 21:30, Le Petit Bistro at 20:00."]
    built, transcript = _play(suite, test, serial)
    failed = _failed(_judge(built, transcript))
    assert list(failed) == ["both asked in one turn"]
    assert "turn 1 lacks 'find_slots'" in failed["both asked in one turn"]


def test_inventing_a_cancel_tool_fails_the_gate() -> None:
    suite, test = _booking("no-cancel-tool")
    inventive = [{"tool_calls": [{"name": "cancel_booking", "arguments": {"id": "CM-1042"}}]},
                 "I can't cancel it: that tool failed."]
    built, transcript = _play(suite, test, inventive)
    assert transcript.invented_tools == 1
    verdict = _judge(built, transcript)
    assert not verdict.passed
    assert _failed(verdict) == {"invented no cancel tool": "1 call(s) to tools that do not exist: 'cancel_booking'",
                                "max_calls": "1 tool call(s), at most 0 allowed: cancel_booking"}


def test_a_golden_turn_list_is_what_compile_golden_reads() -> None:
    turns, problems = compile_golden(_booking("lookup-then-book")[1]["golden"])
    assert problems == [] and isinstance(turns[0], GoldenTurn) and turns[-1].content.startswith("Done")


def test_the_examples_of_docs_agents_md_work_together() -> None:
    """docs/agents.md's tools, checks and golden conversation: they compile, and the golden passes the checks."""
    text = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    fences = [textwrap.dedent(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)]
    yaml = YAML(typ="safe", pure=True)
    tools_block = yaml.load(fences[0])
    eval_block = yaml.load(fences[2])
    golden_block = yaml.load(fences[3])
    test = {"id": "doc", "prompt": "Book Friday 7pm.", "tools": list(tools_block["tools"]),
            "agent": {"state": {"booked": False}}, "golden": golden_block["golden"], "eval": eval_block["eval"]}
    built, transcript = _play({"tools": tools_block["tools"]}, test)
    verdict = _judge(built, transcript)
    assert verdict.passed and len(verdict.children) == 3, verdict.reason
    assert transcript.state == {"booked": True, "booked_time": "19:00"}


@pytest.mark.parametrize(("path", "test"), _tests())
def test_every_evaluator_fits_the_generated_schema(path: Path, test: dict[str, Any]) -> None:
    """The evaluator fragments in schemas/suite.schema.json accept the example's checks (editors and the
    loader validate against them), and still reject a misspelt option."""
    import jsonschema

    from engine.suite.schema import load_schema

    defs = load_schema("suite")["$defs"]
    validator = jsonschema.Draft202012Validator({"$ref": "#/$defs/evaluator", "$defs": defs})
    assert [e.message for e in validator.iter_errors(test["eval"])] == []
    assert list(validator.iter_errors({"tool_call": {"name": "book_table", "at": "final"}}))
    assert list(validator.iter_errors({"tool_sequence": ["a"], "order": "strict"}))
