"""The journal: every finished call is durable here before it counts as done.

SQLite in WAL mode with `synchronous=NORMAL`: a committed row survives kill -9 of the engine (the
WAL is in the OS's hands once COMMIT returns); only an OS crash or power loss may lose the last
commits, which `--resume` then runs again. (FULL would fsync every commit for little gain.) Rows
are buffered and committed in batches (the runner commits every ~50 ms or N rows); only committed
rows are reported as done, so a crash loses at most calls that were never counted.

Tables:
    rows(key PRIMARY KEY, is_error, part, data)   data = the row as JSON; part = the Parquet part
                                                  file holding it (named when the row is committed,
                                                  written later), NULL until assigned
    stale_parts(part)                             parts to rewrite (a row in them was replaced)
    meta(k, v)                                    run settings, for --resume
    batches(local, model, batch_id, keys, at)     each batch handed to a provider's batch API: recorded with its
                                                  row keys before it is sent (batch_id NULL), then with the
                                                  provider's id before it is waited for (`engine run --batch`)

A failed write (disk full, I/O error) raises `StorageError` and marks the journal failed: what was
committed before stays, nothing more is written (`close` does not try again).
"""

from __future__ import annotations

import errno
import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.base.jsontext import dumps_compact_text, dumps_unicode, utf8_safe
from engine.errors import StorageError
from engine.results.schema import FLOAT_COLUMNS

_SQLITE_FULL = 13
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def storage_error(exc: BaseException, what: str) -> StorageError:
    """A `StorageError` for a failed write of `what` (a full disk is told apart: it has its own remedy)."""
    full = (getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL
            or getattr(exc, "errno", None) in _DISK_FULL_ERRNOS
            or "No space left on device" in str(exc))   # Arrow's IOError carries no errno
    return StorageError(f"could not write {what}: {exc}", disk_full=full)

_INFINITY = float("inf")
_PAGE_BYTES = 16384


def _encode(row: dict[str, Any]) -> str:
    """A row's JSON text: compact orjson text, the journal's hot path.

    A NaN or infinite value in a float column keeps `json.dumps`'s `NaN` / `Infinity` (orjson would write
    null), which `table_from_json_lines` then reads through its fallback, as before; nested values (an
    evaluator's details) that are not finite are stored as null.
    """
    for name in FLOAT_COLUMNS:
        value = row.get(name)
        if value is not None and (value != value or value == _INFINITY or value == -_INFINITY):
            return utf8_safe(dumps_unicode(row))
    return dumps_compact_text(row)


