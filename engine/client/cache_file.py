"""One home for "an SQLite cache file under the user cache folder": where it lives and how it is opened.

The judge cache (engine/judge/cache.py) and the response cache (`response_cache.py`) both keep paid replies in
one user-wide SQLite file, so a re-run (which writes a new run folder) finds what an earlier run paid for.
What they share is here:

- where: `$<ENV>` when set, else `$XDG_CACHE_HOME/llm-eval-engine/<kind>/<kind>.sqlite` (default `~/.cache`);
- opening: WAL journal (readers never wait for a writer; several processes and shards may share the file),
  a 30 s busy timeout, every write committed at once (a killed run keeps what it paid for), or a batch of
  them in one transaction (`write_many`: the response cache's replies of one event-loop turn);
- failing soft: a file that cannot be opened, read or written (a corrupt file, a read-only folder) is never
  a reason to lose a run. `problem` says why; reads then miss and writes are skipped.

Neither cache ever reads an API key: keys are sha256 digests of what was asked, values are replies already
masked by the client (`engine.redact`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CacheFile", "user_cache_path"]


def user_cache_path(env: str, kind: str) -> Path:
    """`$env` when set, else `$XDG_CACHE_HOME/llm-eval-engine/<kind>/<kind>.sqlite` (default `~/.cache/...`).

    Args:
        env: The environment variable that names the file explicitly.
        kind: The cache's folder and file stem ("judge", "responses").
    """
    explicit = os.environ.get(env)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llm-eval-engine" / kind / f"{kind}.sqlite"


class CacheFile:
    """An SQLite file opened for a cache, failing soft.

    Args:
        path: The file (its folder is created).
        schema: Statements run once at open (`CREATE TABLE IF NOT EXISTS ...`).
        what: The cache's name in messages ("the judge cache").
    """

    def __init__(self, path: Path, schema: Sequence[str], what: str) -> None:
        self.path = path
        self.what = what
        self.problem: str | None = None
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        db = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, check_same_thread=False, timeout=30)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")   # WAL: a commit survives a killed process, no fsync each
            for statement in schema:
                db.execute(statement)
            db.commit()
            self._db = db
        except (OSError, sqlite3.Error) as exc:
            if db is not None:
                db.close()
            self.problem = f"{what} {path} could not be opened ({exc})"

    @property
    def usable(self) -> bool:
        """Whether the file is open."""
        return self._db is not None

    def read(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a query; none when the file is not usable or the read fails (noted in `problem`)."""
        if self._db is None:
            return []
        with self._lock:
            try:
                return self._db.execute(sql, tuple(args)).fetchall()
            except sqlite3.Error as exc:
                self.problem = f"{self.what} {self.path} could not be read ({exc})"
                return []

    def write(self, sql: str, args: Iterable[Any] = ()) -> int:
        """Run one statement and commit it; the rows it changed (0 when skipped or failed, noted in `problem`)."""
        if self._db is None:
            return 0
        with self._lock:
            try:
                changed = self._db.execute(sql, tuple(args)).rowcount
                self._db.commit()
                return max(0, changed)
            except sqlite3.Error as exc:
                self.problem = f"{self.what} {self.path} could not be written ({exc})"
                return 0

    def write_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run one statement for each of `rows` in one transaction; the rows it changed (0 when failed, noted)."""
        if self._db is None or not rows:
            return 0
        with self._lock:
            try:
                changed = self._db.executemany(sql, rows).rowcount
                self._db.commit()
                return max(0, changed)
            except sqlite3.Error as exc:
                self._db.rollback()
                self.problem = f"{self.what} {self.path} could not be written ({exc})"
                return 0

    def close(self) -> None:
        """Close the file."""
        if self._db is not None:
            self._db.close()
            self._db = None
