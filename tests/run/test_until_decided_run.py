"""`engine run --until-decided A,B` end to end: real subprocesses against the fake OpenAI server.

Model `fast` (A) answers 90% of the bulk questions right, `other` (B) 40%: the sequential test must stop early
with "fast better", with fewer calls than a full run (counted at the server), `--resume` must continue the
decision (a decided run has nothing left) and `--resume --complete` run the rest, and
`engine analyze` must print the decision and label its tables.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from tests.fake_openai import FakeOpenAI, HoldAfter, Reply
from tests.run.e2e import engine, write_project

KEY_ENV = "ENGINE_TEST_KEY"
BULK = 150
FULL_CALLS = 2 * (BULK + 3)   # two models x (bulk + the three capitals tests)


def scripted(body: dict) -> Reply:
    """A: right unless n % 10 == 0; B: right when n % 5 is 0 or 1; capitals right for both."""
    text = body["messages"][-1]["content"]
    found = re.search(r"question (\d+)", text)
    if found is None:
        for country, capital in (("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid")):
            if country in text:
                return Reply(content=capital)
        return Reply(content="?")
    n = int(found.group(1))
    right = n % 10 != 0 if body["model"] == "fast-1" else n % 5 in (0, 1)
    return Reply(content="ok" if right else "no")


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "_manifest.json").read_text())


def test_until_decided_stops_early_resume_completes_and_analyze_reports(tmp_path: Path,
                                                                        fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = scripted
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=BULK)
    out = tmp_path / "results"
    done = engine("run", str(suites), "--models", str(models), "--until-decided", "fast,other", "--seed", "3",
                  "--no-cache", "--out", str(out), "--run-id", "seq", env={KEY_ENV: "sk-x"})
    assert done.returncode == 0, done.stderr
    run_dir = out / "seq"
    calls = len(fake_openai.requests)
    manifest = _manifest(run_dir)
    decision = manifest["until_decided"]
    assert decision["verdict"] == "fast better" and decision["reason"] == "decided"
    assert manifest["stopped"] == "decided" and not manifest["complete"]
    assert calls < FULL_CALLS and decision["jobs_made"] == calls and decision["jobs_full_run"] == FULL_CALLS
    assert decision["jobs_saved"] == FULL_CALLS - calls
    assert decision["cs_lo"] > 0 and decision["e_value"] >= 1 / decision["alpha"] and decision["seed"] == 3
    rows = pd.read_parquet(run_dir)
    dispatched = rows.groupby(["suite", "test_id"])["model"].nunique()
    assert len(dispatched) == decision["tests_dispatched"] == 153 - decision["tests_not_run"]
    assert (dispatched == 2).all()   # each test ran on both models, never one alone
    assert "until-decided: fast better (fast vs other)" in done.stdout and "saved" in done.stdout
    assert f"engine run --resume {run_dir}" in done.stdout

    analyzed = engine("analyze", str(run_dir))
    assert analyzed.returncode == 0, analyzed.stderr
    shown = " ".join(analyzed.stdout.split())
    assert "Sequential stop" in shown and "sequentially stopped sample" in shown
    assert f"{calls} / {FULL_CALLS} ({FULL_CALLS - calls} saved" in shown
    as_json = json.loads(engine("analyze", str(run_dir), "--format", "json").stdout)
    assert as_json["until_decided"][0]["verdict"] == "fast better"

    assert f"engine run --resume {run_dir} --complete" in done.stdout

    continued = engine("run", "--resume", str(run_dir), "--no-cache", env={KEY_ENV: "sk-x"})
    assert continued.returncode == 0, continued.stderr
    assert len(fake_openai.requests) == calls   # decided already: plain --resume has nothing left to run
    assert _manifest(run_dir)["until_decided"]["verdict"] == "fast better"

    resumed = engine("run", "--resume", str(run_dir), "--complete", "--no-cache", env={KEY_ENV: "sk-x"})
    assert resumed.returncode == 0, resumed.stderr
    assert len(fake_openai.requests) == FULL_CALLS   # the rest ran, nothing paid twice
    full = _manifest(run_dir)
    assert full["complete"] and full["counts"]["rows"] == FULL_CALLS
    assert full["until_decided"] == decision   # the record of the first stop is kept
    report = json.loads(engine("analyze", str(run_dir), "--format", "json").stdout)
    (comparison,) = report["comparisons"]
    assert comparison["better"] == "fast"   # the full run's fixed-sample verdict: the same
    assert report["until_decided"][0]["completed"]
    text = " ".join(engine("analyze", str(run_dir)).stdout.split())   # rich wraps long lines
    assert "later completed by --resume" in text and "sequentially stopped sample" not in text


def test_until_decided_names_must_be_run_models(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    suites, models = write_project(tmp_path, fake_openai.base_url)
    unknown = engine("run", str(suites), "--models", str(models), "--until-decided", "fast,nope",
                     "--out", str(tmp_path / "r"), env={KEY_ENV: "k"})
    assert unknown.returncode == 2 and "'nope' is not among the run's models (fast, other)" in unknown.stderr
    left_out = engine("run", str(suites), "--models", str(models), "--model", "fast", "--until-decided",
                      "fast,other", "--out", str(tmp_path / "r"), env={KEY_ENV: "k"})
    assert left_out.returncode == 2 and "'other' is not among the run's models (fast)" in left_out.stderr
    one = engine("run", str(suites), "--models", str(models), "--until-decided", "fast", env={KEY_ENV: "k"})
    assert one.returncode == 2 and "two model names" in one.stderr
    assert fake_openai.requests == [] and "Traceback" not in unknown.stderr + left_out.stderr + one.stderr


def test_ctrl_c_releases_the_workers_waiting_at_the_gate(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """Both models right everywhere (never decided), `other` slow: `fast`'s workers wait at the gate; one
    Ctrl-C must still end the run (exit 1) with the decision recorded as interrupted."""
    import signal
    import sqlite3
    import time

    from tests.run.e2e import start_engine

    fake_openai.responder = lambda body: Reply(content="ok Paris Rome Madrid",
                                               delay_s=0.05 if body["model"] == "other-1" else 0.0)
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=BULK)
    run_dir = tmp_path / "results" / "ctrl-c"
    proc = start_engine("run", str(suites), "--models", str(models), "--until-decided", "fast,other", "--no-cache",
                        "--out", str(tmp_path / "results"), "--run-id", "ctrl-c", "--quiet", env={KEY_ENV: "k"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{run_dir / '_journal.sqlite'}?mode=ro", uri=True, timeout=1) as db:
                if db.execute("SELECT COUNT(*) FROM rows").fetchone()[0] >= 20:
                    break
        except sqlite3.Error:
            pass
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 1, proc.stderr.read() if proc.stderr else ""
    manifest = _manifest(run_dir)
    assert manifest["stopped"] == "interrupted"
    decision = manifest["until_decided"]
    assert decision["reason"] == "interrupted" and decision["verdict"] == "undecided"
    assert decision["mean_diff"] == 0.0 and decision["tests_not_run"] > 0


def _committed(run_dir: Path) -> int:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{run_dir / '_journal.sqlite'}?mode=ro", uri=True, timeout=1) as db:
            return int(db.execute("SELECT COUNT(*) FROM rows").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_killed_and_resumed_it_continues_the_decision_and_complete_runs_the_rest(tmp_path: Path,
                                                                                  fake_openai: FakeOpenAI) -> None:
    """kill -9 a real `engine run --until-decided` once some rows are committed, then `--resume`: the calls paid
    in all stay near the uninterrupted run's and the decision is the same; `--resume --complete` runs the rest."""
    import dataclasses
    import signal
    import time

    from tests.run.e2e import start_engine

    fake_openai.responder = lambda body: dataclasses.replace(scripted(body), delay_s=0.03)   # time to kill it
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=BULK)
    out = tmp_path / "results"
    whole = engine("run", str(suites), "--models", str(models), "--until-decided", "fast,other", "--seed", "3",
                   "--no-cache", "--out", str(out), "--run-id", "whole", "--quiet", env={KEY_ENV: "k"})
    assert whole.returncode == 0, whole.stderr
    uninterrupted = len(fake_openai.requests)
    expected = _manifest(out / "whole")["until_decided"]
    assert expected["verdict"] == "fast better" and uninterrupted < FULL_CALLS // 2

    run_dir = out / "killed"
    held = HoldAfter(20, fake_openai.responder)   # killed mid-way, whatever the machine's load
    fake_openai.responder = held
    proc = start_engine("run", str(suites), "--models", str(models), "--until-decided", "fast,other", "--seed", "3",
                        "--no-cache", "--out", str(out), "--run-id", "killed", "--quiet", env={KEY_ENV: "k"})
    deadline = time.monotonic() + 60
    while _committed(run_dir) < 8 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    held.release()
    at_kill = _committed(run_dir)
    assert 8 <= at_kill < uninterrupted - 8, at_kill   # killed mid-way, well before the decision
    assert not (run_dir / "_manifest.json").exists()
    before = len(fake_openai.requests)

    resumed = engine("run", "--resume", str(run_dir), "--no-cache", "--quiet", env={KEY_ENV: "k"})
    assert resumed.returncode == 0, resumed.stderr
    paid = len(fake_openai.requests) - uninterrupted        # the killed run's calls and the resumed run's
    lost = before - uninterrupted - at_kill                  # in flight at the kill: paid, never committed
    # what any run pays past its decision varies with timing, up to the clusters open ahead of the test
    ahead = 2 * expected["lookahead"]                        # a bulk cluster is one job per model
    assert lost >= 0 and paid <= uninterrupted + lost + ahead, (paid, uninterrupted, lost)
    decision = _manifest(run_dir)["until_decided"]
    for field in ("verdict", "tests_used", "tests_decided_at", "e_value", "mean_diff", "cs_lo", "cs_hi", "seed"):
        assert decision[field] == expected[field], field
    assert decision["jobs_made"] == _manifest(run_dir)["counts"]["rows"] <= uninterrupted + ahead
    assert f"engine run --resume {run_dir} --complete" in resumed.stdout

    completed = engine("run", "--resume", str(run_dir), "--complete", "--no-cache", "--quiet", env={KEY_ENV: "k"})
    assert completed.returncode == 0, completed.stderr
    manifest = _manifest(run_dir)
    assert manifest["complete"] and manifest["counts"]["rows"] == FULL_CALLS
    assert len(fake_openai.requests) - uninterrupted == FULL_CALLS + lost   # nothing committed was paid twice
    assert manifest["until_decided"]["verdict"] == "fast better"


def test_complete_goes_only_with_resume_of_an_until_decided_run(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = scripted
    suites, models = write_project(tmp_path, fake_openai.base_url)
    alone = engine("run", str(suites), "--models", str(models), "--complete", env={KEY_ENV: "k"})
    assert alone.returncode == 2 and "--complete goes with --resume RUN_DIR" in alone.stderr
    plain = engine("run", str(suites), "--models", str(models), "--no-cache", "--out", str(tmp_path / "r"),
                   "--run-id", "plain", "--max-cost", "0", env={KEY_ENV: "k"})
    run_dir = tmp_path / "r" / "plain"
    assert plain.returncode == 1 and run_dir.is_dir(), plain.stderr   # stopped by the budget: tests left
    refused = engine("run", "--resume", str(run_dir), "--complete", env={KEY_ENV: "k"})
    assert refused.returncode == 2 and f"{run_dir} is not an --until-decided run" in refused.stderr
    assert "Traceback" not in alone.stderr + refused.stderr
