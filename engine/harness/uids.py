"""Private uids: when the engine runs as root, each sandboxed run and each open workspace gets a uid of its own.

So RLIMIT_NPROC (counted per real uid) of one run never starves another, "kill every process of this uid" hits
only that run, and files a workspace's commands leave belong to a uid no other program has while it is open.
A uid is leased (`lease_uid`), and released (`release_uid`) only once nothing runs as it any more.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from engine.errors import HarnessError
from engine.harness.isolation import SANDBOX_PATH, UID_RANGE, isolation_report, probe_uid

_UID_BASE = probe_uid()     # this process's range: the probe's uid, then the pool
_uid_lock = threading.Lock()
_uids_free = list(range(_UID_BASE + 1, _UID_BASE + UID_RANGE))


def _fresh_uids_after_fork() -> None:
    """A forked child is a run of its own (tests/engine_proc.py forks one per CLI call): without its own uid
    range, two children's "kill every process of this uid" could hit each other's programs."""
    global _UID_BASE, _uids_free, _uid_lock  # noqa: PLW0603 (module state a fork must renew)
    _UID_BASE = probe_uid()
    _uids_free = list(range(_UID_BASE + 1, _UID_BASE + UID_RANGE))
    _uid_lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_uids_after_fork)


def lease_uid() -> int | None:
    """A private uid held until `release_uid` (a run's, or a workspace's for its whole life), or None when
    privileges are not dropped here. Files a workspace's commands leave belong to its uid: no other run gets that
    uid while the workspace is open, so no other program can touch them."""
    return _take_uid() if isolation_report().drop_privileges else None


def release_uid(uid: int | None) -> None:
    """Kill whatever still runs as a leased uid and put it back in the pool."""
    if uid is not None:
        sweep_uid(uid)
        _give_uid(uid)


def _take_uid() -> int:
    with _uid_lock:
        if not _uids_free:
            raise HarnessError(f"more than {UID_RANGE - 1} sandboxed programs and open workspaces at once; lower "
                               "the concurrency")
        return _uids_free.pop(0)


def _give_uid(uid: int) -> None:
    with _uid_lock:
        _uids_free.append(uid)


def give_tree(root: Path, uid: int) -> None:
    """chown `root` and everything under it (symlinks themselves, never their targets) to `uid`."""
    try:
        os.chown(root, uid, uid)
        for folder, dirs, names in os.walk(root):
            for name in dirs + names:
                os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)
    except OSError as exc:
        raise HarnessError(f"could not hand the work folder to the sandbox: {exc}") from exc


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`, from a helper running as that uid (kill(-1) is atomic in the kernel)."""
    kill = shutil.which("kill", path=SANDBOX_PATH)
    if kill is None:
        return
    for _ in range(2):
        try:
            subprocess.run([kill, "-9", "-1"], check=False, user=uid, group=uid, extra_groups=[], env={},
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           cwd="/", timeout=5)
        except (OSError, subprocess.SubprocessError):
            return


def sweep_uid(uid: int) -> None:
    """Kill every process of `uid` and wait until none is left.

    SIGKILL is asynchronous: a dying fork bomb (or a PID namespace being torn down) is still in the
    process table for a moment. The uid goes back to the pool only when it is empty, so the next run
    starts with a clean process count.
    """
    for attempt in range(500):
        if not _uid_has_processes(uid):
            return
        if attempt % 10 == 0:
            kill_uid(uid)
        time.sleep(0.01)


def _uid_has_processes(uid: int) -> bool:
    """True while a live (non-zombie) process runs as `uid`."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.stat(entry.path).st_uid != uid:
                    continue
                with open(os.path.join(entry.path, "stat"), "rb") as handle:
                    stat = handle.read()
            except OSError:
                continue
            if stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] not in (b"Z", b"X"):
                return True
    return False
