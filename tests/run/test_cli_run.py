"""`engine run` end to end in real subprocesses: results pandas reads, kill -9 + resume, no leaked key."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pandas as pd

from tests.fake_openai import FakeOpenAI, HoldAfter, Reply
from tests.run.e2e import engine, start_engine, write_project

KEY_ENV = "ENGINE_TEST_KEY"


def answer_capitals(body: dict) -> Reply:
    text = body["messages"][-1]["content"]
    for country, capital in (("France", "Paris"), ("Italy", "Rome"), ("Spain", "Lyon")):
        if country in text:
            return Reply(content=f"The capital is {capital}.")
    return Reply(content="ok")


def test_run_writes_a_folder_pandas_reads(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = answer_capitals
    suites, models = write_project(tmp_path, fake_openai.base_url)
    out = tmp_path / "results"
    done = engine("run", str(suites), "--models", str(models), "--model", "fast", "--model", "other",
                  "--out", str(out), "--repeat", "2", "--seed", "7", env={KEY_ENV: "sk-x"})
    assert done.returncode == 0, done.stderr
    df = pd.read_parquet(out / "latest")
    assert len(df) == 2 * 3 * 2
    assert set(df["model"]) == {"fast", "other"} and set(df["attempt"]) == {0, 1}
    assert df["seed"].isna().all()   # --seed orders the run and is never sent; the models file sets no params.seed
    by_test = df.groupby("test_id")["passed"].all().to_dict()
    assert by_test == {"france": True, "country-Italy": True, "country-Spain": False}
    exploded = df.explode("evaluators")
    assert pd.json_normalize(list(exploded["evaluators"]))["kind"].eq("contains").all()
    manifest = json.loads((out / "latest" / "_manifest.json").read_text())
    assert manifest["complete"] and manifest["counts"] == {"rows": 12, "errors": 0, "parts": 1}
    assert "fast  " in done.stdout or "fast" in done.stdout   # the summary table names the models


def test_invalid_suite_exits_1_before_any_call(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    suites, models = write_project(tmp_path, fake_openai.base_url)
    (suites / "broken.yaml").write_text("suite: broken\ntests:\n  - id: a\n    prompt: hi\n    eval: {nope: 1}\n")
    done = engine("run", str(suites), "--models", str(models), "--out", str(tmp_path / "r"), env={KEY_ENV: "k"})
    assert done.returncode == 1
    assert "broken.yaml:" in done.stderr and "Traceback" not in done.stderr
    assert fake_openai.requests == [] and not (tmp_path / "r").exists()


def test_usage_errors_exit_2(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    suites, models = write_project(tmp_path, fake_openai.base_url)
    unknown = engine("run", str(suites), "--models", str(models), "--model", "nope", env={KEY_ENV: "k"})
    assert unknown.returncode == 2 and "--model nope" in unknown.stderr and "fast" in unknown.stderr
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    no_key = engine("run", str(suites), "--models", str(models), "--model", "fast", env=env)
    assert no_key.returncode == 2 and f"${KEY_ENV}" in no_key.stderr
    retry = engine("run", str(suites), "--retry-errors")
    assert retry.returncode == 2 and "--resume" in retry.stderr
    assert "Traceback" not in unknown.stderr + no_key.stderr + retry.stderr


def test_dry_run_sends_nothing(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    suites, models = write_project(tmp_path, fake_openai.base_url)
    done = engine("run", str(suites), "--models", str(models), "--model", "other", "--dry-run", "--max-tokens", "64")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 3 and lines[0]["body"]["max_tokens"] == 64
    assert fake_openai.requests == []


def _journal_rows(run_dir: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{run_dir / '_journal.sqlite'}?mode=ro", uri=True, timeout=1)
        try:
            return int(db.execute("SELECT count(*) FROM rows").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def test_kill_9_then_resume_loses_nothing_and_duplicates_nothing(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    held = HoldAfter(60, lambda body: Reply(content="ok", delay_s=0.01))   # part-way when killed, whatever the load
    fake_openai.responder = held
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=300, concurrency=4)
    out = tmp_path / "results"
    proc = start_engine("run", str(suites), "--models", str(models), "--model", "fast", "--out", str(out),
                        "--quiet", env={KEY_ENV: "k"})
    deadline = time.monotonic() + 60
    run_dir = None
    while time.monotonic() < deadline:
        runs = [p for p in out.glob("2*") if p.is_dir()] if out.exists() else []
        if runs and _journal_rows(runs[0]) >= 40:
            run_dir = runs[0]
            break
        time.sleep(0.01)
    assert run_dir is not None, "the run never got going"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    held.release()
    before = _journal_rows(run_dir)
    assert 40 <= before < 303, "killed too late to test anything"
    assert not (run_dir / "_manifest.json").exists()
    resumed = engine("run", "--resume", str(run_dir), "--quiet", env={KEY_ENV: "k"})
    assert resumed.returncode == 0, resumed.stderr
    df = pd.read_parquet(run_dir)
    assert len(df) == 303
    assert not df.duplicated(["model", "suite", "test_id", "case_index", "attempt"]).any()
    assert json.loads((run_dir / "_manifest.json").read_text())["counts"]["rows"] == 303
    # committed rows were never asked again; only calls in flight at the kill may have been repeated
    assert len(fake_openai.requests) - 303 <= 4 + 512


def _kill_part_way(tmp_path: Path, fake_openai: FakeOpenAI) -> tuple[Path, Path]:
    """Start a 303-call run, SIGKILL it once 40 rows are committed (the server holds every reply after the 60th
    until then); (the results folder, the run folder)."""
    held = HoldAfter(60, lambda body: Reply(content="ok", delay_s=0.01))
    fake_openai.responder = held
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=300, concurrency=4)
    out = tmp_path / "results"
    proc = start_engine("run", str(suites), "--models", str(models), "--model", "fast", "--out", str(out),
                        "--quiet", env={KEY_ENV: "k"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = [p for p in out.glob("2*") if p.is_dir()] if out.exists() else []
        if runs and _journal_rows(runs[0]) >= 40:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    held.release()
    (run_dir,) = [p for p in out.glob("2*") if p.is_dir()]
    assert 40 <= _journal_rows(run_dir) < 303, "killed too late to test anything"
    return out, run_dir


def test_resume_through_latest_continues_the_run_it_names_and_leaves_latest_alone(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    out, run_dir = _kill_part_way(tmp_path, fake_openai)
    latest = out / "latest"
    assert os.readlink(latest) == run_dir.name
    resumed = engine("run", "--resume", str(latest), "--quiet", env={KEY_ENV: "k"})
    assert resumed.returncode == 0, resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert os.readlink(latest) == run_dir.name            # still names the run, not itself
    assert sorted(p.name for p in out.iterdir()) == sorted([run_dir.name, "latest"])   # no second run folder
    df = pd.read_parquet(run_dir)
    assert len(df) == 303
    assert not df.duplicated(["model", "suite", "test_id", "case_index", "attempt"]).any()
    assert json.loads((run_dir / "_manifest.json").read_text())["complete"] is True
    assert str(run_dir) in resumed.stdout                 # the results line names the run folder itself


def test_resume_through_any_symlink_or_a_latest_text_file(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    out, run_dir = _kill_part_way(tmp_path, fake_openai)
    elsewhere = tmp_path / "my-run"
    elsewhere.symlink_to(run_dir)
    rows = _journal_rows(run_dir)
    first = engine("run", "--resume", str(elsewhere), "--quiet", "--max-cost", "0.0000001", env={KEY_ENV: "k"})
    assert first.returncode == 1 and "stopped early (budget)" in first.stderr, first.stderr
    assert rows < _journal_rows(run_dir) < 303               # it went on in the run folder the link leads to
    assert elsewhere.is_symlink() and elsewhere.resolve() == run_dir
    # where symlinks cannot be made, `latest` is a text file holding the run id: it names the run all the same
    (out / "latest").unlink()
    (out / "latest").write_text(run_dir.name + "\n")
    resumed = engine("run", "--resume", str(out / "latest"), "--quiet", env={KEY_ENV: "k"})
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "latest").read_text() == run_dir.name + "\n"
    assert len(pd.read_parquet(run_dir)) == 303


def test_api_key_canary_is_nowhere(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    canary = "sk-CANARY-" + os.urandom(8).hex()
    # one call fails with a gateway that echoes the key back; the rest succeed
    fake_openai.script(Reply(fault="http_401", error_message=f"Incorrect API key provided: {canary}"))
    fake_openai.responder = answer_capitals
    suites, models = write_project(tmp_path, fake_openai.base_url)
    out = tmp_path / "results"
    done = engine("run", str(suites), "--models", str(models), "--model", "fast", "--out", str(out),
                  env={KEY_ENV: canary})
    assert done.returncode == 0, done.stderr
    assert f"Bearer {canary}" in fake_openai.authorizations   # the key was really used
    df = pd.read_parquet(out / "latest")
    assert (df["error_kind"] == "http_401").sum() == 1
    # the server's own words reach the row, its echo of the key masked
    assert "Incorrect API key provided: ***" in df.loc[df["error_kind"] == "http_401", "error_message"].iloc[0]
    assert canary not in done.stdout + done.stderr
    for path in out.rglob("*"):
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), path


def test_builtin_servers_start_once_per_builtin_and_alias(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import contextlib

    import engine.local.server
    from engine.model.model_config import ModelConfig
    from engine.run.session import _start_builtins

    started: list[tuple[str, str, str]] = []

    @contextlib.contextmanager
    def fake_serve(servers):  # type: ignore[no-untyped-def]
        urls = []
        for name, alias, log_path in servers:
            started.append((name, alias, log_path.name))
            urls.append(f"http://127.0.0.1:{9000 + len(started)}/v1")
        yield urls

    monkeypatch.setattr(engine.local.server, "serve_builtins", fake_serve)
    models = [ModelConfig(name="a", model="gemma-3-270m", builtin="gemma-3-270m"),
              ModelConfig(name="b", model="gemma-3-270m", builtin="gemma-3-270m", api="completions"),
              ModelConfig(name="c", model="my-alias", builtin="gemma-3-270m"),
              ModelConfig(name="d", model="gpt", base_url="http://127.0.0.1:1/v1")]
    with contextlib.ExitStack() as stack:
        out = _start_builtins(models, tmp_path, stack)
    assert sorted(started) == [("gemma-3-270m", "gemma-3-270m", "_gemma-3-270m.server.log"),
                               ("gemma-3-270m", "my-alias", "_gemma-3-270m.my-alias.server.log")]
    urls = {m.name: m.base_url for m in out}
    assert urls["a"] == urls["b"] != urls["c"] and urls["d"] == "http://127.0.0.1:1/v1"
    # the started ones are cached under their identity, not their port; the remote one by its URL
    assert {m.name: m.cache_identity is not None for m in out} == {"a": True, "b": True, "c": True, "d": False}
