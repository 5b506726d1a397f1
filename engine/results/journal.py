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
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from engine.base.jsontext import dumps_unicode as _ENCODE

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows(key TEXT PRIMARY KEY, is_error INTEGER NOT NULL, part TEXT, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS rows_part ON rows(part);
CREATE TABLE IF NOT EXISTS stale_parts(part TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
"""


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
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._pending: list[tuple[str, int, str]] = []
        # The part that committed rows go straight into (set by the writer; None = no part yet, as
        # `assign_part` then gives one), and how many rows it holds: naming the part at insert time
        # spares an UPDATE that would rewrite every row once more when the part is cut.
        self.open_part: str | None = None
        self.open_part_rows = 0

    def close(self) -> None:
        """Commit what is pending and close."""
        self.commit()
        self._db.close()

    # -- writing ----------------------------------------------------------------------------------

    def add(self, key: str, row: dict[str, Any]) -> None:
        """Buffer one finished row; it is durable after the next `commit`."""
        self._pending.append((key, 1 if row["error_kind"] else 0, _ENCODE(row)))

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
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
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
                changed = db.executemany(
                    "INSERT OR IGNORE INTO rows(key, is_error, part, data) VALUES (?, ?, ?, ?)", rows).rowcount
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if part is not None:   # only decides when the writer cuts the part; it checks the table itself
            self.open_part_rows += changed if changed >= 0 else len(rows)
        return [key for key, _, _ in batch]

    def assign_part(self, part: str) -> int:
        """Give every row without a part this part name (durably, before the file is written).

        Rows committed while `open_part` was set already have their part; this is for the others
        (rows committed before a writer existed, or by an older engine).
        """
        cur = self._db.execute("UPDATE rows SET part = ? WHERE part IS NULL", (part,))
        return cur.rowcount

    def clear_stale(self, part: str) -> None:
        """The part was rewritten."""
        self._db.execute("DELETE FROM stale_parts WHERE part = ?", (part,))

    def set_meta(self, key: str, value: Any) -> None:
        """Store a JSON value under `key`."""
        self._db.execute("INSERT OR REPLACE INTO meta(k, v) VALUES (?, ?)", (key, json.dumps(value)))

    # -- reading ----------------------------------------------------------------------------------

    def get_meta(self, key: str, default: Any = None) -> Any:
        """The JSON value stored under `key`, or `default`."""
        found = self._db.execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return default if found is None else json.loads(found[0])

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
