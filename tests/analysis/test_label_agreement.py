"""`label_agreement` against real scoring: a tree scored for real (the judge played by a caller giving a fixed
grade), its checks recorded as a run records them, and each check compared with the outcome that makes the
labelled verdict true, not with that truth itself. A judge under `not` is right when it failed a verdict that
rightly passed; a `weight: 0` check never decides the verdict, so a label says nothing about it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from engine.analysis.labels import KEY, NO_TREE, NOT_DECIDED, label_agreement, render_labels
from engine.evaluators.scoring import context, score_async
from engine.model.answer import Answer
from engine.model.scoring import JudgeReply
from engine.model.test import Test
from engine.results.rows import evaluator_nodes
from tests.factories import make_test

ANSWER = "Paris is lovely"
JUDGE: dict[str, Any] = {"judge": {"rubric": "Does not name a capital.", "model": "grader"}}
# Paris passes; the judge under `not`; Lyon fails but is reported only (weight 0).
TREE: dict[str, Any] = {"all": [{"contains": "Paris"}, {"not": JUDGE}, {"contains": "Lyon", "weight": 0}]}
PARIS, NOT_JUDGE, ZERO = "all/0.contains", "all/1.not/0.judge", "all/2.contains"


class Fixed:
    """A judge caller that always gives one grade."""

    def __init__(self, grade: str) -> None:
        self.grade = grade

    async def judge(self, model: str | None, messages: list[dict[str, Any]], **kw: Any) -> JudgeReply:
        return JudgeReply(json.dumps({"reasoning": "fixed", "grade": self.grade}))


def row_of(test: Test, grade: str, attempt: int = 0) -> dict[str, Any]:
    """A results row of a real scoring with the judge giving `grade`."""
    verdict = asyncio.run(score_async(test, Answer(text=ANSWER), context(test, caller=Fixed(grade))))
    entries, _ = evaluator_nodes(verdict)
    return {"model": "m", "suite": test.suite, "test_id": test.id, "case_index": None, "attempt": attempt,
            "test_hash": test.hash, "passed": verdict.passed, "score": verdict.score, "evaluators": entries}


def label_of(row: dict[str, Any], says: str) -> dict[str, Any]:
    return {**{k: row[k] for k in KEY}, "label": says, "note": None, "reviewer": "ann"}


def figures(report: dict[str, Any]) -> dict[str, tuple[int, float]]:
    out = {e["evaluator"]: (e["n"], e["agreement"]) for e in report["evaluators"]}
    out |= {f"judge {e['judge_model']}": (e["n"], e["agreement"]) for e in report["judges"]}
    return out


def test_each_check_is_compared_with_the_outcome_the_label_asks_of_it() -> None:
    test = make_test(eval=TREE)
    tests = {(test.suite, test.id, test.hash): test}
    right = row_of(test, "fail")                 # the judge fails, so `not` passes: the verdict passes
    wrong = row_of(test, "fail", attempt=1)
    assert right["passed"] and wrong["passed"]
    nodes = {e["path"]: e for e in right["evaluators"]}
    # Compared with the attempt's truth directly (a pass), both would disagree with a `right` label.
    assert nodes[NOT_JUDGE]["passed"] is False and nodes[ZERO]["passed"] is False
    report = label_agreement([right, wrong], [label_of(right, "right"), label_of(wrong, "wrong")], tests)
    # `right`: Paris and the judge agree (its fail made the pass); `wrong`: the verdict should have failed, so
    # Paris should have failed and the judge passed: both disagree. Lyon (weight 0) decided nothing: skipped.
    assert figures(report) == {"contains": (2, 0.5), "judge": (2, 0.5), "judge grader": (2, 0.5)}
    assert report["skipped"] == {NOT_DECIDED: 2}
    assert [(d["attempt"], d["nodes"]) for d in report["disagreements"]] == [(1, [PARIS, NOT_JUDGE])]
    assert report["verdict"]["n"] == 2 and report["verdict"]["agreement"] == 0.5   # the verdict as before
    assert f"- labelled checks skipped: 2 {NOT_DECIDED}" in render_labels(report, "table")


def test_the_checks_of_a_test_not_found_as_it_ran_are_skipped_with_their_reason() -> None:
    test = make_test(eval=TREE)
    row = row_of(test, "fail")
    report = label_agreement([row], [label_of(row, "right")], {})
    assert report["evaluators"] == [] and report["skipped"] == {NO_TREE: 3} and report["verdict"]["n"] == 1


def test_a_judge_final_answer_holds_is_compared_as_any_judge_is() -> None:
    from engine.agent.golden import replay_golden
    from engine.suite.agent import compile_golden

    test = make_test(eval={"all": [{"contains": "Paris"}, {"final_answer": JUDGE}]})
    turns, _ = compile_golden([ANSWER])
    transcript = asyncio.run(replay_golden(turns, [{"role": "user", "content": "q"}], {}))
    verdict = asyncio.run(score_async(test, Answer(text=ANSWER), context(test, caller=Fixed("pass"),
                                                                         transcript=transcript)))
    entries, _ = evaluator_nodes(verdict)
    assert [e["path"] for e in entries] == ["all", "all/0.contains", "all/1.final_answer", "all/1.final_answer/0.judge"]
    row = {"model": "m", "suite": test.suite, "test_id": test.id, "case_index": None, "attempt": 0,
           "test_hash": test.hash, "passed": verdict.passed, "score": verdict.score, "evaluators": entries}
    report = label_agreement([row], [label_of(row, "wrong")], {(test.suite, test.id, test.hash): test})
    # the verdict passed and should have failed (all needs every check): each check, the judge inside
    # final_answer too, should have failed, so each disagrees; nothing is skipped
    assert figures(report) == {"contains": (1, 0.0), "final_answer": (1, 0.0), "judge": (1, 0.0),
                               "judge grader": (1, 0.0)}
    assert report["skipped"] == {}
