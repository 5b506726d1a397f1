"""The entry point's contract: None specs, uses_exec, normalisation, crashes as error verdicts."""

from __future__ import annotations

from typing import Any

import pytest

from engine import evaluators
from engine.evaluators import evaluate, normalise_answer, uses_exec
from engine.evaluators.base import verdict
from engine.model import Answer
from engine.model import Test as EngineTest


def _test(**kw: Any) -> EngineTest:
    return EngineTest(suite="s", id="t", file="s.yaml", line=1, messages=(), prompt="", eval=None, **kw)


def test_no_spec_passes_with_a_reason() -> None:
    v = evaluate(None, Answer(text="anything"), _test())
    assert (v.score, v.passed, v.reason) == (1.0, True, "no evaluator")


@pytest.mark.parametrize(("spec", "expected"), [
    ({"exec": {"harness": "python-script"}}, True),
    ({"all": [{"contains": "x"}, {"not": {"exec": {"harness": "h"}}}]}, True),
    ({"any": [{"contains": "exec"}]}, False),
    ({"json_field": {"path": "exec", "exists": True}}, False),
    (None, False),
])
def test_uses_exec(spec: Any, expected: bool) -> None:
    assert uses_exec(spec) is expected


def test_reasoning_is_never_scored() -> None:
    answer = Answer(text="<think>Lyon? no.</think>\n\nParis", reasoning="separately streamed")
    assert normalise_answer(answer).text == "Paris"
    assert normalise_answer(answer).reasoning == "separately streamed"
    assert normalise_answer(Answer(text="Paris <think>x</think>")).text == "Paris <think>x</think>"


def test_a_crashing_leaf_is_an_error_verdict_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(value: Any, options: Any, answer: Answer, ctx: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(evaluators.EVALUATORS, "contains", boom)
    v = evaluate({"all": [{"contains": "x"}, {"equals": "x"}]}, Answer(text="x"), _test())
    assert v.error and not v.passed
    assert v.reason == "could not judge contains: contains evaluator could not judge: RuntimeError: disk on fire"


def test_variables_and_golden_reach_templates() -> None:
    test = _test(golden={"age": 41}, variables={"city": "Paris"})
    v = evaluate({"all": [{"contains": "{{ city }}"}, {"json_field": {"path": "age", "equals": "{{ golden.age }}"}}]},
                 Answer(text='Paris: {"age": 41}'), test)
    assert v.passed, v.reason


def test_every_node_is_kept_for_the_breakdown() -> None:
    v = evaluate({"all": [{"contains": "a", "name": "has a"}, {"not": {"regex": "z"}}]}, Answer(text="a"), _test())
    assert [path for path, _ in v.walk()] == ["all", "all/0.contains", "all/1.not", "all/1.not/0.regex"]
    assert v.children[0].name == "has a"


def test_leaf_helper_clamps_scores() -> None:
    assert verdict(1.7, "r").score == 1.0 and verdict(-1, "r").score == 0.0
