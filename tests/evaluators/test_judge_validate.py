"""`engine validate --judges` end to end: a real `engine` subprocess against the loopback fake server playing
judges (one that grades well, one that always says pass, one malformed, one that times out). Agreement and κ
are checked against values computed by hand below; exit codes; plain `validate` makes no call; a second
`--judges` is answered from the judge cache (zero requests at the server)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine

# Ten labelled answers. The good judge passes an answer iff it says "30 days":
#   5 x (says 30 days, labelled pass)  -> pass, agrees
#   1 x (says 30 days rudely, labelled fail) -> pass, disagrees
#   1 x (says "one month", labelled pass)    -> fail, disagrees
#   3 x (no refund, labelled fail)           -> fail, agrees
# agreement 8/10 = 0.8; labels 6 pass / 4 fail, judge 6 pass / 4 fail: p_e = .6*.6 + .4*.4 = .52,
# Cohen's kappa = (.8 - .52) / (1 - .52) = 0.58333...
# The yes-man passes all ten: agreement 6/10; p_e = .6*1 + .4*0 = .6, kappa = (.6 - .6) / .4 = 0.
CALIBRATION = "\n".join(
    [json.dumps({"answer": f"Returns within 30 days, case {i}.", "expect": "pass"}) for i in range(5)]
    + [json.dumps({"answer": "30 days, now go away.", "expect": "fail"}),
       json.dumps({"answer": "You have one month.", "expect": "pass"})]
    + [json.dumps({"answer": f"No refunds, case {i}.", "expect": "fail"}) for i in range(3)]) + "\n"

GOOD = """\
suite: good
tests:
  - id: refund
    prompt: "What is the refund policy?"
    eval:
      all:
        - {contains: "30"}
        - judge: {rubric: "Mentions the 30-day limit politely.", model: grader, calibration: refunds.jsonl,
                  min_agreement: 0.8}
  - id: five
    prompt: "Rate the refund answer."
    eval:
      judge:
        rubric: "How well does it explain the 30-day limit?"
        model: grader
        scale: 1-5
        calibration:
          - {answer: "30 days a", expect: 4}
          - {answer: "30 days b", expect: 5}
          - {answer: "no", expect: 1}
          - {answer: "nope", expect: 2}
          - {answer: "hmm", expect: 3}
"""

YES = """\
suite: yes
tests:
  - id: refund
    prompt: "What is the refund policy?"
    eval: {judge: {rubric: "Mentions the 30-day limit politely.", model: yesman, calibration: refunds.jsonl,
                   min_agreement: 0.8}}
"""

BAD = """\
suite: bad
tests:
  - id: broken
    prompt: "What is the refund policy?"
    eval:
      judge:
        rubric: "Anything."
        model: broken
        calibration: [{answer: "30 days", expect: pass}, {answer: "no", expect: fail}]
  - id: slow
    prompt: "What is the refund policy?"
    eval: {judge: {rubric: "Anything.", model: slow, calibration: [{answer: "30 days", expect: pass}]}}
"""

MODELS = """\
models:
  grader: {{base_url: "{url}", model: grader-1, timeout_s: 60}}
  yesman: {{base_url: "{url}", model: yes-1, timeout_s: 60}}
  broken: {{base_url: "{url}", model: broken-1, timeout_s: 60}}
  slow: {{base_url: "{url}", model: slow-1, timeout_s: 0.3, max_retries: 0}}
