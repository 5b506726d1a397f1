"""A forked process gets its own private uid range (the fork server of tests/engine_proc.py forks a CLI per call)."""

from __future__ import annotations

import os

from engine.harness import uids


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
    assert base == 610_000 + (pid % 1000) * 256
    assert first == base + 1
    if pid % 1000 != os.getpid() % 1000:
        assert base != uids._UID_BASE
