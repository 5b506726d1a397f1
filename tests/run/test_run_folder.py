"""The run folder under hostile conditions, end to end in real subprocesses against the fake server.

A full disk, a damaged journal, two resumes at once and a resume from another directory: each ends in
rows or one clear message (no traceback), and afterwards `--resume` finishes the run with every row
read back by `pd.read_parquet` once, and no call whose row was saved made again (counted at the server).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine, start_engine, write_project
from tests.run.test_storage_failure import settled_requests

KEY_ENV = "ENGINE_TEST_KEY"
ENV = {KEY_ENV: "k"}


def saved_test_ids(run_dir: Path) -> set[str]:
    """Test ids of the rows committed to the journal (read-only, as another process would)."""
    db = sqlite3.connect(f"file:{run_dir / '_journal.sqlite'}?mode=ro", uri=True, timeout=5)
    try:
        return {key.split("\x1f")[2] for (key,) in db.execute("SELECT key FROM rows")}
    finally:
        db.close()


def asked(server: FakeOpenAI, since: int = 0) -> list[str]:
    """Test ids of the requests the server got (bulk tests ask "question N", the test id is q-N)."""
    ids = []
    for body in server.requests[since:]:
        text = body["messages"][-1]["content"]
        ids.append(f"q-{text.split()[-1]}" if text.startswith("question ") else text)
    return ids


def bulk_project(tmp_path: Path, server: FakeOpenAI, tests: int) -> tuple[Path, Path]:
    """`tests` bulk tests only (capitals removed), model `fast` (priced, so --max-cost can stop it)."""
    suites, models = write_project(tmp_path, server.base_url, tests=tests, concurrency=4)
    (suites / "capitals.yaml").unlink()
    return suites, models


def assert_finished(run_dir: Path, total: int) -> pd.DataFrame:
    df = pd.read_parquet(run_dir)
    assert len(df) == total
    assert not df.duplicated(["model", "suite", "test_id", "case_index", "attempt"]).any()
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    assert manifest["complete"] and manifest["counts"]["rows"] == total
    return df


def stopped_early(tmp_path: Path, server: FakeOpenAI, tests: int, *, cwd: Path | None = None,
                  relative: bool = False) -> Path:
    """A run `--max-cost 0` stopped after its first calls (every call made has its row)."""
    suites, models = bulk_project(tmp_path, server, tests)
    out = tmp_path / "results"
    if relative:
        assert cwd is not None
        suites, models, out = (Path(os.path.relpath(p, cwd)) for p in (suites, models, out))
    done = engine("run", str(suites), "--models", str(models), "--model", "fast", "--out", str(out), "--quiet",
                  "--max-cost", "0", env=ENV, cwd=cwd)
    assert done.returncode == 1 and "stopped early (budget)" in done.stderr, done.stderr
    [run_dir] = [p for p in (tmp_path / "results").glob("2*") if p.is_dir()]
    assert 0 < len(saved_test_ids(run_dir)) < tests
    assert len(server.requests) == len(saved_test_ids(run_dir))   # each call made has its row
    return run_dir


# -- a full disk ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 384 KiB tmpfs (root only); yields (mount point, grow) where grow() frees space by resizing it.

    Room for the run folder, a new journal (16 KB pages: its schema and meta alone are ~200 KB of WAL) and a
    few rows, not for all 200: the run fills it part-way (was 160 KiB with 4 KB journal pages).
    """
    if os.geteuid() != 0:
        pytest.skip(f"disk-full test needs root to mount a small tmpfs (running as uid {os.geteuid()})")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=384k", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"disk-full test: cannot mount a tmpfs here: {done.stderr.strip()}")

    def grow() -> None:
        subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)

    try:
        yield mount, grow
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_stops_spending_and_resume_finishes(tmp_path: Path, fake_openai: FakeOpenAI,
                                                        small_disk: tuple[Path, object]) -> None:
    mount, grow = small_disk
    fake_openai.responder = lambda body: Reply(content="ok " + "x" * 2000, delay_s=0.05)
    suites, models = bulk_project(tmp_path, fake_openai, 200)
    done = engine("run", str(suites), "--models", str(models), "--model", "fast", "--out", str(mount / "results"),
                  "--quiet", "--no-cache", env=ENV)   # the journal alone decides what is asked again
    [run_dir] = list((mount / "results").glob("2*"))
    saved = saved_test_ids(run_dir)
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip() == (f"disk full: {len(saved)} rows saved in {run_dir}; free space and resume with: "
                                   f"engine run --resume {run_dir}")
    assert 0 < len(saved) < 200
    settled = settled_requests(fake_openai)    # calls cancelled on the client may reach the server late
    first = asked(fake_openai)[:settled]
    # Spending stopped at once: beyond the saved rows, only the calls in flight and those finished since
    # the last commit were made (bounded by the concurrency, 4), not the other ~190 jobs.
    assert len(first) - len(saved) <= 4 * 4, (len(first), len(saved))
    assert saved <= set(first)

    # Resuming while the disk is still full stops the same way (SQLite may reuse the failed commit's room).
    still_full = engine("run", "--resume", str(run_dir), "--quiet", env=ENV)
    saved_now = saved_test_ids(run_dir)
    assert still_full.returncode == 3 and "Traceback" not in still_full.stderr, still_full.stderr
    assert still_full.stderr.strip().splitlines()[-1] == (
        f"disk full: {len(saved_now)} rows saved in {run_dir}; free space and resume with: "
        f"engine run --resume {run_dir}")
    settled = settled_requests(fake_openai)
    during = asked(fake_openai, since=len(first))[:settled - len(first)]
    assert not saved & set(during)
    assert len(during) - len(saved_now - saved) <= 4 * 4

    grow()   # free space
    resumed = engine("run", "--resume", str(run_dir), "--quiet", env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    assert "Traceback" not in resumed.stderr
    again = asked(fake_openai, since=len(first) + len(during))
    assert not saved_now & set(again)                          # no saved row was paid for twice
    assert sorted(again) == sorted({f"q-{i}" for i in range(200)} - saved_now)   # each missing one once
    assert_finished(run_dir, 200)


# -- two writers ----------------------------------------------------------------------------------


def test_a_second_resume_of_one_folder_is_refused(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    run_dir = stopped_early(tmp_path, fake_openai, 120)
    before = len(fake_openai.requests)
    second_done = threading.Event()   # calls are slow until the second resume has been refused
    fake_openai.responder = lambda body: Reply(delay_s=0.01 if second_done.is_set() else 0.5)
    first = start_engine("run", "--resume", str(run_dir), "--quiet", "--max-cost", "1000", env=ENV)
    try:
        deadline = time.monotonic() + 60
        while len(fake_openai.requests) == before and time.monotonic() < deadline:
            time.sleep(0.01)    # the first resume calls: it holds the lock
        assert first.poll() is None, "the first resume ended before the second could start"
        second = engine("run", "--resume", str(run_dir), "--quiet", "--max-cost", "1000", env=ENV)
        assert first.poll() is None, "the first resume ended while the second ran: nothing was tested"
    finally:
        second_done.set()
        _, err = first.communicate(timeout=120)
    assert second.returncode == 1
    assert f"{run_dir} is in use by another `engine run` (pid {first.pid})" in second.stderr
    assert "Traceback" not in second.stderr + err
    assert first.returncode == 0, err
    counts = Counter(asked(fake_openai))
    assert [test for test, n in counts.items() if n > 1] == []     # no call made twice
    assert len(fake_openai.requests) == 120
    assert_finished(run_dir, 120)


def test_a_lock_left_by_a_killed_run_does_not_block(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    run_dir = stopped_early(tmp_path, fake_openai, 20)
    holder = subprocess.Popen(["python3", "-c", "import fcntl, sys, time\n"
                               f"f = open({str(run_dir / '_lock')!r}, 'w'); f.write('999999'); f.flush()\n"
                               "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    refused = engine("run", "--resume", str(run_dir), "--quiet", "--max-cost", "1000", env=ENV)
    assert refused.returncode == 1 and "is in use by another `engine run` (pid 999999)" in refused.stderr
    holder.kill()
    holder.wait()
    assert (run_dir / "_lock").read_text().strip() == "999999"     # the file stays; the lock died with it
    resumed = engine("run", "--resume", str(run_dir), "--quiet", "--max-cost", "1000", env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    assert_finished(run_dir, 20)
    assert len(fake_openai.requests) == 20


# -- where it runs from ---------------------------------------------------------------------------


def test_resume_works_from_any_directory(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    project = tmp_path
    run_dir = stopped_early(project, fake_openai, 30, cwd=project, relative=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = engine("run", "--resume", str(run_dir), "--quiet", "--max-cost", "1000", env=ENV, cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stderr
    assert_finished(run_dir, 30)
    assert len(fake_openai.requests) == 30
    invocation = json.loads((run_dir / "_manifest.json").read_text())["invocation"]
    assert invocation["paths"] == [str(project / "suites")]
    assert invocation["models_file"] == str(project / "models.yaml")


# -- a damaged journal ----------------------------------------------------------------------------


def test_a_corrupt_journal_gets_a_clear_note_and_the_parts_rebuild_it(tmp_path: Path,
                                                                       fake_openai: FakeOpenAI) -> None:
    run_dir = stopped_early(tmp_path, fake_openai, 30)
    finished = engine("run", "--resume", str(run_dir), "--quiet", "--max-cost", "1000", env=ENV)
    assert finished.returncode == 0, finished.stderr
    fake_openai.reset()
    (run_dir / "_journal.sqlite").write_bytes(b"this is not SQLite " * 300)
    resumed = engine("run", "--resume", str(run_dir), "--quiet", env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    assert re.search(r"note: .*_journal.sqlite is corrupt \(file is not a database\): moved to "
                     r"_journal.sqlite.corrupt", resumed.stderr), resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert fake_openai.requests == []
    assert_finished(run_dir, 30)


def test_an_emptied_journal_without_a_manifest_asks_for_the_settings(tmp_path: Path,
                                                                     fake_openai: FakeOpenAI) -> None:
    suites, models = bulk_project(tmp_path, fake_openai, 12)
    done = engine("run", str(suites), "--models", str(models), "--model", "fast", "--out", str(tmp_path / "r"),
                  "--quiet", env=ENV)
    assert done.returncode == 0, done.stderr
    [run_dir] = list((tmp_path / "r").glob("2*"))
    fake_openai.reset()
    (run_dir / "_journal.sqlite").write_bytes(b"")
    (run_dir / "_manifest.json").unlink()
    bare = engine("run", "--resume", str(run_dir), "--quiet", env=ENV)
    assert bare.returncode == 2 and "give them again" in bare.stderr and "Traceback" not in bare.stderr
    assert len(list(run_dir.glob("part-*.parquet"))) == 1           # nothing deleted meanwhile
    given = engine("run", "--resume", str(run_dir), str(suites), "--models", str(models), "--model", "fast",
                   "--quiet", env=ENV)
    assert given.returncode == 0, given.stderr
    assert fake_openai.requests == []
    assert_finished(run_dir, 12)


def test_a_truncated_part_is_set_aside_and_written_again(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    suites, models = bulk_project(tmp_path, fake_openai, 12)
    done = engine("run", str(suites), "--models", str(models), "--model", "fast", "--out", str(tmp_path / "r"),
                  "--quiet", env=ENV)
    assert done.returncode == 0, done.stderr
    [run_dir] = list((tmp_path / "r").glob("2*"))
    fake_openai.reset()
    part = run_dir / "part-00000.parquet"
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    resumed = engine("run", "--resume", str(run_dir), "--quiet", env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    assert "note: part-00000.parquet is unreadable (truncated or corrupt): moved to _part-00000.parquet.corrupt; " \
           "its 12 row(s) are written again from the journal" in resumed.stderr
    assert "Traceback" not in resumed.stderr and fake_openai.requests == []
    assert (run_dir / "_part-00000.parquet.corrupt").exists()
    assert_finished(run_dir, 12)
