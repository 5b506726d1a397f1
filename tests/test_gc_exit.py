"""The CLI's collector settings (engine/_gc.py) as a whole command sees them, in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.engine_proc import checkout_env

# Runs `python -m engine ARGS`, then says, from an atexit handler (which runs after the command's
# `finally` and before the interpreter's exit collections), how many objects are frozen and how many the
# collector still tracks.
_SCRIPT = (
    "import atexit, gc, json, runpy, sys\n"
    "atexit.register(lambda: print('GC', json.dumps([gc.get_freeze_count(), len(gc.get_objects())])))\n"
    "sys.argv = ['engine', *sys.argv[1:]]\n"
    "runpy.run_module('engine', run_name='__main__', alter_sys=True)\n"
)


def _frozen_and_tracked(*args: str) -> tuple[int, int, subprocess.CompletedProcess[str]]:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, *args], capture_output=True, text=True,
                         env=checkout_env(), check=False)
    line = next(line for line in out.stdout.splitlines() if line.startswith("GC "))
    frozen, tracked = json.loads(line[3:])
    return frozen, tracked, out


def test_a_command_leaves_its_objects_frozen_for_the_exit(tmp_path: Path) -> None:
    # The interpreter's exit collections then walk none of them (0.13-0.15 s after a 2,000-call run).
    suite = tmp_path / "s.yaml"
    suite.write_text("suite: s\ntests:\n  - id: a\n    prompt: hi\n    eval: {contains: ok}\n")
    frozen, tracked, out = _frozen_and_tracked("validate", str(suite))
    assert out.returncode == 0, out.stderr
    assert frozen > 20_000 and tracked < 1_000, (frozen, tracked)


def test_a_failing_command_freezes_too(tmp_path: Path) -> None:
    suite = tmp_path / "bad.yaml"
    suite.write_text("suite: s\ntests:\n  - id: a\n    prompt: hi\n    eval: {nope: 1}\n")
    frozen, tracked, out = _frozen_and_tracked("validate", str(suite))
    assert out.returncode == 1 and "bad.yaml:" in out.stderr, out.stderr
    assert frozen > 20_000 and tracked < 1_000, (frozen, tracked)
