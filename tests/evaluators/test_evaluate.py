"""The entry point's contract: no tree, blocking trees, crashes as error verdicts, templates, the breakdown."""

from __future__ import annotations

from typing import Any

import pytest

from engine.evaluators import KINDS, Kind, compile_spec, score
from engine.evaluators.base import verdict
from engine.model.answer import Answer
from tests.factories import make_test


def test_no_spec_is_an_error_never_a_pass() -> None:
    v = score(make_test(), Answer(text="anything"))
    assert (v.score, v.passed, v.error) == (0.0, False, True)
    assert v.reason.startswith("this test has no evaluator, so nothing checked its answer")


@pytest.mark.parametrize(("spec", "expected"), [
    ({"exec": {"harness": "python-script"}}, True),
    ({"all": [{"contains": "x"}, {"not": {"exec": {"harness": "h"}}}]}, True),
    ({"any": [{"contains": "exec"}]}, False),
    ({"json_field": {"path": "exec", "exists": True}}, False),
])
def test_a_tree_with_exec_anywhere_is_blocking(spec: Any, expected: bool) -> None:
    assert compile_spec(spec).blocking is expected


def test_a_crashing_leaf_is_an_error_verdict_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(answer: Answer, ctx: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(KINDS, "contains", Kind("crashes", {}, build=lambda value, options: boom))
    v = score(make_test(eval={"all": [{"contains": "x"}, {"equals": "x"}]}), Answer(text="x"))
    assert v.error and not v.passed
    assert v.reason == "could not judge contains: contains evaluator could not judge: RuntimeError: disk on fire"


def test_variables_and_golden_reach_templates() -> None:
    test = make_test(golden={"age": 41}, variables={"city": "Paris"},
                     eval={"all": [{"contains": "{{ city }}"},
                                   {"json_field": {"path": "age", "equals": "{{ golden.age }}"}}]})
    v = score(test, Answer(text='Paris: {"age": 41}'))
    assert v.passed, v.reason


def test_every_node_is_kept_for_the_breakdown() -> None:
    test = make_test(eval={"all": [{"contains": "a", "name": "has a"}, {"not": {"regex": "z"}}]})
    v = score(test, Answer(text="a"))
    assert [path for path, _ in v.walk()] == ["all", "all/0.contains", "all/1.not", "all/1.not/0.regex"]
    assert v.children[0].name == "has a"


def test_leaf_helper_clamps_scores() -> None:
    assert verdict(1.7, "r").score == 1.0 and verdict(-1, "r").score == 0.0
