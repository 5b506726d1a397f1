"""`engine validate --judges --labels RUN` end to end: `engine run` writes a real run folder against the loopback
fake server (the answering model and a judge), reviewers' labels are appended with `append_labels`, and
`engine validate --judges --labels` turns them into calibration examples. The table LABELS below is the rule of
docs/evaluators.md ("Labelled attempts") as data: each label's expected grade, or why it is skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.analysis.label_examples import DISAGREE, NO_JUDGE, NO_ROW, NOT_DECIDED, SCALE, STALE
from engine.analysis.labels import append_labels
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine

RUBRIC = "The answer must mention the 30-day limit."
SHOP = f"""\
suite: shop
tests:
  - id: "only-{{{{ item }}}}"
    prompt: "Can I return the {{{{ item }}}}? ({{{{ tone }}}})"
    cases:
      - {{item: lamp, tone: polite}}
      - {{item: chair, tone: rude}}
      - {{item: desk, tone: polite}}
    eval: {{judge: {{rubric: "The answer must mention the 30-day limit for the {{{{ item }}}}.", model: grader}}}}
  - id: composed
    prompt: "Refund policy? (polite)"
    eval:
      all:
        - {{contains: thank}}
        - judge:
            rubric: "{RUBRIC}"
            model: grader
            calibration: [{{answer: "Within 30 days.", expect: pass}}, {{answer: "Never.", expect: fail}}]
  - id: composed-rude
    prompt: "Refund policy? (rude)"
    eval: {{all: [{{contains: thank}}, {{judge: {{rubric: "{RUBRIC}", model: grader}}}}]}}
  - id: negated
    prompt: "Refund policy? (rude)"
    eval: {{not: {{judge: {{rubric: "{RUBRIC}", model: grader}}}}}}
  - id: five
    prompt: "Refund policy? (polite)"
    eval: {{judge: {{rubric: "Rate how well it explains the 30-day limit.", model: grader, scale: 1-5}}}}
  - id: plain
    prompt: "Refund policy? (polite)"
    eval: {{contains: "30 days"}}
  - id: stale
    prompt: "Refund policy? (polite)"
    eval: {{judge: {{rubric: "{RUBRIC}", model: grader}}}}
"""

MODELS = """\
models:
  shop: {{base_url: "{url}", model: shop-1, timeout_s: 5}}
  grader: {{base_url: "{url}", model: grader-1, timeout_s: 5}}
