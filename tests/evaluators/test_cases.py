"""Data-driven evaluator cases: tests/evaluators/cases/*.yaml.

Each case gives an answer, an evaluator, and the expected score, pass/fail and reason (exactly as
printed), plus optional `variables`, `tools`, `threshold` and `error: true` for error verdicts, and `record`
(what the run recorded: `engine.evaluators.base.Record`'s fields) for the record kinds; `python` scorer files
are looked up beside these case files.
An answer is text, or a mapping {text, tool_calls: [{name, arguments} | {name, raw_arguments}]}.

A trajectory case gives `conversation` instead of `answer`: the model's turns as a golden conversation
is written (engine/agent/golden.py), replayed through the real agent loop with `agent_tools` (a suite's
`tools:` mapping, `returns` included, compiled by engine/suite/tools.py), optional `state` (the initial
state) and `max_turns`; the transcript is scored with its final answer, as the runner scores agent tests.

A stored-row case gives `stored` instead: an agent row's columns as Parquet holds them (`outcome`, `ledger`,
`tool_events`, ...), read back by `engine.agent.stored.transcript_of_row` as `engine rescore` reads them;
`workspace: true` makes the test a workspace test (no files: nothing runs).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from engine.agent.golden import replay_golden
from engine.agent.stored import transcript_of_row
from engine.evaluators import score
from engine.model.agent import AgentSettings
from engine.model.answer import Answer, ToolCall
from engine.model.scoring import Record, ScoringContext
from engine.model.test import Test
from engine.model.transcript import Transcript
from engine.model.verdict import Verdict
from engine.model.workspace import WorkspaceSpec
from engine.suite.agent import compile_golden
from engine.suite.tools import compile_tools
from tests.factories import make_test as build_test

CASES_DIR = Path(__file__).parent / "cases"


def _load() -> list[Any]:
    yaml = YAML(typ="safe", pure=True)
    params = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        for i, case in enumerate(yaml.load(path.read_text(encoding="utf-8"))):
            params.append(pytest.param(case, id=f"{path.stem}:{i}:{case.get('name', '')}"))
    return params


def make_answer(raw: Any) -> Answer:
    if isinstance(raw, str):
        return Answer(text=raw)
    calls = []
    for call in raw.get("tool_calls") or []:
        if "raw_arguments" in call:
            calls.append(ToolCall.from_raw(call["name"], call["raw_arguments"]))
        else:
            calls.append(ToolCall.from_arguments(call["name"], call.get("arguments", {})))
    return Answer(text=raw.get("text", ""), tool_calls=tuple(calls))


def make_test(case: dict[str, Any]) -> Test:
    schemas = dict(case.get("tools") or {})
    schemas.update({name: spec.get("parameters", {}) for name, spec in (case.get("agent_tools") or {}).items()})
    tools = tuple({"type": "function", "function": {"name": name, "parameters": params}}
                  for name, params in schemas.items())
    return build_test(suite="cases", id=case.get("name", "case"), file="cases.yaml", line=0, messages=(), prompt="",
                      eval=case["eval"], golden=case.get("golden"), variables=case.get("variables") or {}, tools=tools,
                      threshold=case.get("threshold", 1.0), suite_dir=str(CASES_DIR),
                      workspace=WorkspaceSpec() if case.get("workspace") else None)


def replay(case: dict[str, Any]) -> Transcript:
    """The case's conversation played through the agent loop with its declared tools."""
    tools, problems = compile_tools(case.get("agent_tools") or {})
    turns, golden_problems = compile_golden(case["conversation"])
    assert not problems and not golden_problems, problems + golden_problems
    settings = AgentSettings(max_turns=case.get("max_turns", 8))
    return asyncio.run(replay_golden(turns, [{"role": "user", "content": "q"}], tools, settings,
                                     state=case.get("state")))


def prepare_case(case: dict[str, Any]) -> tuple[Test, Answer, ScoringContext]:
    """The case's test, the answer it scores and its scoring context."""
    test = make_test(case)
    record = Record(**case["record"]) if "record" in case else None
    if "conversation" in case or "stored" in case:
        transcript = replay(case) if "conversation" in case else transcript_of_row({"transcript": [],
                                                                                  **case["stored"]})
        assert transcript is not None
        return test, transcript.answer(), ScoringContext(test, test.variables, transcript=transcript, record=record)
    return test, make_answer(case["answer"]), ScoringContext(test, test.variables, record=record)


def score_case(case: dict[str, Any]) -> Verdict:
    return score(*prepare_case(case))


@pytest.mark.parametrize("case", _load())
def test_case(case: dict[str, Any]) -> None:
    verdict = score_case(case)
    got = {"score": round(verdict.score, 4), "passed": verdict.passed, "reason": verdict.reason,
           "error": verdict.error}
    want = {"score": round(float(case["score"]), 4), "passed": case.get("passed", case["score"] >= 1),
            "reason": case["reason"], "error": case.get("error", False)}
    assert got == want


def test_every_catalogue_kind_has_cases() -> None:
    from engine.evaluators import KINDS

    kinds: set[str] = set()
    for param in _load():
        kinds.update(make_test(param.values[0]).evaluator.kinds())   # the tree's own walker
    missing = set(KINDS) - {"exec"} - kinds  # exec has its own tests (tests/harness)
    assert not missing, f"no data-driven case for {sorted(missing)}"


def test_every_case_scores_the_same_in_a_scoring_process() -> None:
    """The run scores what may not score inline in a scoring process, which compiles the tree again from the
    test's spec and variables: each case's verdict there is the verdict here (a conversation's transcript and the
    run's record travel with it)."""
    from engine.evaluators import score_async
    from engine.evaluators.scoring_pool import ScoringPool

    prepared = [prepare_case(param.values[0]) for param in _load()]

    async def through_the_pool() -> list[Verdict]:
        pool = ScoringPool(processes=2)
        try:
            return [await score_async(test, answer, ctx, places=pool) for test, answer, ctx in prepared]
        finally:
            pool.close()

    pooled = asyncio.run(through_the_pool())
    assert [score(test, answer, ctx) for test, answer, ctx in prepared] == pooled
