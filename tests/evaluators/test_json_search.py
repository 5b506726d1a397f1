"""The search for the last balanced JSON value in an answer (find_json past its fence and whole-answer reads).

It must take what trying the decoder at every `{` and `[` takes (the plain search, kept here only as the oracle),
and do work linear in the answer: an answer written to make the search slow must get its fail, not an error row
from the scoring process's time limit.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.base.words import short
from engine.evaluators import score_async
from engine.evaluators.json_eval import find_json
from engine.evaluators.json_search import MAX_DEPTH
from engine.evaluators.scoring_pool import ScoringPool
from engine.model.answer import Answer
from engine.model.scoring import ScoringContext
from tests.factories import make_test

_FENCE = re.compile(r"```(?:json|JSON)\s*\n(.*?)```", re.DOTALL)


def _plain_loads(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("it is nested too deeply to read") from None


def plain_find_json(text: str) -> tuple[Any, str | None]:
    """The oracle: find_json as it was, the decoder tried at every `{` and `[` (quadratic on hostile text)."""
    fence_error = None
    for fence in reversed(_FENCE.findall(text)):
        try:
            return _plain_loads(fence), None
        except ValueError as exc:
            fence_error = f"the ```json block is not valid JSON: {exc}"
            break
    try:
        return _plain_loads(text.strip()), None
    except ValueError:
        pass
    decoder, last, found, i = json.JSONDecoder(), None, False, 0
    while i < len(text):
        if text[i] in "{[":
            try:
                last, i = decoder.raw_decode(text, i)
                found = True
                continue
            except (ValueError, RecursionError):
                pass
        i += 1
    if found:
        return last, None
    return None, fence_error or f"no JSON value found in {short(text)}"


def same(got: tuple[Any, str | None], want: tuple[Any, str | None]) -> bool:
    """Equal results, values compared as JSON text (1 is not 1.0, NaN is NaN)."""
    return json.dumps(got[0]) == json.dumps(want[0]) and got[1] == want[1]


FRAGMENTS = ["{", "}", "[", "]", '"', ",", ":", " ", "\n", "\\", '\\"', "\\u00e9", "\\u12", "\\x", "1", "-", "0",
             ".5", "e3", "E-", "true", "nul", "null", "NaN", "Infinity", "-Infinity", '"a"', '"[', ']"', '"{',
             '{"a": 1}', "[1, 2]", '{"a": [', '"b":', "x", "Sure: ", "```json\n", "```", "```JSON \x0c\n", "\x01",
             "\t", "é", "\ud800"]
texts = st.one_of(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join),
                  st.text(alphabet='{}[]",: 1\\ae\n', max_size=40))


@settings(max_examples=600, deadline=None)
@given(texts)
def test_the_search_takes_what_trying_every_start_takes(text: str) -> None:
    assert same(find_json(text), plain_find_json(text)), text


@pytest.mark.parametrize("text", [
    'Before [1, "]", {"k": "[{"}] after {"a": 1} and [2] trailing',
    '[1, 2, {"a": [3, 4]}, "x"',                      # cut off: the last whole object inside it is taken
    '{"a": "[1, 2]", "b": 1',                           # a value inside a string of a broken object
    '["\\"[1]", 2, [3]',
    "x [1, " + "9" * (sys.get_int_max_str_digits() + 1) + "] [2]",   # an integer int() will not read
    "x [1, " + "9" * sys.get_int_max_str_digits() + "] y",
    'x {"a": NaN, "b": -Infinity} [1.5e3, -0, 0.0e-0, 1E+2]',
    'x ["\\ud800\\udc00", "\\u00e9"] ["\x01"]',
    "x " + "[" * 300 + "]" * 300,
    "[" * 50 + "[1]" + " x",
    "[2] [1e]", "[2] [3E+]",                           # a number cut off (Python < 3.11.5 read `1e` possessively)
    "```json\n\n \n[1]``` ```JSON \t\n\n```",         # a fence's opening white space, to its last newline
])
def test_the_search_takes_what_trying_every_start_takes_on_odd_shapes(text: str) -> None:
    assert same(find_json(text), plain_find_json(text))


def test_a_container_nested_past_max_depth_is_not_taken_its_innermost_levels_are() -> None:
    text = "x " + "[" * (MAX_DEPTH + 100) + "]" * (MAX_DEPTH + 100)
    value, problem = find_json(text)
    depth = 0
    while isinstance(value, list):
        value, depth = (value[0] if value else None), depth + 1
    assert (depth, problem) == (MAX_DEPTH, None)


# ------------------------------------------------------------------------------------------ work, not time

SHAPES: dict[str, Callable[[int], str]] = {
    "open brackets": lambda n: "[" * n,
    "an open array": lambda n: "[" + "1," * (n // 2),
    "open objects": lambda n: '{"a":' * (n // 5),
    "brackets in strings": lambda n: '["' * (n // 2),
    "prose then broken starts": lambda n: "x" * (n // 2) + "[x" * (n // 4),
    "nested arrays": lambda n: "x [1," * (n // 5),
    "strings of brackets": lambda n: '["[",' * (n // 5),
    "objects in strings": lambda n: '{"a":"{' * (n // 7),
}   # (a fence of blank lines never closed was slow inside `re`, which this does not count: see the end to end)


class Work:
    """Work find_json does: the characters the JSON decoder reads (a failure also counts the characters before
    its place, which JSONDecodeError reads for its line and column; a decode that gives up at the nesting
    limit says no place and counts the rest of the text), plus every Python bytecode executed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.total = 0
        original = json.JSONDecoder.raw_decode

        def raw_decode(decoder: json.JSONDecoder, s: str, idx: int = 0) -> tuple[Any, int]:
            try:
                value, end = original(decoder, s, idx)
            except json.JSONDecodeError as exc:
                self.total += exc.pos - idx + exc.pos
                raise
            except RecursionError:
                self.total += len(s) - idx
                raise
            self.total += end - idx
            return value, end

        monkeypatch.setattr(json.JSONDecoder, "raw_decode", raw_decode)

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            self.total += 1
        return self._trace

    def of(self, text: str) -> int:
        self.total, tracer = 0, sys.gettrace()
        sys.settrace(self._trace)
        try:
            find_json(text)
        finally:
            sys.settrace(tracer)
        return self.total


@pytest.mark.parametrize("shape", SHAPES)
def test_the_search_does_work_linear_in_the_answer(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    work = Work(monkeypatch)
    small, large = (work.of(SHAPES[shape](n)) for n in (5_000, 20_000))
    assert large <= 5 * small, (small, large)


# ------------------------------------------------------------------------------------------ end to end

HOSTILE = {
    "open brackets": "[" * 200_000,
    "nested arrays": "x " + "[1," * 66_666,
    "a fence of newlines": "```json" + "\n" * 200_000,
}


def test_a_hostile_answer_to_is_json_gets_a_fail_row_from_the_scoring_process_not_an_error() -> None:
    """Through the scoring process a run uses, each under the check's default time limit: a fail each."""
    test = make_test(eval={"is_json": True})

    async def through_the_pool() -> list[Any]:
        pool = ScoringPool(processes=1)
        try:
            return [await score_async(test, Answer(text=text), ScoringContext(test, test.variables), places=pool)
                    for text in HOSTILE.values()]
        finally:
            pool.close()

    verdicts = asyncio.run(through_the_pool())
    assert [(v.passed, v.error) for v in verdicts] == [(False, False)] * len(HOSTILE), [v.reason for v in verdicts]
    assert all(v.reason.startswith("no JSON value found in ") for v in verdicts)