"""

POLITE, RUDE = "You can return it within 30 days, thank you.", "No refunds."

# (test id, label(s) in the order given as (reviewer, label), what the label gives: the expected grade of its
# judge node or why it is skipped). The run's verdicts, from the scripted models below:
#   only-lamp / only-desk: polite, judge pass -> pass;  only-chair: rude, judge fail -> fail
#   composed: thank + judge pass -> pass (the judge decides: with its fail `all` fails)
#   composed-rude: no thank, judge fail -> fail (whatever the judge said, `all` fails: not decided by it)
#   negated: judge fail under `not` -> pass (with the judge's pass it would fail)
LABELS: list[tuple[str, list[tuple[str, str]], str]] = [
    ("only-lamp", [("ann", "wrong"), ("ann", "right")], "pass"),    # the later label counts: right -> pass
    ("only-chair", [("ann", "wrong")], "pass"),                     # fail was wrong: the judge should pass it
    ("only-desk", [("ann", "right"), ("bob", "wrong")], DISAGREE),
    ("composed", [("ann", "wrong")], "fail"),                       # pass was wrong: the judge should fail it
    ("composed-rude", [("ann", "right")], NOT_DECIDED),
    ("negated", [("ann", "right")], "fail"),                        # pass is right: under `not`, judge fails
    ("five", [("ann", "right")], SCALE),
    ("plain", [("ann", "right")], NO_JUDGE),
    ("stale", [("ann", "right")], STALE),
]
# The judge's grades as the run recorded them (and the judge cache gives back).
GIVEN = {"only-lamp": "pass", "only-chair": "fail", "composed": "pass", "negated": "fail"}


def respond(body: dict[str, Any]) -> Reply:
    if body["model"] == "shop-1":
        return Reply(content=POLITE if "polite" in body["messages"][-1]["content"] else RUDE)
    assert body["model"] == "grader-1", body["model"]
    prompt = body["messages"][0]["content"]
    answer = json.loads(prompt.split("\n[Answer to grade]\n", 1)[1].split("\n", 1)[0])
    good = "30 days" in answer
    grade: Any = (4 if good else 1) if "whole number from 1" in prompt else ("pass" if good else "fail")
    return Reply(content=json.dumps({"reasoning": "says 30 days" if good else "no limit", "grade": grade}))


@pytest.fixture
def labelled(tmp_path: Path, fake_openai: FakeOpenAI) -> dict[str, Any]:
    """A run of suites/shop.yaml, labelled by the table above (plus one label of a row the run does not hold),
    then the suite edited so that `stale` changes."""
    fake_openai.responder = respond
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "shop.yaml").write_text(SHOP)
    models = tmp_path / "models.yaml"
    models.write_text(MODELS.format(url=fake_openai.base_url))
    env = {"ENGINE_JUDGE_CACHE": str(tmp_path / "cache" / "judge.sqlite")}
    done = engine("run", str(suites), "--models", str(models), "--model", "shop", "--out",
                  str(tmp_path / "results"), env=env)
    assert done.returncode == 0, done.stderr
    run_dir = (tmp_path / "results" / "latest").resolve()
    rows = pd.read_parquet(run_dir).set_index("test_id")
    key = ("model", "suite", "case_index", "attempt", "test_hash")
    records = []
    for test_id, given, _ in LABELS:
        row = rows.loc[test_id]
        attempt = {"test_id": test_id, **{k: None if pd.isna(row[k]) else row[k] for k in key}}
        attempt = {k: int(v) if k in ("case_index", "attempt") and v is not None else v for k, v in attempt.items()}
        records += [{**attempt, "label": label, "reviewer": reviewer} for reviewer, label in given]
    ghost = {**records[-1], "model": "ghost", "test_id": "only-lamp", "case_index": 0,
             "test_hash": rows.loc["only-lamp", "test_hash"]}
    append_labels(run_dir, [*records, ghost])
    (suites / "shop.yaml").write_text(SHOP.replace('id: stale\n    prompt: "Refund policy? (polite)"',
                                                   'id: stale\n    prompt: "Refund policy, please? (polite)"'))
    fake_openai.requests.clear()
    return {"tmp": tmp_path, "suites": suites, "models": models, "env": env, "run": run_dir,
            "server": fake_openai}


def validate(project: dict[str, Any], *extra: str) -> Any:
    return engine("validate", str(project["suites"]), "--models", str(project["models"]), *extra,
                  env=project["env"])


def test_labelled_attempts_are_graded_as_calibration_examples(labelled: dict[str, Any]) -> None:
    done = validate(labelled, "--judges", "--labels", str(labelled["tmp"] / "results"))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    used = [row for row in LABELS if row[2] in ("pass", "fail")]
    assert f"labels: 10 labelled attempt(s) in 1 run(s): {len(used)} used as judge calibration examples" in out
    for reason in {row[2] for row in LABELS} - {"pass", "fail"} | {NO_ROW}:
        assert f"labels: skipped 1: {reason}" in out

    # Each labelled example is graded as its run graded it (its own case's rubric and question): the judge
    # cache answers every one; only the two YAML examples of `composed` are new calls.
    judged = [b for b in labelled["server"].requests if b["model"] == "grader-1"]
    assert len(judged) == 2 and "2 judge calls paid" in out
    assert {json.loads(b["messages"][0]["content"].split("\n[Answer to grade]\n", 1)[1].split("\n", 1)[0])
            for b in judged} == {"Within 30 days.", "Never."}

    data = json.loads((labelled["tmp"] / "cache" / "judge-calibration.json").read_text())
    by_test = {r["test_id"]: r for r in data["records"]}
    assert set(by_test) == {"only-lamp", "composed", "negated"}      # nodes with examples; five, stale: none
    got: dict[str, tuple[str, str]] = {}
    for record in by_test.values():
        for item in record["items"]:
            if item["source"] == "labels":
                test_id = item["where"].split()[3].split("#")[0]
                got[test_id] = (item["expect"], item["grade"])
    assert got == {t: (expect, GIVEN[t]) for t, _, expect in used}

    only = by_test["only-lamp"]
    assert only["path"] == "judge" and [m[0] for m in only["members"]] == ["only-lamp", "only-chair", "only-desk"]
    assert only["summary"]["n"] == 2 and only["summary"]["agreement"] == pytest.approx(0.5)
    assert only["summary"]["verdict"] == "too few"
    composed = by_test["composed"]
    assert composed["path"] == "all/1.judge"
    assert [i["source"] for i in composed["items"]] == ["calibration", "calibration", "labels"]
    assert composed["summary"]["agreement"] == pytest.approx(2 / 3)   # both YAML examples agree, the label not
    assert by_test["negated"]["path"] == "not/0.judge" and by_test["negated"]["summary"]["agreement"] == 1.0
    assert "n=3, agreement 0.667" in out and "1 from labels" in out

    # `engine analyze` reads the same file: the run's judge shows the pooled calibration (2 + 3 + 1 items).
    shown = engine("analyze", str(labelled["run"]), "--calibration",
                   str(labelled["tmp"] / "cache" / "judge-calibration.json"), env=labelled["env"])
    assert shown.returncode == 0, shown.stderr
    assert "calibration: n=6" in shown.stdout

    # Again: nothing is paid twice.
    labelled["server"].requests.clear()
    again = validate(labelled, "--judges", "--labels", str(labelled["run"]))
    assert again.returncode == 0 and labelled["server"].requests == [] and "0 judge calls paid" in again.stdout


def test_without_labels_only_the_yaml_examples_are_graded(labelled: dict[str, Any]) -> None:
    done = validate(labelled, "--judges")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "labels:" not in done.stdout
    data = json.loads((labelled["tmp"] / "cache" / "judge-calibration.json").read_text())
    assert [r["test_id"] for r in data["records"]] == ["composed"]
    assert {i["source"] for i in data["records"][0]["items"]} == {"calibration"}


def test_labels_needs_judges_and_a_labelled_run(labelled: dict[str, Any]) -> None:
    done = validate(labelled, "--labels", str(labelled["run"]))
    assert done.returncode == 2 and "add --judges" in done.stderr
    empty = labelled["tmp"] / "empty"
    empty.mkdir()
    done = validate(labelled, "--judges", "--labels", str(empty))
    assert done.returncode == 2 and f"{empty}: no _labels.parquet" in done.stderr
    assert labelled["server"].requests == []
