"""Replay BFCL conformance cases through `engine.evaluators.score` (shared by the tests)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.evaluators import score
from engine.evaluators.tool_match import ExpectedCall, check_call
from engine.importers.bfcl import convert_entry, load_jsonl
from engine.model.answer import Answer, ToolCall
from engine.model.test import Test
from tests.factories import make_test as build_test

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
LIVE_CATEGORIES = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance")
# BFCL's verdicts on the live categories, made by make_bfcl_live_conformance.py with BFCL's own checker.
LIVE_CONFORMANCE = Path(__file__).resolve().parents[1] / "fixtures" / "bfcl" / "live_checker_conformance.jsonl.gz"


@dataclass
class Outcome:
    case_id: str
    expected: bool
    got: bool
    reason: str
    greedy_only: bool  # BFCL's greedy first-fit fails where a maximum matching exists


def load_entries(bfcl_dir: Path) -> dict[str, tuple[dict[str, Any], dict[str, Any] | None, str]]:
    entries: dict[str, tuple[dict[str, Any], dict[str, Any] | None, str]] = {}
    for category in CATEGORIES + LIVE_CATEGORIES:
        answer_file = bfcl_dir / "possible_answer" / f"BFCL_v4_{category}.json"
        answers = {a["id"]: a for a in load_jsonl(answer_file)} if answer_file.exists() else {}
        for question in load_jsonl(bfcl_dir / f"BFCL_v4_{category}.json"):
            entries[question["id"]] = (question, answers.get(question["id"]), category)
    return entries


_TESTS: dict[tuple[str, bool], Test] = {}


def make_test(entry: tuple[dict[str, Any], dict[str, Any] | None, str], underscore_to_dot: bool) -> Test:
    """The Test the importer's conversion makes of one entry (built once per entry and mode)."""
    key = (str(entry[0]["id"]), underscore_to_dot)
    if key not in _TESTS:
        _TESTS[key] = _convert(entry, underscore_to_dot)
    return _TESTS[key]


def _convert(entry: tuple[dict[str, Any], dict[str, Any] | None, str], underscore_to_dot: bool) -> Test:
    question, answer, category = entry
    mapping, tools = convert_entry(question, answer, category, underscore_to_dot)
    return build_test(suite=f"bfcl_{category}", id=mapping["id"], file="<bfcl>", line=0,
                      messages=tuple(mapping["messages"]), prompt="", eval=mapping["eval"],
                tools=tuple({"type": "function", "function": {**body, "name": n}}   # the key: `name:` is the API's
                            for n, body in tools.items()))


def calls_from_decoded(decoded: list[dict[str, Any]] | None) -> tuple[ToolCall, ...]:
    calls = []
    for item in decoded or []:
        for name, args in item.items():  # an empty {} is no call, as BFCL's is_empty_output says
            calls.append(ToolCall.from_arguments(name, args))
    return tuple(calls)


def greedy_fails(test: Test, calls: tuple[ToolCall, ...]) -> bool:
    """Would BFCL's first-fit matching fail although every expected call can be matched?"""
    body = test.eval["tool_call"] if test.eval else {}
    if "calls" not in body or len(body["calls"]) != len(calls):
        return False
    expected = [ExpectedCall(c["name"], c["args"]) for c in body["calls"]]
    used: set[int] = set()
    for want in expected:
        for j, call in enumerate(calls):
            if j not in used and check_call(want, call, profile="bfcl", schemas=test.tool_schemas,
                                            underscore_to_dot=bool(body.get("underscore_to_dot"))) is None:
                used.add(j)
                break
        else:
            return True
    return False


def replay(case: dict[str, Any], entries: dict[str, Any], calls: tuple[ToolCall, ...] | None = None,
           text: str = "") -> Outcome:
    underscore_to_dot = case["model_mode"] == "fc_underscore_to_dot"
    test = make_test(entries[case["test_id"]], underscore_to_dot)
    if calls is None:
        calls = calls_from_decoded(case.get("decoded_calls"))
        text = case.get("model_output_text", "") if case.get("decoded_calls") is None else ""
    verdict = score(test, Answer(text=text, tool_calls=calls))
    greedy = verdict.passed and not case["expected_valid"] and greedy_fails(test, calls)
    return Outcome(case.get("case_id", case.get("rule", "")), case["expected_valid"], verdict.passed,
                   verdict.reason, greedy)


def load_conformance(bfcl_dir: Path) -> list[dict[str, Any]]:
    """The shared conformance cases (the five non-live categories)."""
    return _read_jsonl_gz(bfcl_dir / "checker_conformance.jsonl.gz")


def load_live_conformance() -> list[dict[str, Any]]:
    """The live categories' conformance cases (tests/fixtures/bfcl)."""
    return _read_jsonl_gz(LIVE_CONFORMANCE)


def _read_jsonl_gz(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]
