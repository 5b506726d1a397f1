"""The run folder as a whole: one writer at a time, and a journal that can be opened whatever happened to it.

- `lock(run_dir)`: an exclusive `fcntl.flock` on `<run_dir>/_lock`, held until the process ends or the
  returned file is closed. The kernel drops it when its holder dies (kill -9 included), so a lock left
  by a dead process never blocks; the file itself stays (removing it would race with the next writer).
- `open_journal(run_dir)`: the journal of a folder being resumed. A journal that is not a database or
  fails SQLite's `quick_check` is moved aside (`_journal.sqlite.corrupt`) and a fresh one created; a
  missing or emptied one is created empty. Either way the writer's `recover()` then gives it back every
  row the Parquet parts hold, and the run's settings come from `_manifest.json` when the journal lost them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from pathlib import Path
from typing import IO, Any

from engine.errors import RunFolderInUse
from engine.results.journal import Journal, storage_error
from engine.results.writer import PART_PREFIX, PART_SUFFIX, move_aside

JOURNAL = "_journal.sqlite"
LOCK = "_lock"
MANIFEST = "_manifest.json"


def lock(run_dir: Path) -> IO[str]:
    """Take the run folder's writer lock; keep the returned file open for as long as the run writes.

    Raises:
        RunFolderInUse: Another live process holds it.
    """
    try:
        handle = open(run_dir / LOCK, "a+")  # noqa: SIM115 - the caller owns it: the lock lives as long as the file
    except OSError as exc:
        raise storage_error(exc, str(run_dir / LOCK)) from exc
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        who = f" (pid {holder})" if holder.isdigit() else ""
        raise RunFolderInUse(f"{run_dir} is in use by another `engine run`{who}; wait for it to finish, or stop "
                             f"it, then resume with: engine run --resume {run_dir}") from None
    with contextlib.suppress(OSError):   # the pid only names the holder in the message; a full disk may refuse it
        os.ftruncate(handle.fileno(), 0)   # unbuffered: nothing left to fail when the file is closed
        os.pwrite(handle.fileno(), f"{os.getpid()}\n".encode(), 0)
    return handle


def is_run_folder(run_dir: Path) -> bool:
    """A folder `engine run` wrote: it has a journal, a manifest or a Parquet part."""
    return run_dir.is_dir() and ((run_dir / JOURNAL).exists() or (run_dir / MANIFEST).is_file()
                                 or any(run_dir.glob(f"{PART_PREFIX}*{PART_SUFFIX}")))


def open_journal(run_dir: Path, *, replace_errors: bool = False) -> tuple[Journal, list[str]]:
    """Open the journal of a run folder being resumed, replacing one that is corrupt.

    Returns:
        The journal, and notes for the user (what was found damaged and what is done about it).
    """
    path = run_dir / JOURNAL
    notes: list[str] = []
    problem: str | None = None
    if path.exists() and path.stat().st_size == 0:
        notes.append(f"{path} is empty: it is rebuilt from the Parquet parts")
    journal: Journal | None = None
    try:
        journal = Journal(path, replace_errors=replace_errors)
        problem = journal.check()
    except sqlite3.DatabaseError as exc:
        if type(exc) is sqlite3.OperationalError:
            raise
        problem = str(exc)
    if problem is not None or journal is None:
        if journal is not None:
            journal.close()
        aside = _move_journal_aside(path)
        notes.append(f"{path} is corrupt ({problem}): moved to {aside.name}; the journal is rebuilt from the "
                     f"Parquet parts, and rows only it held run again")
        journal = Journal(path, replace_errors=replace_errors)
    if journal.get_meta("invocation") is None:
        settings = _manifest_settings(run_dir)
        if settings:
            for key, value in settings.items():
                journal.set_meta(key, value)
            notes.append(f"the run's settings were taken from {run_dir / MANIFEST}")
    return journal, notes


def _move_journal_aside(path: Path) -> Path:
    aside = move_aside(path)
    for suffix in ("-wal", "-shm"):
        extra = path.with_name(path.name + suffix)
        if extra.exists():
            if suffix == "-wal":
                os.replace(extra, aside.with_name(aside.name + suffix))
            else:
                extra.unlink()
    return aside


def read_manifest(run_dir: Path) -> dict[str, Any] | None:
    """The run folder's `_manifest.json`, or None when it is missing, unreadable or not a JSON object.

    The one reader of a finished manifest: resume (its settings), `engine analyze`'s until-decided section and
    `--saturated-since` (the run's start) all take it from here.
    """
    with contextlib.suppress(OSError, ValueError):
        manifest = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8"))
        if isinstance(manifest, dict):
            return manifest
    return None


def _manifest_settings(run_dir: Path) -> dict[str, Any]:
    """run_id, started_at and invocation from `_manifest.json` (empty when it is missing or unreadable)."""
    manifest = read_manifest(run_dir)
    if manifest is not None and isinstance(manifest.get("invocation"), dict):
        return {k: manifest[k] for k in ("run_id", "started_at", "invocation") if manifest.get(k) is not None}
    return {}
