"""Journal -> Parquet parts -> manifest, crash-safe.

A run folder holds `_journal.sqlite`, `part-NNNNN.parquet` files and, written last,
`_manifest.json`. Parts are derived from the journal:

1. every row gets its part's name in the journal when it is committed (the writer's open part; rows
   committed without one are given it by an UPDATE first);
2. once enough rows are in it, the part is written to `.part-NNNNN.parquet.tmp` (a hidden name, which
   Parquet readers skip), fsynced, renamed, and the folder fsynced.

Once written, a part is the truth about its rows: `recover()` (run on every open) reads every part
whole, moves an unreadable one aside (`_part-NNNNN.parquet.corrupt`, never deleted), gives the
journal back any row only a part holds (a lost, emptied or corrupt journal is rebuilt this way, so
those calls are never paid again), rewrites the parts the journal names but the folder lacks, stale
parts (a `--retry-errors` success replaced one of their rows) and parts whose row count differs from
the journal's, and deletes leftover temporary files - so each row is in exactly one part file.

A failed write (disk full, I/O error) raises `StorageError`; its temporary file is removed.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from engine.results.journal import Journal, storage_error
from engine.results.rows import SINGLE_TURN_NULLS, key_of_row

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


def write_atomic(path: Path, data: bytes | Callable[[BinaryIO], object], *, hidden_tmp: bool = False) -> None:
    """Write `path` via a fsynced temporary file and a rename, so a reader sees the old file or the new, whole.

    Args:
        path: The final path.
        data: The bytes to write, or a function that writes them to the open file.
        hidden_tmp: Name the temporary file `.NAME.tmp`, which readers of the folder skip (Parquet parts).

    Raises:
        StorageError: the write, the fsync or the rename failed (the temporary file is removed).
    """
    tmp = path.with_name(f".{path.name}.tmp" if hidden_tmp else path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            if isinstance(data, bytes):
                fh.write(data)
            else:
                data(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise storage_error(exc, str(path)) from exc
    _fsync_dir(path.parent)


def move_aside(path: Path) -> Path:
    """Rename an unreadable file to `_<name>.corrupt` (`_<name>.corrupt.N` if taken); never delete it.

    The leading underscore keeps Parquet readers (pandas, pyarrow, DuckDB globs of `*.parquet`) off it.
    """
    name = path.name if path.name.startswith("_") else "_" + path.name
    target = path.with_name(name + ".corrupt")
    n = 1
    while target.exists():
        target = path.with_name(f"{name}.corrupt.{n}")
        n += 1
    os.replace(path, target)
    return target


def read_part(path: Path) -> pa.Table | None:
    """The whole table of a part file, or None when it cannot be read (truncated, corrupt, not Parquet).

    Everything is read, not only the footer: a damaged page would otherwise break `pd.read_parquet`.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.results.schema import SCHEMA

    try:
        with open(path, "rb") as fh:
            parquet = pq.ParquetFile(fh)
            table = parquet.read()
            if table.num_rows != parquet.metadata.num_rows:
                return None
            return table.select(SCHEMA.names).cast(SCHEMA)
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None


def rows_of_table(table: pa.Table) -> list[dict[str, Any]]:
    """The rows of a part as the journal stores them (timestamps as integer microseconds)."""
    return table.cast(_read_schema()).to_pylist()  # type: ignore[no-any-return]


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

    from engine.results.schema import SCHEMA

    try:
        # Single-turn rows first: Arrow's reader fills every field of its schema on every row, present or not, and
        # the agent columns and judge fields cost it as much as the fields a row has. Read without them (any row
        # that has one refuses the narrow read: "unexpected field"), then add them as null columns
        # (bench/README.md, "engine run").
        table = _read_lines(data, _single_turn_schema(), "error")
        if table.num_rows == count:
            return _with_timestamps(_widened(table))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    try:
        table = _read_lines(data, _read_schema(), "ignore")
        if table.num_rows == count:
            return _with_timestamps(table.select(SCHEMA.names))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    return pa.Table.from_pylist([json.loads(line) for line in data.split(b"\n")] if count else [], schema=SCHEMA)


def _read_lines(data: bytes, schema: pa.Schema, unexpected: str) -> pa.Table:
    """Arrow's JSON reader over `data` (one object per line) with `schema`; `unexpected`: what other fields do."""
    import pyarrow as pa
    import pyarrow.json as pa_json

    return pa_json.read_json(
        pa.BufferReader(data),
        # One block holds everything: a row larger than the block size would be refused.
        read_options=pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1),
        parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior=unexpected,
                                           newlines_in_values=False),
        # The system allocator, not Arrow's default mimalloc: mimalloc hands each part's buffers fresh
        # pages the kernel must zero, where glibc malloc reuses the memory the previous part freed.
        memory_pool=pa.system_memory_pool())


def _widened(table: pa.Table) -> pa.Table:
    """A table read with `_single_turn_schema` as `_read_schema`: the columns and evaluator fields it left out
    added as nulls (buffers reused, nothing copied or cast, so `pyarrow.compute` stays unimported)."""
    import pyarrow as pa

    from engine.results.schema import EVALUATOR_NODE

    count = table.num_rows
    columns = []
    for field in _read_schema():
        index = table.schema.get_field_index(field.name)
        if index < 0:
            columns.append(pa.nulls(count, field.type))
        elif field.name == "evaluators":
            columns.append(pa.chunked_array([_with_judge_fields(chunk, EVALUATOR_NODE)
                                             for chunk in table.column(index).chunks], type=field.type))
        else:
            columns.append(table.column(index))
    return pa.Table.from_arrays(columns, schema=_read_schema())


