"""Hostile JSON in an answer: nested past what the interpreter reads, or past what a schema walk can descend. Each
is JSON the answer does not have, a fail with its reason: an answer must not turn its fail into an error row."""

from __future__ import annotations

from typing import Any

import pytest

from engine.evaluators import score
from engine.model.answer import Answer
from tests.factories import make_test

DEEP = "[" * 3000 + "]" * 3000                  # past the JSON reader's recursion (1000)
WALKED = "[" * 600 + "]" * 600                    # readable, but past a recursive schema's walk


@pytest.mark.parametrize(("spec", "text", "reason"), [
    ({"is_json": True, "strict": True}, DEEP,
     "the whole answer is not one JSON value (it is nested too deeply to read) in '[[["),
    ({"is_json": True, "strict": True, "fences": False}, '{"a": ' + DEEP + "}",
     "the whole answer is not one JSON value (it is nested too deeply to read) in '{\"a\": [[["),
    ({"json_schema": {"type": "array", "items": {"$ref": "#"}}}, WALKED,
     "the JSON is nested too deeply to check against the schema"),
    ({"json_field": {"path": "a", "exists": True}}, '{"a": ' + DEEP + "}", "a should exist: "),
])
def test_json_nested_too_deeply_is_a_fail_with_its_reason(spec: dict[str, Any], text: str, reason: str) -> None:
    verdict = score(make_test(eval=spec), Answer(text=text))
    assert (verdict.passed, verdict.error) == (False, False), verdict.reason
    assert verdict.reason.startswith(reason), verdict.reason
