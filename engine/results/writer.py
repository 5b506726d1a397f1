"""Journal -> Parquet parts -> manifest, crash-safe.

A run folder holds `_journal.sqlite` (the truth), `part-NNNNN.parquet` files and, written last,
`_manifest.json`. Parts are derived from the journal:

1. every row gets its part's name in the journal when it is committed (the writer's open part; rows
   committed without one are given it by an UPDATE first);
2. once enough rows are in it, the part is written to `part-NNNNN.parquet.tmp`, fsynced, renamed,
   and the folder fsynced.

If the process dies between 1 and 2, `recover()` (run on every open) rewrites the parts the journal
names but the folder lacks, rewrites stale parts (a `--retry-errors` success replaced one of their
rows), and deletes leftover `.tmp` files - so each row is in exactly one part file.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.results.journal import Journal

if TYPE_CHECKING:
    import pyarrow as pa

PART_PREFIX = "part-"
PART_SUFFIX = ".parquet"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a fsynced temporary file and a rename.

    Args:
        path: The final path.
        data: The bytes to write.
    """
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def table_from_json(texts: list[str]) -> pa.Table:
    """The results table of rows stored as JSON text (see `table_from_json_lines`).

    Args:
        texts: The rows' JSON texts, in the order the table should have.
    """
    return table_from_json_lines(len(texts), "\n".join(texts).encode())


def table_from_json_lines(count: int, data: bytes) -> pa.Table:
    """The results table of rows stored as JSON text (one object per row, as the journal keeps them).

    Arrow's JSON reader parses the text straight into columns: about a third of the CPU of
    `json.loads` + `Table.from_pylist` per row, and it does not import pandas (any `pa.array` of Python
    objects does, ~0.2 s). Timestamps are stored as integer microseconds, which the reader does not
    convert to timestamps itself, so they are read as int64 and cast. Text the reader refuses (NaN,
    an integer beyond int64, ...) goes through `from_pylist`, which either copes or raises as before.

    Args:
        count: How many rows `data` holds.
        data: The rows' JSON texts as UTF-8, one per line, in the order the table should have.
    """
    import pyarrow as pa
    import pyarrow.json as pa_json

    from engine.results.schema import SCHEMA

    try:
        table = pa_json.read_json(
            pa.BufferReader(data),
            # One block holds everything: a row larger than the block size would be refused.
            read_options=pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1),
            parse_options=pa_json.ParseOptions(explicit_schema=_read_schema(), unexpected_field_behavior="ignore",
                                               newlines_in_values=False),
            # The system allocator, not Arrow's default mimalloc: mimalloc hands each part's
            # buffers fresh memory, and the kernel zeroing its huge pages cost ~10 us per call
            # in `bench/bench_run.py` (perf: `clear_page_erms` under `mi_page_free_list_extend`);
            # glibc malloc reuses the memory freed by the previous part.
            memory_pool=pa.system_memory_pool())
        if table.num_rows == count:
            return table.select(SCHEMA.names).cast(SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    return pa.Table.from_pylist([json.loads(line) for line in data.split(b"\n")] if count else [], schema=SCHEMA)


@functools.cache
def _read_schema() -> pa.Schema:
    """The results schema with timestamps as int64 (microseconds), as the JSON reader is given it."""
    import pyarrow as pa

    from engine.results.schema import SCHEMA

    return pa.schema([pa.field(f.name, pa.int64(), f.nullable) if pa.types.is_timestamp(f.type) else f
                      for f in SCHEMA])


class ResultsWriter:
    """Writes a run folder's Parquet parts from its journal.

    Args:
        run_dir: The run folder.
        journal: Its open journal.
        rows_per_part: Flush a part once this many committed rows wait for one.
    """

    def __init__(self, run_dir: Path, journal: Journal, rows_per_part: int = 5000) -> None:
        self.run_dir = run_dir
        self.journal = journal
        self.rows_per_part = rows_per_part
        self._next = self._next_index()
        journal.open_part = self._part_name(self._next)   # committed rows go straight into the next part
        journal.open_part_rows = 0

    @staticmethod
    def _part_name(index: int) -> str:
        return f"{PART_PREFIX}{index:05d}{PART_SUFFIX}"

    def _next_index(self) -> int:
        indices = [int(p[len(PART_PREFIX):-len(PART_SUFFIX)]) for p in self.journal.parts()]
        indices += [int(p.name[len(PART_PREFIX):-len(PART_SUFFIX)]) for p in self.run_dir.glob("part-*.parquet")]
        return max(indices, default=-1) + 1

    def recover(self) -> None:
        """Make the part files agree with the journal after a crash (idempotent)."""
        for tmp in self.run_dir.glob("part-*.tmp"):
            tmp.unlink(missing_ok=True)
        named = self.journal.parts()
        for part in sorted(named | self.journal.stale_parts()):
            if part in self.journal.stale_parts() or not (self.run_dir / part).exists():
                self._write_part(part)
        for path in self.run_dir.glob("part-*.parquet"):
            if path.name not in named:
                path.unlink()   # no journal row points at it: never a second copy of a row

    def maybe_flush(self) -> None:
        """Flush a part when enough committed rows wait (call after each journal commit)."""
        if self.journal.open_part_rows + self.journal.unassigned() >= self.rows_per_part:
            self.flush()

    def flush(self) -> None:
        """Rewrite stale parts and write the open part (with any committed row that has no part yet)."""
        for part in sorted(self.journal.stale_parts()):
            self._write_part(part)
        part = self._part_name(self._next)
        moved = self.journal.assign_part(part) if self.journal.unassigned() else 0
        if moved or self.journal.rows_in(part):
            self._write_part(part)
            self._next += 1
            self.journal.open_part = self._part_name(self._next)
            self.journal.open_part_rows = 0

    def _write_part(self, part: str) -> None:
        import pyarrow.parquet as pq

        path = self.run_dir / part
        count, lines = self.journal.json_lines_of_part(part)
        if not count:
            path.unlink(missing_ok=True)
        else:
            table = table_from_json_lines(count, lines)
            del lines
            tmp = path.with_name(path.name + ".tmp")
            with open(tmp, "wb") as fh:
                pq.write_table(table, fh, compression="zstd")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            _fsync_dir(self.run_dir)
        self.journal.clear_stale(part)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Write `_manifest.json` (last, atomically)."""
        text = json.dumps(manifest, indent=2, ensure_ascii=False, default=str) + "\n"
        write_atomic(self.run_dir / "_manifest.json", text.encode())