def _with_judge_fields(entries: pa.ListArray, node: pa.StructType) -> pa.ListArray:
    """A list<struct> chunk of evaluator entries read without the judge fields, with them as null children."""
    import pyarrow as pa

    values = entries.values
    children = [values.field(i) for i in range(values.type.num_fields)]
    children += [pa.nulls(len(values), node.field(i).type) for i in range(len(children), node.num_fields)]
    struct = pa.Array.from_buffers(node, len(values), values.buffers()[:1], null_count=values.null_count,
                                   offset=values.offset, children=children)
    return pa.Array.from_buffers(pa.list_(node), len(entries), entries.buffers()[:2], null_count=entries.null_count,
                                 offset=entries.offset, children=[struct])  # type: ignore[return-value]


def _with_timestamps(table: pa.Table) -> pa.Table:
    """The table as SCHEMA: the int64 microsecond columns viewed as timestamps, the rest as read.

    A zero-copy `view` instead of `Table.cast`, whose first use imports `pyarrow.compute` (53 ms, 7.4 MB of
    a 2,000-call `engine run`'s peak; bench/README.md "engine run"). Any other difference from
    SCHEMA still goes through `cast`.
    """
    import pyarrow as pa

    from engine.results.schema import SCHEMA

    columns = []
    for field, column in zip(SCHEMA, table.columns, strict=True):
        if column.type != field.type:
            if not (pa.types.is_timestamp(field.type) and column.type == pa.int64()):
                return table.cast(SCHEMA)
            column = pa.chunked_array([chunk.view(field.type) for chunk in column.chunks], type=field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=SCHEMA)


@functools.cache
def _single_turn_schema() -> pa.Schema:
    """`_read_schema` as a single-turn row without a judge fills it: no `SINGLE_TURN_NULLS` column, and the
    evaluator entries without their `judge_*` fields (the fields a node of every kind has come first)."""
    import pyarrow as pa

    from engine.results.schema import EVALUATOR_NODE

    common = pa.struct([field for field in EVALUATOR_NODE if not field.name.startswith("judge_")])
    return pa.schema([pa.field(f.name, pa.list_(common), f.nullable) if f.name == "evaluators" else f
                      for f in _read_schema() if f.name not in SINGLE_TURN_NULLS])


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
        journal.start_part(self._part_name(self._next))   # committed rows go straight into the next part

    @staticmethod
    def _part_name(index: int) -> str:
        return f"{PART_PREFIX}{index:05d}{PART_SUFFIX}"

    def _next_index(self) -> int:
        indices = [int(p[len(PART_PREFIX):-len(PART_SUFFIX)]) for p in self.journal.parts()]
        indices += [int(p.name[len(PART_PREFIX):-len(PART_SUFFIX)]) for p in self.run_dir.glob("part-*.parquet")]
        return max(indices, default=-1) + 1

    def recover(self) -> list[str]:
        """Make the part files and the journal agree after a crash or damage (idempotent).

        Returns:
            Notes for the user: parts moved aside, rows given back to the journal.

        Raises:
            StorageError: A part or the journal could not be written.
        """
        for tmp in [*self.run_dir.glob(".part-*.tmp"), *self.run_dir.glob("part-*.tmp")]:
            tmp.unlink(missing_ok=True)
        notes: list[str] = []
        on_disk: dict[str, int] = {}
        for path in sorted(self.run_dir.glob(f"{PART_PREFIX}*{PART_SUFFIX}")):
            table = read_part(path)
            held = self.journal.rows_in(path.name)
            if table is None:
                aside = move_aside(path)
                notes.append(f"{path.name} is unreadable (truncated or corrupt): moved to {aside.name}; "
                             + (f"its {held} row(s) are written again from the journal" if held
                                else "the rows it held will run again"))
                continue
            on_disk[path.name] = table.num_rows
            if table.num_rows != held:
                added = self.journal.restore(path.name, ((key_of_row(r), r) for r in rows_of_table(table)))
                if added:
                    notes.append(f"{path.name}: {added} row(s) missing from the journal were restored from it")
            del table
        stale = self.journal.stale_parts()
        for part in sorted(self.journal.parts() | stale | set(on_disk)):
            if part in stale or on_disk.get(part) != self.journal.rows_in(part):
                # Missing, stale, or holding other rows than the journal names to it (a row the journal
                # keeps in another part is that part's): written again from the journal.
                self._write_part(part)
        return notes

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
            self.journal.start_part(self._part_name(self._next))

    def _write_part(self, part: str) -> None:
        import pyarrow.parquet as pq

        path = self.run_dir / part
        count, lines = self.journal.json_lines_of_part(part)
        if not count:
            path.unlink(missing_ok=True)
        else:
            table = table_from_json_lines(count, lines)
            del lines
            write_atomic(path, lambda fh: pq.write_table(table, fh, compression="zstd"), hidden_tmp=True)
        self.journal.clear_stale(part)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Write `_manifest.json` (last, atomically)."""
        text = json.dumps(manifest, indent=2, ensure_ascii=False, default=str) + "\n"
        write_atomic(self.run_dir / "_manifest.json", text.encode())
