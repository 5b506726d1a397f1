"""Every pattern on RE2 reads any answer: half a UTF-16 surrogate pair (a reply's `"\\ud800"` escape, which
Python's JSON decoder keeps as a lone surrogate) is read as U+FFFD, in the one place patterns are matched, so
no check that uses a pattern gives an error verdict on such an answer."""

from __future__ import annotations

from typing import Any

import pytest

from engine.base.patterns import compile_re2
from engine.evaluators import score
from engine.model.answer import Answer
from engine.model.test import Test

LONE = "\ud800"


def _score(spec: dict[str, Any], text: str) -> tuple[float | None, bool, str]:
    test = Test(suite="s", id="t", file="f", line=1, messages=(), prompt="", eval=spec)
    found = score(test, Answer(text=text))
    return found.score, found.error, found.reason


@pytest.mark.parametrize(("spec", "text", "expected"), [
    ({"regex": "^ok [0-9]+$"}, f"ok {LONE}", 0.0),
    ({"regex": "needle"}, f"half {LONE} a pair, then the needle", 1.0),
    ({"regex": "x.y", "flags": "s"}, f"x{LONE}y", 1.0),   # the half is one character, as U+FFFD
    ({"numeric": 42, "pattern": "total: (\\S+)"}, f"{LONE} total: 42", 1.0),
    ({"json_field": {"path": "name", "matches": "^a.c$"}}, '{"name": "a\\ud800c"}', 1.0),
    ({"json_schema": {"type": "object", "patternProperties": {"^k": {"type": "integer"}}}},
     '{"k\\udfff": "not a number"}', 0.0),
])
def test_a_check_with_a_pattern_judges_an_answer_holding_half_a_surrogate_pair(
        spec: dict[str, Any], text: str, expected: float) -> None:
    got, failed, reason = _score(spec, text)
    assert (got, failed) == (expected, False), reason


def test_positions_and_groups_are_the_texts_own() -> None:
    pattern = compile_re2(r"b(.)d")
    text = f"a{LONE}bcd{LONE}"
    match = pattern.search(text)
    assert match is not None and match.span() == (2, 5) and match.group(1) == "c"
    assert [m.span() for m in compile_re2(".").finditer(text)] == [(i, i + 1) for i in range(len(text))]
    assert compile_re2("c").split(text) == ["a\ufffdb", "d\ufffd"]   # pieces of the text as RE2 read it
    assert compile_re2(r"\w").findall(f"{LONE}x") == ["x"]
    assert compile_re2("x").match(f"{LONE}x", 1) is not None and compile_re2("x").fullmatch(LONE) is None
