"""The label rule of engine.analysis.label_examples against real scoring: each tree below is scored for real
(the judge played by a caller that gives a fixed grade), its verdict nodes recorded as a run records them, and
`expected_grade` asked what the judge should have said for each label. The oracle is scoring again: with the
expected grade the verdict is the labelled truth, with the other grade it is not; a judge said not to decide
gives the same verdict either way. The table says which trees the judge decides."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from engine.agent.golden import replay_golden
from engine.analysis.label_examples import NO_REPLAY, NOT_DECIDED, expected_grade
from engine.evaluators.scoring import context, score_async
from engine.model.answer import Answer
from engine.model.scoring import JudgeReply
from engine.model.test import Test
from engine.suite.agent import compile_golden
from tests.factories import make_test

ANSWER = "Paris is lovely"
J: dict[str, Any] = {"judge": {"rubric": "Names the capital.", "model": "grader"}}


def judge(**options: Any) -> dict[str, Any]:
    return {**J, **options}


# (tree, the judge's path in the results, does the judge's pass/fail decide the verdict whatever it was)
TREES: list[tuple[dict[str, Any], str, bool]] = [
    (J, "judge", True),
    ({"all": [{"contains": "Paris"}, J]}, "all/1.judge", True),
    ({"all": [{"contains": "Lyon"}, J]}, "all/1.judge", False),             # fails whatever the judge says
    ({"any": [{"contains": "Paris"}, J]}, "any/1.judge", False),            # passes whatever the judge says
    ({"any": [{"contains": "Lyon"}, J]}, "any/1.judge", True),
    ({"all": [{"contains": "Paris"}, judge(weight=0)]}, "all/1.judge", False),   # reported, not counted
    ({"all": [{"contains": "Paris", "weight": 3}, J], "threshold": 0.7}, "all/1.judge", False),  # .75 passes
    ({"all": [{"contains": "Paris"}, {"contains": "Lyon"}, judge(must=True)], "threshold": 0.3},
     "all/2.judge", True),                                                  # the gate decides
    ({"not": J}, "not/0.judge", True),
    ({"all": [{"contains": "Paris"}, {"not": J}]}, "all/1.not/0.judge", True),
    (judge(threshold=0), "judge", False),                                   # a score of 0 passes too
    ({"final_answer": J}, "final_answer/0.judge", True),                    # a judge final_answer holds
    ({"all": [{"contains": "Paris"}, {"final_answer": {"not": J}}]}, "all/1.final_answer/0.not/0.judge", True),
    ({"all": [{"final_answer": {"any": [{"contains": "Paris"}, J]}}, {"contains": "Rome"}]},
     "all/0.final_answer/0.any/1.judge", False),
]


class Fixed:
    """A judge caller that always gives one grade."""

    def __init__(self, grade: str) -> None:
        self.grade = grade

    async def judge(self, model: str | None, messages: list[dict[str, Any]], **kw: Any) -> JudgeReply:
        return JudgeReply(json.dumps({"reasoning": "fixed", "grade": self.grade}))


def scored(test: Test, grade: str) -> tuple[bool, list[dict[str, Any]]]:
    """The verdict and the row's `evaluators` entries of a real scoring with the judge giving `grade` (a
    conversation whose final answer is ANSWER, for final_answer)."""
    turns, problems = compile_golden([ANSWER])
    assert problems == []
    transcript = asyncio.run(replay_golden(turns, [{"role": "user", "content": "q"}], {}))
    ctx = context(test, caller=Fixed(grade), transcript=transcript)
    verdict = asyncio.run(score_async(test, Answer(text=ANSWER), ctx))
    entries = [{"path": path, "score": v.score, "passed": v.passed, "error": v.error} for path, v in verdict.walk()]
    return verdict.passed, entries


@pytest.mark.parametrize(("spec", "path", "decides"), TREES, ids=[json.dumps(t[0]) for t in TREES])
@pytest.mark.parametrize("run_grade", ["pass", "fail"])
@pytest.mark.parametrize("label", ["right", "wrong"])
def test_the_expected_grade_makes_the_labelled_verdict(spec: dict[str, Any], path: str, decides: bool,
                                                       run_grade: str, label: str) -> None:
    test = make_test(eval=spec)
    passed, entries = scored(test, run_grade)
    truth = passed if label == "right" else not passed
    expect, why = expected_grade(test, path, entries, passed, truth)
    if not decides:
        assert (expect, why) == (None, NOT_DECIDED)
        assert scored(test, "pass")[0] == scored(test, "fail")[0]
        return
    assert expect in ("pass", "fail") and why == ""
    assert scored(test, expect)[0] == truth
    assert scored(test, "fail" if expect == "pass" else "pass")[0] != truth
    # a right verdict means the judge's own grade stands; a wrong one, its opposite
    assert (expect == run_grade) == (label == "right")


def test_checks_that_do_not_replay_to_the_verdict_give_no_example() -> None:
    test = make_test(eval={"all": [{"contains": "Paris"}, J]})
    passed, entries = scored(test, "pass")
    missing = [e for e in entries if e["path"] != "all/0.contains"]     # the tree changed shape since
    assert expected_grade(test, "all/1.judge", missing, passed, True) == (None, NO_REPLAY)
    assert expected_grade(test, "all/1.judge", entries, not passed, True) == (None, NO_REPLAY)
