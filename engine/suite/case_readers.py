"""Readers of case files — CSV, TSV, JSON Lines, JSON, Parquet — each a stream of rows that know where they came from.

Every reader streams: CSV and TSV through the `csv` module a record at a time, JSON Lines a line at a time,
Parquet in record batches (pyarrow), so a 1M-row file is never held whole (bench/bench_cases_from.py). A JSON
file (one array) is the exception: the `json` module reads it whole; use JSON Lines for big files.

A problem in the data is a Diagnostic at FILE:LINE:COL, where COL is the field number for CSV/TSV and the
character for JSON Lines. Formats without lines (Parquet, a JSON array, a dataset) use line 0 and name the row
in the message. A bad row is reported and skipped, so one pass shows every bad row (up to `MAX_PROBLEMS`).

A case file is opened as a regular file only (engine.base.input_file: a FIFO or a device is an error, never a
hang), each line of CSV, TSV and JSON Lines is read at most `MAX_LINE_CHARS` at a time, and a JSON array file
is at most `MAX_JSON_BYTES`: a file without line breaks is an error at its first line, not the whole file in memory.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from engine.base.input_file import InputFileError, capped_lines, open_regular, read_capped
from engine.errors import Diagnostic

__all__ = ["FORMATS", "MAX_JSON_BYTES", "MAX_LINE_CHARS", "MAX_PROBLEMS", "RawRow", "Sink", "read_file"]

# File suffix -> format. In a folder, files with other suffixes are not case files and are passed over.
FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
           ".parquet": "parquet"}
# Problems reported per file before reading stops: a file with every row broken says so in 20 lines, not 1M.
MAX_PROBLEMS = 20
_BATCH_ROWS = 4096   # Parquet rows decoded at a time
#: The longest line of a CSV, TSV or JSON Lines case file (a quoted CSV field may span lines: each is capped).
MAX_LINE_CHARS = 16 * 1024 * 1024
#: The largest JSON (one array) case file, which is read whole; JSON Lines has no such cap.
MAX_JSON_BYTES = 256 * 1024 * 1024
_WHAT = "case file"


class RawRow(NamedTuple):
    """One row as read (a NamedTuple: one is built per row, 3x cheaper than a dataclass).

    Args:
        values: Column -> value (text for CSV/TSV; JSON, Parquet and dataset values keep their types).
        line: 1-based line where the row starts, or 0 for formats without lines.
        number: 1-based data row number within its file (the header is not a row).
    """

    values: dict[str, Any]
    line: int
    number: int


@dataclass
class Sink:
    """Collects one file's problems, and says when to stop reading it.

    Args:
        file: The file as named in messages.
        out: Where the diagnostics go.
        positions: Column -> 1-based field number, once the header is read (CSV, TSV, Parquet).
    """

    file: str
    out: list[Diagnostic]
    positions: dict[str, int] = field(default_factory=dict)
    count: int = 0

    def error(self, line: int, col: int, message: str, *, row: int = 0) -> bool:
        """Report a problem; False once `MAX_PROBLEMS` are reported (the reader then stops)."""
        self.count += 1
        if self.count > MAX_PROBLEMS:
            return False
        if line <= 0 and row > 0:
            message = f"row {row}: {message}"
        self.out.append(Diagnostic(self.file, line, col if line > 0 else 0, message))
        if self.count == MAX_PROBLEMS:
            self.out.append(Diagnostic(self.file, 0, 0, f"stopped reading after {MAX_PROBLEMS} problems; fix "
                                                       "these and run again"))
            return False
        return True

    @property
    def failed(self) -> bool:
        return self.count > 0


def read_file(path: Path, kind: str, sink: Sink) -> Iterator[RawRow]:
    """Stream the rows of one case file.

    Args:
        path: The file to open.
        kind: Its format, a value of `FORMATS`.
        sink: Where problems go (reading stops after `MAX_PROBLEMS`).
    """
    if kind in ("csv", "tsv"):
        yield from _delimited(path, sink, "," if kind == "csv" else "\t")
    elif kind == "jsonl":
        yield from _json_lines(path, sink)
    elif kind == "json":
        yield from _json_array(path, sink)
    else:
        yield from _parquet(path, sink)


def _delimited(path: Path, sink: Sink, delimiter: str) -> Iterator[RawRow]:
    name = "CSV" if delimiter == "," else "TSV"
    line = 0
    try:
        with io.TextIOWrapper(open_regular(path, _WHAT), encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(capped_lines(handle, MAX_LINE_CHARS, _WHAT, path, _LONG_LINE), delimiter=delimiter)
            header: list[str] = []
            for record in reader:
                if record:
                    header = record
                    break
            if not header:
                sink.error(0, 0, f"the file is empty; a {name} case file starts with a header row naming its "
                                 "columns (the template variables), then one row per case")
                return
            if not _check_header(header, reader.line_num, sink):
                return
            sink.positions = {column: i + 1 for i, column in enumerate(header)}
            width, number, line = len(header), 0, reader.line_num
            for record in reader:
                start, line = line + 1, reader.line_num
                if not record:
                    continue   # a blank line (spreadsheets often end with some)
                number += 1
                if len(record) != width:
                    if not sink.error(start, min(len(record), width) + 1, _width_problem(record, header, name)):
                        return
                    continue
                yield RawRow(dict(zip(header, record, strict=True)), start, number)
            if number == 0:
                sink.error(0, 0, f"the file has a header row but no data rows; add one row per case below "
                                 f"the header ({', '.join(header)})")
    except InputFileError as exc:
        sink.error(exc.line, 1, exc.problem)
    except csv.Error as exc:
        sink.error(line + 1, 1, f"cannot read this {name} record: {exc}; check its quotes (a field holding "
                                "the delimiter, a quote or a line break is quoted, a quote inside doubled: \"\")")
    except UnicodeDecodeError as exc:
        sink.error(line + 1, 1, f"the file is not UTF-8 text ({exc.reason} at byte {exc.start} of a block); "
                                "save it as UTF-8 (Excel: 'CSV UTF-8')")


_LONG_LINE = ("is the file's line break missing? A case file holds one row (CSV, TSV) or one JSON object "
              "(JSON Lines) a line; split the data into rows")


def _check_header(header: list[str], line: int, sink: Sink) -> bool:
    ok = True
    seen: dict[str, int] = {}
    for i, column in enumerate(header, 1):
        if not column.strip():
            sink.error(line, i, f"column {i} of the header row has no name; name it (it becomes the template "
                                "variable) or delete the empty column")
            ok = False
        elif column in seen:
            sink.error(line, i, f"the header names '{column}' twice (columns {seen[column]} and {i}); column "
                                "names must be unique")
            ok = False
        else:
            seen[column] = i
    return ok


def _width_problem(record: list[str], header: list[str], name: str) -> str:
    quoting = ("a field holding the delimiter, a quote or a line break must be quoted (\"Paris, France\"), "
               "a quote inside it doubled")
    if len(record) < len(header):
        missing = ", ".join(f"'{c}'" for c in header[len(record):])
        fields = "1 field" if len(record) == 1 else f"{len(record)} fields"
        return (f"this row has {fields} but the header has {len(header)}: no value for {missing}; "
                f"add the missing fields (empty ones as nothing between delimiters) — {quoting}")
    extra = record[len(header)]
    shown = extra if len(extra) <= 30 else extra[:27] + "..."
    return (f"this row has {len(record)} fields but the header has {len(header)}: field {len(header) + 1} "
            f"('{shown}') has no column; {quoting}, or the header needs another column")


def _json_lines(path: Path, sink: Sink) -> Iterator[RawRow]:
    number = 0
    line_no = 0
    try:
        with io.TextIOWrapper(open_regular(path, _WHAT), encoding="utf-8-sig") as handle:
            for line_no, text in enumerate(capped_lines(handle, MAX_LINE_CHARS, _WHAT, path, _LONG_LINE), 1):
                if not text.strip():
                    continue
                number += 1
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    if not sink.error(line_no, exc.colno, f"this line is not valid JSON ({exc.msg}); each line of "
                                                          "a JSON Lines file is one JSON object, {\"name\": value}"):
                        return
                    continue
                if not isinstance(value, dict):
                    if not sink.error(line_no, 1, f"this line is a JSON {type(value).__name__}, not an object; "
                                                  "each line is one case: {\"variable\": value, ...}"):
                        return
                    continue
                yield RawRow(value, line_no, number)
    except InputFileError as exc:
        sink.error(exc.line, 1, exc.problem)
        return
    except UnicodeDecodeError as exc:
        sink.error(line_no + 1, 1, f"the file is not UTF-8 text ({exc.reason}); save it as UTF-8")
        return
    if number == 0:
        sink.error(0, 0, "the file is empty; a JSON Lines case file holds one JSON object per line")


def _json_array(path: Path, sink: Sink) -> Iterator[RawRow]:
    try:
        data = json.loads(read_capped(path, _WHAT, MAX_JSON_BYTES).decode("utf-8-sig"))
    except InputFileError as exc:
        sink.error(0, 0, exc.problem)
        return
    except json.JSONDecodeError as exc:
        sink.error(exc.lineno, exc.colno, f"not valid JSON ({exc.msg}); a JSON case file is one array of "
                                          "objects, [{\"name\": value}, ...]")
        return
    except UnicodeDecodeError as exc:
        sink.error(0, 0, f"the file is not UTF-8 text ({exc.reason}); save it as UTF-8")
        return
    if not isinstance(data, list):
        sink.error(1, 1, f"a JSON case file is one array of objects, [{{\"name\": value}}, ...], not a JSON "
                         f"{type(data).__name__}" + ("; for one object per line, name the file .jsonl"
                                                     if isinstance(data, dict) else ""))
        return
    if not data:
        sink.error(0, 0, "the array is empty; add one object per case")
        return
    for number, value in enumerate(data, 1):
        if not isinstance(value, dict):
            if not sink.error(0, 0, f"is a JSON {type(value).__name__}, not an object", row=number):
                return
            continue
        yield RawRow(value, 0, number)


def _parquet(path: Path, sink: Sink) -> Iterator[RawRow]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        handle = open_regular(path, _WHAT)
    except InputFileError as exc:
        sink.error(0, 0, exc.problem)
        return
    with handle:
        try:
            parquet = pq.ParquetFile(handle)
        except (pa.ArrowException, OSError) as exc:
            sink.error(0, 0, f"cannot read this Parquet file ({exc}); is it a Parquet file?")
            return
        with parquet:
            sink.positions = {column: i + 1 for i, column in enumerate(parquet.schema_arrow.names)}
            if parquet.metadata.num_rows == 0:
                sink.error(0, 0, "the file has no rows; add one row per case")
                return
            number = 0
            for batch in parquet.iter_batches(batch_size=_BATCH_ROWS):
                for values in batch.to_pylist():
                    number += 1
                    yield RawRow(values, 0, number)
