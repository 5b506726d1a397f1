"""The compiled tree and the registry: one catalogue, one walker, one pass rule, async scorers first-class."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from engine.evaluators import COMPOSITIONS, KINDS, Kind, compile_spec, score, score_async
from engine.evaluators.base import verdict
from engine.evaluators.registry import MODEL_GRADED
from engine.model.answer import Answer
from engine.model.scoring import ScoringContext
from engine.model.verdict import Verdict
from engine.suite import load_suites
from engine.suite.schema import load_schema
from tests.factories import make_test

ROOT = Path(__file__).resolve().parents[2]


def _documented(doc: str, pattern: str, section: str | None = None) -> set[str]:
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    if section is not None:
        text = text.split(section, 1)[1]
    return set(re.findall(pattern, text, flags=re.MULTILINE))


def test_registry_schema_and_both_docs_name_the_same_kinds() -> None:
    schema_kinds = {k[len("eval_"):] for k in load_schema("suite")["$defs"] if k.startswith("eval_")}
    evaluators_md = _documented("evaluators.md", r"^### `(\w+)`$")
    architecture_md = _documented("architecture.md", r"^\| `(\w+)` \|", "## The evaluator catalogue")
    assert set(KINDS) == schema_kinds == evaluators_md == architecture_md


def test_every_leaf_kind_has_a_builder_and_compositions_have_none() -> None:
    assert {k for k, entry in KINDS.items() if entry.build is None} == {"all", "any", "not", "use"}
    assert [k for k, entry in KINDS.items() if entry.blocking] == ["exec", "python", "workspace_check"]


def test_the_kinds_the_catalogue_says_call_a_model_are_the_ones_whose_scorer_awaits() -> None:
    # `Kind.calls_model` is what the run reads to resolve judge and embedding models before any call
    awaits = {kind for kind, entry in KINDS.items() if kind not in {"final_answer", *COMPOSITIONS}
              for example in entry.examples if compile_spec(example, {"golden": "1"}).is_async}
    assert awaits == MODEL_GRADED == {"judge", "similar"}


def test_compiling_binds_options_and_renders_templates_once() -> None:
    node = compile_spec({"all": [{"contains": "{{ city }}", "weight": 2, "name": "city"},
                                 {"not": {"regex": "sorry", "flags": "i"}, "must": True}], "threshold": 0.5},
                        {"city": "Paris"})
    assert (node.kind, node.threshold, node.problem) == ("all", 0.5, None)
    first, second = node.children
    assert (first.kind, first.weight, first.name, first.scorer is not None) == ("contains", 2.0, "city", True)
    assert (second.kind, second.must, second.children[0].kind) == ("not", True, "regex")
    assert [(path, n.kind) for path, n in node.walk()] == [
        ((), "all"), (("all", 0), "contains"), (("all", 1), "not"), (("all", 1, "not"), "regex")]
    assert node.kinds() == ["all", "contains", "not", "regex"]


def test_the_tree_final_answer_holds_is_walked_and_its_holder_stays_a_leaf() -> None:
    judge = {"judge": {"rubric": "Does it name the capital?", "model": "grader"}}
    node = compile_spec({"all": [{"final_answer": {"all": [judge, {"contains": "Paris"}]}}, {"max_turns": 3}]})
    holder = node.children[0]
    assert holder.children == () and holder.scorer is not None and holder.held is not None   # scored as a leaf
    assert [(path, n.kind) for path, n in node.walk()] == [
        ((), "all"), (("all", 0), "final_answer"), (("all", 0, "final_answer"), "all"),
        (("all", 0, "final_answer", "all", 0), "judge"), (("all", 0, "final_answer", "all", 1), "contains"),
        (("all", 1), "max_turns")]
    assert node.kinds() == ["all", "final_answer", "judge", "contains", "max_turns"]
    # the leaves that score under their own limits: the held tree's score inside their holder's
    assert [n.kind for _, n in node.walk(enter_held=False)] == ["all", "final_answer", "max_turns"]


@pytest.mark.parametrize(("spec", "problem"), [
    ({"contains": "Paris", "mode": "most"}, "contains: mode must be 'all' or 'any', got 'most'"),
    ({"regex": "("}, "regex: invalid pattern '(': missing ), unterminated subpattern at position 0"),
    ({"tool_call": {"calls": [{"name": "f"}], "count": 2}},
     "tool_call: count 2 differs from the 1 listed calls; remove `count` or make them agree"),
    ({"json_field": {"path": "a", "type": "text"}}, "json_field: unknown type 'text'; use one of string, number"),
    ({"equals": "{{ capital }}"}, "template error in the equals evaluator: 'capital' is undefined"),
])
def test_a_bad_option_is_a_problem_on_the_node_and_an_error_verdict_not_a_value_error(
        spec: dict[str, Any], problem: str) -> None:
    node = compile_spec(spec, {})
    assert node.problem is not None and node.problem.startswith(problem)
    v = score(make_test(eval=spec), Answer(text="x"))
    assert v.error and v.reason.startswith(problem) and "ValueError" not in v.reason


def test_a_failed_must_fails_the_golden_check_as_it_fails_the_run(tmp_path: Path) -> None:
    spec = {"all": [{"contains": "X", "must": True}, {"contains": "Y"}, {"contains": "Z"}]}
    run_verdict = score(make_test(eval=spec, threshold=0.5), Answer(text="Y Z"))
    assert run_verdict.score == pytest.approx(2 / 3) and not run_verdict.passed
    path = tmp_path / "s.yaml"
    path.write_text("suite: s\ntests:\n  - id: gated\n    prompt: p\n    threshold: 0.5\n    golden: Y Z\n"
                    "    eval:\n      all:\n        - {contains: X, must: true}\n        - contains: Y\n"
                    "        - contains: Z\n", encoding="utf-8")
    suites, diagnostics = load_suites([path], golden_check=True)
    assert suites == []
    [problem] = diagnostics
    assert problem.message == ("test 'gated': the golden answer scores 0.67 but fails: required check contains "
                               f"failed: {run_verdict.children[0].reason}; fix the golden or the evaluator")


def test_a_root_threshold_of_its_own_is_respected_by_the_golden_check(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("suite: s\ntests:\n  - id: half\n    prompt: p\n    golden: Paris\n"
                    "    eval: {all: [{contains: Paris}, {contains: Lyon}], threshold: 0.5}\n", encoding="utf-8")
    suites, diagnostics = load_suites([path], golden_check=True)
    assert diagnostics == [] and len(suites) == 1
    assert score(suites[0].tests[0], Answer(text="Paris")).passed


def test_case_rows_of_a_spec_without_templates_share_one_compiled_tree(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("suite: s\ndefaults:\n  eval: {contains: ok}\ntests:\n"
                    "  - id: t-{{ n }}\n    prompt: '{{ n }}'\n    cases: [{n: 1}, {n: 2}]\n"
                    "  - id: u\n    prompt: p\n"
                    "  - id: v-{{ n }}\n    prompt: p\n    cases: [{n: 1, golden: a}, {n: 2, golden: b}]\n"
                    "    eval: {equals: '{{ golden }}'}\n", encoding="utf-8")
    [suite], diagnostics = load_suites([path])
    assert diagnostics == []
    t1, t2, u, v1, v2 = suite.tests
    assert t1.evaluator is t2.evaluator is u.evaluator           # one default, compiled once
    assert v1.evaluator is not v2.evaluator                       # templated: one tree per row, rendered
    assert score(v1, Answer(text="a")).passed and not score(v2, Answer(text="a")).passed


def _slow_kind(log: list[str]) -> Kind:
    """An async scorer standing in for a model-graded judge: it awaits, then agrees with `contains`."""

    def build(value: Any, options: Any) -> Any:
        async def judge(answer: Answer, ctx: ScoringContext) -> Verdict:
            log.append(f"start {value}")
            await asyncio.sleep(0)   # yields to the loop: the sibling judge starts before this one ends
            log.append(f"end {value}")
            return verdict(1.0 if value in answer.text else 0.0, f"judged {value}", "judge")

        return judge

    return Kind("test judge", {"type": "string"}, build=build)


def test_an_async_scorer_is_first_class_and_siblings_are_awaited_concurrently(
        monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    monkeypatch.setitem(KINDS, "judge", _slow_kind(log))
    test = make_test(eval={"all": [{"judge": "Paris"}, {"judge": "France"}, {"contains": "Paris"}]})
    assert test.evaluator is not None and test.evaluator.is_async and not test.evaluator.blocking
    v = asyncio.run(score_async(test, Answer(text="Paris, France")))
    assert v.passed and [c.reason for c in v.children][:2] == ["judged Paris", "judged France"]
    assert log == ["start Paris", "start France", "end Paris", "end France"]
    log.clear()
    assert score(test, Answer(text="Lyon")).children[0].reason == "judged Paris"   # the sync entry runs it too


@pytest.mark.parametrize(("spec", "memory_mb", "problem"), [
    ({"is_json": True}, 1024, None),
    ({"is_json": True, "memory_mb": "{{ mb }}"}, 4096, None),
    ({"is_json": True, "memory_mb": "{{ mb // 1000 }}"}, 1024, "memory_mb must be a whole number of MiB from 16 "
                                                              "to 1048576, got 4"),
    ({"is_json": True, "memory_mb": True}, 1024, "memory_mb must be a whole number of MiB from 16 to 1048576, "
                                                 "got True"),
    ({"workspace_check": {"command": "true"}, "memory_mb": 2048}, 2048,
     "`memory_mb` beside workspace_check does not apply: workspace_check runs a program under the limits of the "
     "test's `workspace:` block: write `memory_mb` there"),
])
def test_a_checks_memory_limit_is_read_once_and_checked(spec: dict[str, Any], memory_mb: int,
                                                       problem: str | None) -> None:
    node = compile_spec(spec, {"mb": 4096})
    assert node.problem == problem
    assert node.memory_mb == memory_mb
