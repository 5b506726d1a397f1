"""Child processes that never outlive the engine.

A server child is started in its own session (so it and anything it forks form one process group we
can kill together), asks the kernel to send it SIGTERM when its parent dies (Linux `PR_SET_PDEATHSIG`,
so even a `kill -9` of the engine leaves no orphan), and is stopped with SIGTERM to the whole group,
then SIGKILL after a grace period. An `atexit` hook covers interpreters that exit without unwinding
the `with` block that owns the child.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

__all__ = ["ManagedProcess", "group_alive", "start_group", "stop_group"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec: ask for SIGTERM when the parent goes away."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    # The parent may have died between fork and prctl: then the signal would never come.
    if os.getppid() != parent_pid:
        os._exit(1)


class ManagedProcess:
    """A child process leading its own process group, stopped as a group.

    Args:
        popen: The started child (its pid is also its process-group id).
        log_file: The open file its output goes to, closed when it is stopped.
    """

    def __init__(self, popen: subprocess.Popen[bytes], log_file: IO[bytes] | None) -> None:
        self.popen = popen
        self.pgid = popen.pid
        self._log_file = log_file
        self._stopped = False
        atexit.register(self.stop)

    @property
    def pid(self) -> int:
        """The child's process id (also its process-group id)."""
        return self.popen.pid

    def poll(self) -> int | None:
        """The child's exit code, or None while it runs."""
        return self.popen.poll()

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the whole group: SIGTERM, wait up to `grace_s`, then SIGKILL. Safe to call twice.

        Args:
            grace_s: Seconds the server gets to shut down cleanly before SIGKILL.
        """
        if self._stopped:
            return
        self._stopped = True
        try:
            stop_group(self.popen, grace_s=grace_s)
        finally:
            if self._log_file is not None:
                self._log_file.close()
            atexit.unregister(self.stop)


def start_group(argv: Sequence[str], *, log_path: Path, env: dict[str, str] | None = None) -> ManagedProcess:
    """Start `argv` as the leader of a new session and process group, output appended to `log_path`.

    Args:
        argv: The command line.
        log_path: File that receives the child's stdout and stderr (created, parents too).
        env: The child's environment (default: the parent's).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = open(log_path, "ab")  # noqa: SIM115 - closed by ManagedProcess.stop
    parent_pid = os.getpid()
    # PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not the process: only ask for it
    # from the main thread, where that thread's end is the process's end.
    on_main_thread = threading.current_thread() is threading.main_thread()
    try:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=(lambda: _die_with_parent(parent_pid)) if on_main_thread else None,  # noqa: PLW1509
        )
    except BaseException:
        log_file.close()
        raise
    return ManagedProcess(popen, log_file)


def group_alive(pgid: int) -> bool:
    """True while any process of the group `pgid` exists (zombies included)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(popen: subprocess.Popen[bytes], *, grace_s: float = 5.0) -> None:
    """SIGTERM the child's process group, wait, then SIGKILL whatever is left, and reap the child.

    Args:
        popen: A child started with `start_new_session=True` (its pid is its group id).
        grace_s: Seconds between SIGTERM and SIGKILL.
    """
    pgid = popen.pid
    _signal_group(pgid, signal.SIGTERM)
    try:
        popen.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    # Grandchildren may still hold the group even when the leader is gone: kill the group regardless.
    _signal_group(pgid, signal.SIGKILL)
    try:
        popen.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        pass


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
