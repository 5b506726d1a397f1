"""Hypothesis properties of scoring and composition (modest example counts)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.evaluators import score
from engine.model.answer import Answer, ToolCall
from tests.factories import make_test

WORDS = ["Paris", "lyon", "42", "-3.5", "1,234", "{", "}", "[1, 2]", '{"a": 1}', "sorry", "```json", "<think>", "é"]

LEAVES: list[dict[str, Any]] = [
    {"equals": "Paris"}, {"equals": 42}, {"contains": ["Paris", "lyon", "sorry"]},
    {"contains": ["Paris", "42"], "mode": "any"}, {"not_contains": ["sorry", "{"]}, {"regex": r"\d+"},
    {"starts_with": "Paris"}, {"numeric": 42, "tolerance": 0.5}, {"numeric": "1234", "rel_tolerance": 0.01},
    {"exact_token": "paris"}, {"length": {"min_words": 2, "max_chars": 40}}, {"is_json": True},
    {"json_schema": {"type": "object", "required": ["a"]}}, {"json_field": {"path": "a", "equals": 1}},
    {"json_field": {"path": "[0]", "approx": 1, "tolerance": 0.1}},
    {"tool_call": {"name": "f", "args": {"x": [1, ""]}}}, {"tool_call": {"calls": [{"name": "f"}, {"name": "g"}]}},
    {"no_tool_call": True}, {"tool_sequence": ["f", "g"], "exact": False}, {"first_tool": "f"},
]

texts = st.one_of(st.text(max_size=80), st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join))
calls = st.lists(st.builds(ToolCall.from_raw, st.sampled_from(["f", "g", "h"]),
                           st.sampled_from(['{"x": 1}', '{"x": "1"}', "{}", "{bad", '{"y": 2}', "[]"])), max_size=3)
answers = st.builds(lambda text, cs: Answer(text=text, tool_calls=tuple(cs)), texts, calls)
leaves = st.sampled_from(LEAVES)


def _tree(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    weighted = st.builds(lambda spec, w: {**spec, "weight": w}, children, st.sampled_from([0, 0.5, 1, 3]))
    return st.one_of(
        st.lists(weighted, min_size=1, max_size=3).map(lambda cs: {"all": cs}),
        st.lists(children, min_size=1, max_size=3).map(lambda cs: {"any": cs}),
        children.map(lambda c: {"not": c}),
        st.builds(lambda c, t: {**c, "threshold": t}, children, st.sampled_from([0.0, 0.5, 1.0])),
    )


specs = st.recursive(leaves, _tree, max_leaves=6)


def run(spec: dict[str, Any], answer: Answer, threshold: float = 1.0) -> Any:
    return score(make_test(eval=spec, threshold=threshold), answer)


@settings(max_examples=150, deadline=None)
@given(specs, answers)
def test_every_score_is_in_unit_interval(spec: dict[str, Any], answer: Answer) -> None:
    for _, node in run(spec, answer).walk():
        assert 0.0 <= node.score <= 1.0
        assert node.reason and "\n" not in node.reason


@settings(max_examples=100, deadline=None)
@given(specs, answers)
def test_not_not_is_identity(spec: dict[str, Any], answer: Answer) -> None:
    once, twice = run(spec, answer), run({"not": {"not": spec}}, answer)
    assert abs(twice.score - once.score) < 1e-12  # 1 - (1 - x) may differ from x in the last bit
    assert twice.error == once.error
    if not once.error and "threshold" not in spec:  # a root threshold of its own changes `passed` only
        assert twice.passed == once.passed


@settings(max_examples=100, deadline=None)
@given(specs, answers)
def test_all_of_one_child_equals_the_child(spec: dict[str, Any], answer: Answer) -> None:
    child, wrapped = run(spec, answer), run({"all": [spec]}, answer)
    assert (wrapped.score, wrapped.error) == (child.score, child.error)
    if "threshold" not in spec:  # at the root, a threshold of its own decides `passed`
        assert wrapped.passed == child.passed


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(leaves, st.sampled_from([0.5, 1, 2, 5])), min_size=1, max_size=4), answers,
       st.sampled_from([0.1, 3, 10]))
def test_scaling_all_weights_changes_nothing(children: list[Any], answer: Answer, k: float) -> None:
    base = run({"all": [{**c, "weight": w} for c, w in children]}, answer)
    scaled = run({"all": [{**c, "weight": w * k} for c, w in children]}, answer)
    assert abs(base.score - scaled.score) < 1e-9
    assert base.passed == scaled.passed


@settings(max_examples=100, deadline=None)
@given(st.lists(specs, min_size=1, max_size=3), answers)
def test_any_is_at_least_each_child(children: list[dict[str, Any]], answer: Answer) -> None:
    verdict = run({"any": children}, answer)
    if not verdict.error:
        assert all(verdict.score >= child.score for child in verdict.children)


@settings(max_examples=100, deadline=None)
@given(specs, st.lists(specs, max_size=2), answers)
def test_a_failing_gate_fails_its_parent(gate: dict[str, Any], others: list[dict[str, Any]],
                                          answer: Answer) -> None:
    verdict = run({"all": [{**gate, "must": True}, *others], "threshold": 0.0}, answer, threshold=0.0)
    gate_verdict = verdict.children[0]
    if not gate_verdict.passed:
        assert not verdict.passed


@settings(max_examples=200, deadline=None)
@given(leaves, answers)
def test_no_evaluator_raises_on_any_answer(spec: dict[str, Any], answer: Answer) -> None:
    verdict = run(spec, answer)
    assert not verdict.error, verdict.reason  # these specs are valid: any answer gets a real verdict