"""


def respond(body: dict[str, Any]) -> Reply:
    prompt = body["messages"][0]["content"]
    answer = json.loads(prompt.split("\n[Answer to grade]\n", 1)[1].split("\n", 1)[0])   # one JSON string
    good = "30 days" in answer
    model = body["model"]
    if model == "grader-1":
        grade: Any = (4 if good else 1) if "whole number from 1" in prompt else ("pass" if good else "fail")
        return Reply(content=json.dumps({"reasoning": "r", "grade": grade}))
    if model == "yes-1":
        return Reply(content='{"reasoning": "fine", "grade": "pass"}')
    if model == "broken-1":
        return Reply(content="I think it is fine.")
    if model == "slow-1":
        return Reply(content='{"reasoning": "late", "grade": "pass"}', delay_s=3)
    raise AssertionError(model)


@pytest.fixture
def project(tmp_path: Path, fake_openai: FakeOpenAI) -> dict[str, Any]:
    fake_openai.responder = respond
    for name, text in (("good", GOOD), ("yes", YES), ("bad", BAD)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"{name}.yaml").write_text(text)
        (folder / "refunds.jsonl").write_text(CALIBRATION)
    (tmp_path / "models.yaml").write_text(MODELS.format(url=fake_openai.base_url))
    env = {"ENGINE_JUDGE_CACHE": str(tmp_path / "cache" / "judge.sqlite")}
    return {"tmp": tmp_path, "server": fake_openai, "env": env}


def validate(project: dict[str, Any], suite: str, *extra: str) -> Any:
    tmp = project["tmp"]
    return engine("validate", str(tmp / suite), "--models", str(tmp / "models.yaml"), *extra, env=project["env"])


def records(project: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    data = json.loads((project["tmp"] / "cache" / "judge-calibration.json").read_text())
    return {(r["suite"], r["test_id"]): r for r in data["records"]}


def test_validate_without_judges_calls_nothing(project: dict[str, Any]) -> None:
    done = validate(project, "good")
    assert done.returncode == 0, done.stderr
    assert project["server"].requests == []
    assert not (project["tmp"] / "cache" / "judge-calibration.json").exists()


def test_a_good_judge_passes_with_hand_computed_agreement_and_kappa(project: dict[str, Any]) -> None:
    done = validate(project, "good", "--judges")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(project["server"].requests) == 15                       # 10 + 5 examples, one call each
    got = records(project)
    refund = got[("good", "refund")]
    assert refund["path"] == "all/1.judge" and refund["judge_model"] == "grader"
    summary = refund["summary"]
    assert summary["n"] == 10 and summary["agreement"] == pytest.approx(0.8)
    assert summary["kappa"] == pytest.approx(0.28 / 0.48)
    assert summary["verdict"] == "pass"
    assert "agreement 0.800, κ 0.583 - pass" in done.stdout
    # 1-5: expect 4 5 1 2 3, judge 4 4 1 1 1: exact 2/5, within one 4/5; quadratic weighted kappa
    # observed mean weight (0 + 1 + 0 + 1 + 4) / 16 / 5 = .075, chance .3 (see test_judges.py): 1 - .075/.3 = .75
    five = got[("good", "five")]["summary"]
    assert five["agreement"] == pytest.approx(0.4) and five["within_one"] == pytest.approx(0.8)
    assert five["weighted_kappa"] == pytest.approx(0.75)
    assert five["verdict"] == "too few" and "n=5 < 10" in five["note"]

    # again: every judgement comes from the judge cache
    project["server"].reset()
    project["server"].responder = respond
    again = validate(project, "good", "--judges")
    assert again.returncode == 0 and project["server"].requests == []
    assert "0 judge calls paid" in again.stdout


def test_a_yes_man_fails_its_min_agreement(project: dict[str, Any]) -> None:
    done = validate(project, "yes", "--judges")
    assert done.returncode == 1, done.stdout + done.stderr
    summary = records(project)[("yes", "refund")]["summary"]
    assert summary["agreement"] == pytest.approx(0.6) and summary["kappa"] == pytest.approx(0.0)
    assert summary["verdict"] == "fail"
    assert "agreement 0.600 < min_agreement 0.8" in done.stdout


def test_malformed_and_timed_out_judges_give_no_grade(project: dict[str, Any]) -> None:
    done = validate(project, "bad", "--judges")
    # no min_agreement here: the errors are reported, n is too small for a verdict, nothing is certified
    assert done.returncode == 0, done.stdout + done.stderr
    got = records(project)
    broken, slow = got[("bad", "broken")]["summary"], got[("bad", "slow")]["summary"]
    assert broken["errors"] == 2 and broken["agreement"] == 0.0 and broken["kappa"] is None
    assert slow["errors"] == 1 and slow["graded"] == 0
    assert "judge reply unreadable twice" in done.stdout and "the judge gave no grade" in done.stdout
    assert len([b for b in project["server"].requests if b["model"] == "broken-1"]) == 4   # asked, re-asked


def test_judges_needs_the_models_file_and_a_clean_suite(project: dict[str, Any], tmp_path: Path) -> None:
    done = engine("validate", str(tmp_path / "good"), "--judges", env=project["env"])
    assert done.returncode == 2 and "--models" in done.stderr
    (tmp_path / "good" / "good.yaml").write_text(GOOD.replace("expect: 3", "expect: 7"))
    done = validate(project, "good", "--judges")
    assert done.returncode == 1 and "expect 7 is not on the judge's scale" in done.stderr
    assert "not graded" in done.stderr and project["server"].requests == []


def test_grading_says_it_started_and_how_far_it_is_while_it_lasts(project: dict[str, Any],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Grading by small local models takes minutes in `make run`: a line when it starts, then one every
    PROGRESS_S (shortened here) with the examples graded so far. The server holds its replies until the lines
    it waits for came (every reply until a line says 0 of 15, the sixth on until two say 5 of 15), so those
    lines are seen whatever the machine's load, not by racing replies against the heartbeat."""
    from engine.analysis import judge_validate
    from engine.suite import load_suites

    tmp = project["tmp"]
    lines: list[str] = []

    def counts() -> list[tuple[int, int]]:
        """(graded, of) from each heartbeat line so far (a line of another shape: (-1, -1))."""
        found = [re.fullmatch(r"judges: (\d+) of (\d+) examples graded \(\d+ s\)", line) for line in lines[1:]]
        return [(int(m.group(1)), int(m.group(2))) if m else (-1, -1) for m in found]

    arrived = itertools.count(1)

    def held(body: dict[str, Any]) -> Reply:
        if next(arrived) <= 5:
            return dataclasses.replace(respond(body), hold=lambda: (0, 15) not in counts())
        return dataclasses.replace(respond(body), hold=lambda: counts().count((5, 15)) < 2)

    project["server"].responder = held
    monkeypatch.setattr(judge_validate, "PROGRESS_S", 0.1)
    suites, _ = load_suites([tmp / "good" / "good.yaml"])
    found = judge_validate.validate_judges([t for s in suites for t in s.tests], tmp / "models.yaml",
                                           tmp / "calibration.json", judge_cache=tmp / "judge.sqlite",
                                           progress=lines.append)
    assert found.calls == 15
    assert lines[0] == "judges: grading the examples of 2 judge node(s) with grader"
    ticks = counts()
    assert (-1, -1) not in ticks, lines
    # counted up as they go: a line before both judges' examples are read says fewer than 15 to grade
    graded, total = [g for g, _ in ticks], [t for _, t in ticks]
    assert graded == sorted(graded) and total == sorted(total) and total[-1] == 15, ticks
    assert ticks.index((0, 15)) < ticks.index((5, 15)) and ticks.count((5, 15)) >= 2, ticks


def test_a_calibrated_judge_under_final_answer_is_a_target_at_its_verdicts_path() -> None:
    from engine.judge.calibrate import calibration_targets
    from tests.factories import make_test

    judge = {"judge": {"rubric": "Mentions 30 days.", "model": "grader",
                       "calibration": [{"answer": "30 days", "expect": "pass"}]}}
    test = make_test(eval={"all": [{"contains": "days"}, {"final_answer": judge}]})
    [(target, path, spec, cases)] = calibration_targets([test])
    assert (target, path, spec.model, cases) == (test, "all/1.final_answer/0.judge", "grader", [["t", "h"]])
