"""A plan compiles each row exactly as compile_spec does (engine.evaluators.plan), or hands the row back.

Generated specs (leaves with templates in their value, options, common options, compositions mixing
templated and plain children) are compiled for generated rows both ways: where the plan gives a Node, it is
equal to compile_spec's and scores every answer the same; where it gives None, compile_spec's tree has a
problem (so the loader reports it, in compile_spec's words).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.evaluators import compile_spec, score_node
from engine.evaluators.plan import plan_spec
from engine.model import Answer, ToolCall
from tests.factories import make_test

_TEMPLATES = st.sampled_from(["{{ golden }}", "{{ a }}", "{{golden}}", " {{ golden }} ", "{{ golden }}!",
                              "x {{ a }} y", "{{ missing }}", "{{ golden | upper }}", "{{ none }}", "{{ a + 1 }}"])
_PLAIN_TEXT = st.sampled_from(["Paris", "7", "", "^\\w+$", "(", "3.5"])
_VALUES = st.one_of(_TEMPLATES, _PLAIN_TEXT, st.integers(-2, 9), st.sampled_from([2.5, True, None]))
_OPTIONS = st.dictionaries(st.sampled_from(["case_sensitive", "mode", "tolerance", "flags"]),
                           st.sampled_from([True, False, "any", "all", "i", 0.5, "{{ a }}", "bogus"]), max_size=2)
_COMMON = st.dictionaries(st.sampled_from(["weight", "threshold", "name", "must"]),
                          st.sampled_from([1, 0.5, 3, -1, 2, "w", True, "{{ a }}"]), max_size=2)


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    kind = st.sampled_from(["contains", "equals", "numeric", "regex", "starts_with", "not_contains", "exact_token"])
    return st.builds(lambda k, v, o, c: {k: v, **o, **c}, kind, _VALUES, _OPTIONS, _COMMON)


def _spec() -> st.SearchStrategy[Any]:
    def composite(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.builds(lambda k, items, c: {k: items, **c}, st.sampled_from(["all", "any"]),
                      st.lists(inner, min_size=1, max_size=3), _COMMON),
            st.builds(lambda child: {"not": child}, inner))
    return st.recursive(_leaf(), composite, max_leaves=4)


_ROWS = st.fixed_dictionaries({}, optional={
    "golden": st.one_of(st.sampled_from(["Paris", "7", "", "é"]), st.integers(-3, 12), st.sampled_from([2.5, None])),
    "a": st.one_of(st.sampled_from(["x", "7"]), st.integers(0, 3)),
})
_ANSWERS = [Answer(text=t) for t in ("Paris", "7", "the answer is 7.0", "", "PARIS!", "x 7 y", "1")]


def _problems(node: Any) -> list[str]:
    return [n.problem for _, n in node.walk() if n.problem is not None]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_spec(), row=_ROWS)
def test_a_plan_compiles_a_row_as_compile_spec_does(spec: Any, row: dict[str, Any]) -> None:
    plan = plan_spec(spec)
    if plan is None:
        return
    variables = {**row, "golden": row.get("golden")}
    planned, compiled = plan(variables), compile_spec(spec, variables)
    if planned is None:
        assert _problems(compiled), (spec, variables)
        return
    assert not _problems(compiled) and planned == compiled, (spec, variables)
    test = make_test(eval=spec, golden=row.get("golden"), variables=variables)
    ctx = __import__("engine.evaluators", fromlist=["context"]).context(test)
    for answer in _ANSWERS:
        assert score_node(planned, answer, ctx, 1.0) == score_node(compiled, answer, ctx, 1.0)


def test_the_bench_suites_specs_have_plans_and_share_their_plain_children() -> None:
    one_word = {"all": [{"regex": "^\\W*\\w+\\W*$"}, {"equals": "{{ golden }}", "weight": 3}], "name": "one_word"}
    for spec in ({"contains": "{{ golden }}"}, {"numeric": "{{ golden }}"}, one_word):
        plan = plan_spec(spec)
        assert plan is not None
        first, second = plan({"golden": "7"}), plan({"golden": 5})
        assert first is not None and second is not None
        assert first == compile_spec(spec, {"golden": "7"}) and second == compile_spec(spec, {"golden": 5})
    first, second = plan_spec(one_word)({"golden": "a"}), plan_spec(one_word)({"golden": "b"})  # type: ignore[misc]
    assert first.children[0] == second.children[0]
    plan = plan_spec(one_word)
    assert plan is not None and plan({"golden": "a"}).children[0] is plan({"golden": "b"}).children[0]  # type: ignore[union-attr]


def test_specs_a_plan_does_not_cover_get_none() -> None:
    assert plan_spec({"contains": "x", "weight": "{{ a }}"}) is None          # a template in a common option
    assert plan_spec({"json_field": {"path": "a", "equals": "{{ golden }}"}}) is not None
    assert plan_spec({"final_answer": {"contains": "{{ golden }}"}}) is None   # a child evaluator
    assert plan_spec({"use": "x"}) is None
    assert plan_spec({"all": [{"regex": "("}, {"equals": "{{ golden }}"}]}) is None   # a broken plain child
    assert plan_spec({"tool_call": {"name": "f", "args": {"x": ["{{ golden }}"]}}, "order": "any"}) is not None
    call = Answer(tool_calls=(ToolCall.from_arguments("f", {"x": "v"}),))
    plan = plan_spec({"tool_call": {"name": "f", "args": {"x": ["{{ golden }}"]}}})
    assert plan is not None
    node = plan({"golden": "v"})
    assert node is not None and node == compile_spec({"tool_call": {"name": "f", "args": {"x": ["{{ golden }}"]}}},
                                                     {"golden": "v"})
    test = make_test(eval={"tool_call": {"name": "f"}}, golden="v", variables={"golden": "v"})
    ctx = __import__("engine.evaluators", fromlist=["context"]).context(test)
    assert score_node(node, call, ctx, 1.0).passed
