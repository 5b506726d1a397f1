"""`engine run --shard I/N` end to end: real subprocesses against the loopback fake server, real Parquet."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from engine.results.rows import key_of_row
from engine.run.shards import shard_of
from tests.fake_openai import FakeOpenAI, HoldAfter, Reply
from tests.run.e2e import ROOT, engine, start_engine, write_project

KEY_ENV = "ENGINE_TEST_KEY"
IDENTITY = ["model", "suite", "test_id", "case_index", "attempt"]


def _keys(df: pd.DataFrame) -> list[str]:
    return [key_of_row(row) for row in df.to_dict("records")]


def _journal_keys(run_dir: Path) -> set[str]:
    try:
        db = sqlite3.connect(f"file:{run_dir / '_journal.sqlite'}?mode=ro", uri=True, timeout=1)
        try:
            return {key for (key,) in db.execute("SELECT key FROM rows")}
        finally:
            db.close()
    except sqlite3.Error:
        return set()


def test_three_concurrent_shards_make_exactly_the_unsharded_run(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="ok", delay_s=0.002)
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=60)
    common = ["run", str(suites), "--models", str(models), "--model", "fast", "--model", "other", "--repeat", "2",
              "--quiet"]
    whole = engine(*common, "--out", str(tmp_path / "whole"), env={KEY_ENV: "k"})
    assert whole.returncode == 0, whole.stderr
    expected = _keys(pd.read_parquet(tmp_path / "whole" / "latest"))
    assert len(expected) == 2 * 63 * 2
    fake_openai.reset()

    out = tmp_path / "results"
    procs = [start_engine(*common, "--out", str(out), "--run-id", "sweep", "--shard", f"{i}/3",
                          env={KEY_ENV: "k", "PYTHONHASHSEED": str(i * 7919)})   # a different salt per process
             for i in (1, 2, 3)]
    for proc in procs:
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
    run = out / "sweep"
    df = pd.read_parquet(run)
    assert sorted(_keys(df)) == sorted(expected)                  # the same jobs, each once
    assert not df.duplicated(IDENTITY).any()
    assert len(fake_openai.requests) == len(expected)              # each call made once, across the shards
    assert set(df["run_id"]) == {"sweep"}

    per_shard = {i: len(pd.read_parquet(run / f"shard-{i}-of-3")) for i in (1, 2, 3)}
    assert sum(per_shard.values()) == len(expected)
    assert all(abs(n - len(expected) / 3) < 0.25 * len(expected) / 3 for n in per_shard.values()), per_shard
    for i in (1, 2, 3):
        shard_manifest = json.loads((run / f"shard-{i}-of-3" / "_manifest.json").read_text())
        assert shard_manifest["complete"] and shard_manifest["shard"] == f"{i}/3"
        assert shard_manifest["counts"]["rows"] == per_shard[i]
    combined = json.loads((run / "_manifest.json").read_text())
    assert combined["complete"] and combined["sharded"] and combined["problems"] == []
    assert combined["counts"]["rows"] == len(expected)
    assert [s["state"] for s in combined["shards"]] == ["complete"] * 3
    assert (out / "latest").resolve() == run.resolve()

    analyzed = engine("analyze", str(run), "--format", "json")
    assert analyzed.returncode == 0, analyzed.stderr
    by_model = {m["model"]: m for m in json.loads(analyzed.stdout)["models"]}
    assert {name: m["rows"] for name, m in by_model.items()} == {"fast": 126, "other": 126}   # every shard's rows
    assert {m["tests"] for m in by_model.values()} == {63}


def test_kill_9_of_one_shard_then_resume_repeats_no_committed_call(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    held = HoldAfter(40, lambda body: Reply(content="ok", delay_s=0.01))   # part-way when killed, whatever the load
    fake_openai.responder = held
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=300, concurrency=4)
    out = tmp_path / "results"
    common = ["run", str(suites), "--models", str(models), "--model", "fast", "--out", str(out), "--run-id", "big",
              "--quiet", "--no-cache"]   # the journal alone decides what is asked again (resume keeps --no-cache)
    run = out / "big"
    shard_dir = run / "shard-2-of-3"
    proc = start_engine(*common, "--shard", "2/3", env={KEY_ENV: "k"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_journal_keys(shard_dir)) < 20:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    held.release()
    committed = _journal_keys(shard_dir)
    assert 20 <= len(committed) < 90, "killed too early or too late to test anything"
    assert not (shard_dir / "_manifest.json").exists()
    asked_before = len(fake_openai.requests)

    others = [engine(*common, "--shard", f"{i}/3", env={KEY_ENV: "k"}) for i in (1, 3)]
    assert [o.returncode for o in others] == [0, 0], [o.stderr for o in others]
    assert not json.loads((run / "_manifest.json").read_text())["complete"]   # shard 2 is not done
    again = engine(*common, "--shard", "2/3", env={KEY_ENV: "k"})
    assert again.returncode == 2 and "--resume" in again.stderr          # a started shard is resumed, not restarted
    fake_openai.reset()
    resumed = engine("run", "--resume", str(run), "--shard", "2/3", "--quiet", env={KEY_ENV: "k"})
    assert resumed.returncode == 0, resumed.stderr

    df = pd.read_parquet(run)
    assert len(df) == 303 and not df.duplicated(IDENTITY).any()
    shard2 = pd.read_parquet(shard_dir)
    prompts_after = Counter(body["messages"][-1]["content"] for body in fake_openai.requests)
    committed_prompts = set(shard2[[key in committed for key in _keys(shard2)]]["prompt"])
    assert not committed_prompts & set(prompts_after)               # no committed row was asked again
    assert len(fake_openai.requests) == len(shard2) - len(committed)  # the resume made exactly the missing calls
    # asked twice: only the calls in flight or answered but not yet group-committed at the kill (as unsharded)
    assert asked_before - len(committed) <= 4 + 512
    assert all(n == 1 for n in prompts_after.values())
    combined = json.loads((run / "_manifest.json").read_text())
    assert combined["complete"] and combined["counts"]["rows"] == 303


def test_a_shard_with_no_jobs_still_writes_a_complete_manifest(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="The capital is Paris.")
    suites, models = write_project(tmp_path, fake_openai.base_url)
    common = ["run", str(suites / "capitals.yaml"), "--models", str(models), "--model", "other", "--filter",
              "france", "--out", str(tmp_path / "r"), "--run-id", "one", "--quiet"]
    codes = [engine(*common, "--shard", f"{i}/4").returncode for i in (1, 2, 3, 4)]
    assert codes == [0, 0, 0, 0]
    run = tmp_path / "r" / "one"
    rows = {i: json.loads((run / f"shard-{i}-of-4" / "_manifest.json").read_text()) for i in (1, 2, 3, 4)}
    assert all(m["complete"] for m in rows.values())
    assert sorted(m["counts"]["rows"] for m in rows.values()) == [0, 0, 0, 1]   # one job, three empty shards
    assert len(fake_openai.requests) == 1
    assert len(pd.read_parquet(run)) == 1
    assert json.loads((run / "_manifest.json").read_text())["complete"]
    # shard folders gathered from machines without a shared filesystem: resuming any one rewrites the view
    (run / "_manifest.json").unlink()
    again = engine("run", "--resume", str(run), "--shard", "3/4", "--quiet")
    assert again.returncode == 0, again.stderr
    assert json.loads((run / "_manifest.json").read_text())["complete"] and len(fake_openai.requests) == 1


def test_the_slice_is_the_same_in_every_process_and_balanced(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=200)
    listings = []
    for seed in ("1", "2"):
        done = engine("run", str(suites), "--models", str(models), "--model", "other", "--dry-run", "--repeat", "3",
                      "--shard", "2/5", "--run-id", "x", env={"PYTHONHASHSEED": seed})
        assert done.returncode == 0, done.stderr
        listings.append(done.stdout)
    assert listings[0] == listings[1] and listings[0]
    calls = sum(json.loads(line)["attempts"] for line in listings[0].splitlines())
    assert abs(calls - 203 * 3 / 5) < 0.2 * 203 * 3 / 5
    # the assignment is a function of the row key alone, computed the same in a fresh interpreter
    code = "from engine.run.shards import shard_of; print([shard_of(f'k{i}', 7) for i in range(50)])"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                           env={"PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)})
    assert other.stdout.strip() == str([shard_of(f"k{i}", 7) for i in range(50)])
    sizes = Counter(shard_of(f"model\x1fsuite\x1ft{i}\x1fh\x1f\x1f0", 8) for i in range(8000))
    assert set(sizes) == set(range(1, 9)) and max(sizes.values()) < 1.1 * 1000 and min(sizes.values()) > 0.9 * 1000


@pytest.mark.parametrize("value", ["0/3", "4/3", "1/0", "abc", "2", "-1/3", "1/3/2"])
def test_a_bad_shard_is_a_usage_error(tmp_path: Path, fake_openai: FakeOpenAI, value: str) -> None:
    suites, models = write_project(tmp_path, fake_openai.base_url)
    done = engine("run", str(suites), "--models", str(models), "--model", "other", "--out", str(tmp_path / "r"),
                  "--run-id", "x", f"--shard={value}")
    assert done.returncode == 2, done.stderr
    assert "--shard" in done.stderr and "I/N" in done.stderr and "Traceback" not in done.stderr
    assert fake_openai.requests == [] and not (tmp_path / "r").exists()


def test_shard_usage_errors_name_the_fix(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="ok")
    suites, models = write_project(tmp_path, fake_openai.base_url)
    base = ["run", str(suites), "--models", str(models), "--model", "other", "--out", str(tmp_path / "r"), "-q"]
    no_id = engine(*base, "--shard", "1/2")
    assert no_id.returncode == 2 and "--run-id" in no_id.stderr
    bad_id = engine(*base, "--run-id", "_hidden", "--shard", "1/2")
    assert bad_id.returncode == 2 and "--run-id" in bad_id.stderr
    assert engine(*base, "--run-id", "s", "--shard", "1/2").returncode == 0
    other_n = engine(*base, "--run-id", "s", "--shard", "1/3")
    assert other_n.returncode == 2 and "same N" in other_n.stderr
    whole = engine("run", "--resume", str(tmp_path / "r" / "s"))
    assert whole.returncode == 2 and "--shard 1/2" in whole.stderr
    never = engine("run", "--resume", str(tmp_path / "r" / "s"), "--shard", "2/2")
    assert never.returncode == 2 and "never started" in never.stderr
    wrong = engine("run", "--resume", str(tmp_path / "r" / "s" / "shard-1-of-2"), "--shard", "2/2")
    assert wrong.returncode == 2 and "shard 1/2" in wrong.stderr
    taken = engine(*base, "--run-id", "s")
    assert taken.returncode == 2 and "already exists" in taken.stderr
    assert not json.loads((tmp_path / "r" / "s" / "_manifest.json").read_text())["complete"]
    assert "Traceback" not in no_id.stderr + bad_id.stderr + other_n.stderr + whole.stderr + never.stderr + taken.stderr
