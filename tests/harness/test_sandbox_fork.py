"""Private uid ranges: every live engine process has one of its own (a forked child too: the fork server of
tests/engine_proc.py forks a CLI per call), whatever its pid, so one run's "kill every process of this uid" never
reaches another's programs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.harness import uids

ROOT = Path(__file__).resolve().parents[2]
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="private uids are handed out only when the engine is root")

# Claims the range `preferred` asks for (argv[1]), prints its index, and holds it until stdin closes.
CLAIM = """
import sys
from engine.harness.isolation import _claim_range
index, _ = _claim_range(int(sys.argv[1]))
print(index, flush=True)
sys.stdin.read()
"""


def test_a_forked_child_takes_uids_from_a_range_of_its_own() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its range's base and the first uid it would hand out
        os.close(read)
        os.write(write, f"{uids._UID_BASE} {uids._take_uid()}".encode())
        os._exit(0)
    os.close(write)
    base, first = map(int, os.read(read, 64).split())
    os.close(read)
    os.waitpid(pid, 0)
    assert first == base + 1
    if os.geteuid() == 0 or pid % 1000 != os.getpid() % 1000:
        assert base != uids._UID_BASE


def _claim(preferred: int) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen([sys.executable, "-c", CLAIM, str(preferred)], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, int(process.stdout.readline())


@AS_ROOT
def test_processes_whose_pids_ask_for_one_range_get_two_and_a_killed_ones_is_free_again() -> None:
    preferred = os.getpid() % 1000
    first, taken = _claim(preferred)
    second = None
    try:
        second, other = _claim(taken)
        assert other != taken            # the same pid mod 1000 no longer means the same uids
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
        third, again = _claim(taken)
        third.communicate(timeout=60)
        assert again == taken            # the kernel let go of the killed process's lock
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=60)