#: A new row goes in unless its key is already there (the first row for a key wins).
_INSERT = "INSERT OR IGNORE INTO rows(key, is_error, part, data) VALUES (?, ?, ?, ?)"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows(key TEXT PRIMARY KEY, is_error INTEGER NOT NULL, part TEXT, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS rows_part ON rows(part);
CREATE TABLE IF NOT EXISTS stale_parts(part TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS batches(local TEXT PRIMARY KEY, model TEXT NOT NULL, batch_id TEXT, keys TEXT NOT NULL,
                                   at TEXT NOT NULL);
"""


@dataclass(frozen=True)
class BatchRecord:
    """A batch of one model's calls as the journal holds it.

    Args:
        local: The run's own name for it (unique in the run), given before the provider knows it.
        model: The model name its rows are reported under.
        batch_id: The provider's id, or None while it was being sent (a run killed then left it unknown).
        keys: The row keys it holds, in the order of its requests.
        at: When it was recorded (ISO 8601, UTC).
    """

    local: str
    model: str
    batch_id: str | None
    keys: tuple[str, ...]
    at: str


class Journal:
    """The run's SQLite journal.

    Args:
        path: The journal file (`<run dir>/_journal.sqlite`: the leading underscore keeps
            `pd.read_parquet(run_dir)` from reading it); created when missing.
        replace_errors: True for `--retry-errors`: a successful row replaces an error row with the same
            key (and marks its Parquet part stale); otherwise the first row for a key wins.
    """

    def __init__(self, path: Path, *, replace_errors: bool = False) -> None:
        self.path = path
        self.replace_errors = replace_errors
        self.failed = False
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise storage_error(exc, str(path)) from exc
        try:
            # 16 KB pages for a new journal (an existing one keeps its own; the size is fixed once WAL is on):
            # a row is ~1 KB of JSON and a batch dirties leaves all over the key index, which small pages split.
            self._db.execute(f"PRAGMA page_size={_PAGE_BYTES}")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            # One transaction: each CREATE on its own would commit (and log) page 1 and its new page again.
            self._db.executescript("BEGIN;" + _SCHEMA + "COMMIT;")
        except sqlite3.Error as exc:
            self._db.close()
            if type(exc) is sqlite3.OperationalError:   # full, read-only, I/O: the folder, not the file's content
                raise storage_error(exc, str(path)) from exc
            raise   # sqlite3.DatabaseError: not a journal (see engine.results.folder.open_journal)
        self._pending: list[tuple[str, int, str]] = []
        # The part that committed rows go straight into (set by the writer, `start_part`; None = no part yet, as
        # `assign_part` then gives one), and how many rows it holds: naming the part at insert time
        # spares an UPDATE that would rewrite every row once more when the part is cut.
        self.open_part: str | None = None
        self.open_part_rows = 0

    def start_part(self, part: str) -> None:
        """Commit rows into `part` from now on, counting its rows from none (the writer's next part)."""
        self.open_part = part
        self.open_part_rows = 0

    def close(self) -> None:
        """Commit what is pending (unless a write already failed) and close."""
        try:
            if not self.failed:
                self.commit()
        finally:
            self._db.close()

    def check(self) -> str | None:
        """SQLite's `quick_check` of the file: None when sound, else what is wrong.

        Raises:
            sqlite3.DatabaseError: The file is not a database at all.
        """
        found = [str(r[0]) for r in self._db.execute("PRAGMA quick_check")]
        return None if found == ["ok"] else "; ".join(found[:3])

    # -- writing ----------------------------------------------------------------------------------

    def add(self, key: str, row: dict[str, Any]) -> None:
        """Buffer one finished row; it is durable after the next `commit`."""
        self._pending.append((key, 1 if row["error_kind"] else 0, _encode(row)))

    @property
    def pending(self) -> int:
        """Rows buffered and not yet committed."""
        return len(self._pending)

    def commit(self) -> list[str]:
        """Make the buffered rows durable.

        Returns:
            The keys that were committed (a key already done is ignored, so never written twice).
        """
        if not self._pending:
            return []
        batch, self._pending = self._pending, []
        part = self.open_part   # bound at commit: the writer may cut the part between add() and commit()
        rows = [(key, is_error, part, data) for key, is_error, data in batch]
        if self.failed:
            raise StorageError(f"{self.path}: an earlier write failed; nothing more is written")
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            if self.replace_errors:
                db.executemany(
                    "INSERT OR IGNORE INTO stale_parts(part) SELECT part FROM rows "
                    "WHERE key = ? AND is_error = 1 AND part IS NOT NULL AND ? = 0",
                    [(key, is_error) for key, is_error, _ in batch])
                changed = db.executemany(
                    "INSERT INTO rows(key, is_error, part, data) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET is_error = excluded.is_error, part = excluded.part, "
                    "data = excluded.data WHERE rows.is_error = 1 AND excluded.is_error = 0", rows).rowcount
            else:
                changed = db.executemany(_INSERT, rows).rowcount
            db.execute("COMMIT")
        except BaseException as exc:
            # SQLite has already rolled back after SQLITE_FULL / SQLITE_IOERR; a second ROLLBACK would
            # fail with "no transaction is active" and hide the cause.
            if db.in_transaction:
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                self.failed = True
                raise storage_error(exc, f"{len(batch)} row(s) to {self.path}") from exc
            raise
        if part is not None:   # only decides when the writer cuts the part; it checks the table itself
            self.open_part_rows += changed if changed >= 0 else len(rows)
        return [key for key, _, _ in batch]

    def assign_part(self, part: str) -> int:
        """Give every row without a part this part name (durably, before the file is written).

        Rows committed while `open_part` was set already have their part; this is for the others
        (rows committed before a writer existed, or by an older engine).
        """
        return self._write("UPDATE rows SET part = ? WHERE part IS NULL", (part,))

    def clear_stale(self, part: str) -> None:
        """The part was rewritten."""
        self._write("DELETE FROM stale_parts WHERE part = ?", (part,))

    def set_meta(self, key: str, value: Any) -> None:
        """Store a JSON value under `key`."""
        self._write("INSERT OR REPLACE INTO meta(k, v) VALUES (?, ?)", (key, json.dumps(value)))

    def put_batch(self, record: BatchRecord) -> None:
        """Record a batch (again, once its provider's id is known); durable when this returns."""
        self._write("INSERT INTO batches(local, model, batch_id, keys, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT(local) "
                    "DO UPDATE SET model = excluded.model, batch_id = excluded.batch_id, keys = excluded.keys, "
                    "at = excluded.at",
                    (record.local, record.model, record.batch_id, json.dumps(list(record.keys)), record.at))

    def restore(self, part: str, rows: Iterable[tuple[str, dict[str, Any]]]) -> int:
        """Put rows read back from a Parquet part into the journal (a lost or emptied journal, rebuilt).

        A key the journal already holds keeps its row (never a second copy).

        Returns:
            How many rows were added.
        """
        batch = [(key, 1 if row["error_kind"] else 0, part, _encode(row)) for key, row in rows]
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            added = db.executemany(_INSERT, batch).rowcount
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            self.failed = True
            raise storage_error(exc, f"{self.path}") from exc
        return max(added, 0)

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        if self.failed:
            raise StorageError(f"{self.path}: an earlier write failed; nothing more is written")
        try:
            return self._db.execute(sql, params).rowcount
        except sqlite3.Error as exc:
            self.failed = True
            raise storage_error(exc, str(self.path)) from exc

    # -- reading ----------------------------------------------------------------------------------

    def get_meta(self, key: str, default: Any = None) -> Any:
        """The JSON value stored under `key`, or `default`."""
        found = self._db.execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return default if found is None else json.loads(found[0])

    def batches(self) -> list[BatchRecord]:
        """Every batch recorded, in the order they were first recorded."""
        found = self._db.execute("SELECT local, model, batch_id, keys, at FROM batches ORDER BY rowid")
        return [BatchRecord(local, model, batch_id, tuple(json.loads(keys)), at)
                for local, model, batch_id, keys, at in found]

    def keys(self, *, errors_only: bool = False) -> set[str]:
        """Keys of committed rows (all, or only error rows)."""
        sql = "SELECT key FROM rows" + (" WHERE is_error = 1" if errors_only else "")
        return {key for (key,) in self._db.execute(sql)}

    def unassigned(self) -> int:
        """Committed rows not yet in a Parquet part."""
        return int(self._db.execute("SELECT count(*) FROM rows WHERE part IS NULL").fetchone()[0])

    def rows_in(self, part: str) -> int:
        """Committed rows named to this part."""
        return int(self._db.execute("SELECT count(*) FROM rows WHERE part = ?", (part,)).fetchone()[0])

    def parts(self) -> set[str]:
        """Part names rows are assigned to."""
        return {p for (p,) in self._db.execute("SELECT DISTINCT part FROM rows WHERE part IS NOT NULL")}

    def stale_parts(self) -> set[str]:
        """Parts that must be rewritten."""
        return {p for (p,) in self._db.execute("SELECT part FROM stale_parts")}

    def json_lines_of_part(self, part: str) -> tuple[int, bytes]:
        """(rows, their JSON texts as UTF-8, one per line) of one part, in key order.

        Read as bytes straight from SQLite (no str per row, no second copy to encode) for Arrow's
        JSON reader. Sorted here rather than by `ORDER BY`, which makes SQLite copy every row into
        its sorter: Python's order of str keys is SQLite's BINARY order (code points = UTF-8 bytes).
        """
        found = self._db.execute("SELECT key, CAST(data AS BLOB) FROM rows WHERE part = ?", (part,)).fetchall()
        found.sort()   # keys are unique: only keys are compared
        return len(found), b"\n".join([data for _, data in found])

    def count(self) -> tuple[int, int]:
        """(rows, error rows)."""
        total, errors = self._db.execute("SELECT count(*), coalesce(sum(is_error), 0) FROM rows").fetchone()
        return int(total), int(errors)
