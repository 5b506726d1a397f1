"""The runner with agent jobs on the event loop: the global slot per model call, `--max-cost` per reply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from engine.model.test import Test
from engine.suite import load_suites
from tests.agent.scripted_server import ScriptedServer, Turn, model_turns
from tests.engine_proc import run_engine
from tests.run.helpers import make_model, run_jobs

SUITE = """\
suite: s
tools:
  slow:
    parameters: {type: object, properties: {n: {type: integer}}}
    returns: [{result: done, delay_s: 0.3}]
tests:
  - id: "t-{{ n }}"
    prompt: "conversation {{ n }}"
    tools: [slow]
    agent: {max_turns: 3}
    eval: {contains: done}
    cases: [{n: 0}, {n: 1}, {n: 2}, {n: 3}]
"""


def _tests(tmp_path: Path) -> list[Test]:
    path = tmp_path / "s.yaml"
    path.write_text(SUITE)
    suites, diagnostics = load_suites([path])
    assert diagnostics == []
    return list(suites[0].tests)


def _script(messages: list[dict[str, Any]]) -> Turn:
    if model_turns(messages) == 0:
        return Turn(tool_calls=[{"name": "slow", "arguments": {"n": 1}}])
    return Turn(content="done")


async def test_the_global_slot_is_held_per_model_call_not_across_tool_delays(tmp_path: Path) -> None:
    tests = _tests(tmp_path)[:2]
    async with ScriptedServer(_script) as server:
        model = make_model(server.base_url, concurrency=2)
        stats = await run_jobs(tmp_path / "run", [model], tests, concurrency=1)
        order = [(r["messages"][0]["content"], model_turns(r["messages"])) for r in server.requests]
    assert stats.done == 2
    # with one global slot, the second conversation's first call went while the first one's tool was busy
    assert order == [("conversation 0", 0), ("conversation 1", 0), ("conversation 0", 1), ("conversation 1", 1)]


async def test_max_cost_counts_each_reply_and_never_cuts_a_conversation(tmp_path: Path) -> None:
    async with ScriptedServer(_script) as server:
        # one reply costs (20 * 1 + 6 * 2) / 1e6; the budget is passed by the first reply of the first conversation
        model = make_model(server.base_url, concurrency=1, price_in=1.0, price_out=2.0)
        stats = await run_jobs(tmp_path / "run", [model], _tests(tmp_path), concurrency=1, max_cost=1e-5)
        requests = len(server.requests)
    assert stats.stopped == "budget"
    df = pd.read_parquet(tmp_path / "run")
    assert len(df) == 1 and df["turns"].tolist() == [2] and df["outcome"].tolist() == ["completed"]
    assert requests == 2
    assert stats.spend == 2 * 32 / 1e6 == df["cost"].iloc[0]   # counted once, reply by reply


async def test_an_agent_test_on_a_completions_model_gets_no_job_no_call_and_no_row(tmp_path: Path) -> None:
    """/completions cannot send tools: the pair is left out (engine run says so), not paid for or scored."""
    from engine.run.jobs import iter_jobs, runs_on

    async with ScriptedServer(_script) as server:
        completions = make_model(server.base_url, api="completions")
        chat = make_model(server.base_url)
        tests = _tests(tmp_path)[:1]
        assert not runs_on(completions, tests[0]) and runs_on(chat, tests[0])
        assert list(iter_jobs(completions, tests, None)) == []
        stats = await run_jobs(tmp_path / "run", [completions], tests)
        assert server.requests == []
    assert stats.done == 0 and stats.errors == 0


def test_dry_run_lists_no_agent_test_for_a_completions_model(tmp_path: Path) -> None:
    """`--dry-run` shows what the run would send: agent tests on completions-API models are left out there too."""
    import json

    models = tmp_path / "models.yaml"
    models.write_text("models:\n"
                      "  comp: {base_url: 'http://127.0.0.1:9/v1', model: x, api: completions}\n"
                      "  chat: {base_url: 'http://127.0.0.1:9/v1', model: x}\n", encoding="utf-8")
    suite = Path(__file__).resolve().parents[2] / "suites" / "agent_booking.yaml"
    done = run_engine("run", suite, "--models", models, "--dry-run", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    listed = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert listed and {item["model"] for item in listed} == {"chat"}
