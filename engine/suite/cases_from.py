"""`cases_from:` — a test's case rows read from a file, a folder of files, or a Hugging Face dataset.

    cases_from: cases.csv                       # the short form
    cases_from:
      file: data/                               # or a folder: every .csv .tsv .jsonl .ndjson .json .parquet in it
      columns: {question: Question, golden: Answer}   # variable: column (picks and renames); a list only picks
      json: [golden]                            # cells holding JSON text (CSV/TSV)
      filter: "difficulty == 'hard'"            # a Jinja expression over the file's columns
      limit: 100                                # the first 100 rows that pass the filter
      sample: {n: 20, seed: 1}                  # then 20 of them, reservoir-sampled, kept in file order
    cases_from: {dataset: owner/name, split: test, config: default, revision: main}

The rows are the rows an inline `cases:` list would hold, so the expander turns them into the same Tests
with the same hashes (a CSV cell is text, as a quoted YAML value is). Each row is a `FileRow`: a dict that
also carries its `CaseOrigin`, so a problem found later (a missing variable, a golden that fails its own
evaluator) points at FILE:LINE:COL of the row.

`CaseSource` streams: iterating it reads the files again, row by row, holding only a `sample`'s rows. The
expander iterates twice (check the variables of every row, then build the Tests), so a 1M-row file is read
twice but never held: bench/bench_cases_from.py measures it against pandas.read_csv.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from engine.base.render import ENV, TemplateSyntaxError
from engine.base.template_budget import budget
from engine.base.words import did_you_mean
from engine.errors import Diagnostic
from engine.model.cases import CaseOrigin
from engine.suite.case_readers import FORMATS, RawRow, Sink, read_file
from engine.suite.checks import Report

__all__ = ["CaseSource", "FileRow", "open_cases"]


class FileRow(dict[str, Any]):
    """A case row (variable -> value) that knows its `CaseOrigin`; otherwise a plain dict."""

    __slots__ = ("origin",)

    def __init__(self, values: Mapping[str, Any], origin: CaseOrigin) -> None:
        super().__init__(values)
        self.origin = origin


@dataclass(frozen=True)
class _Spec:
    """A `cases_from` value, read once (the schema has checked its keys and types)."""

    file: str | None
    dataset: str | None
    format: str | None
    columns: dict[str, str] | None       # variable -> column; None keeps every column as it is named
    json_columns: tuple[str, ...] | None  # variables whose text is JSON; None: only a golden that looks it
    filter: str | None
    limit: int | None
    sample: tuple[int, int] | None       # (n, seed)
    options: Mapping[str, Any]           # split, config, revision (datasets)


def _spec(value: Any) -> _Spec:
    raw: Mapping[str, Any] = {"file": value} if isinstance(value, str) else value
    columns = raw.get("columns")
    if isinstance(columns, list):
        columns = {name: name for name in columns}
    sample = raw.get("sample")
    return _Spec(file=raw.get("file"), dataset=raw.get("dataset"), format=raw.get("format"), columns=columns,
                 json_columns=tuple(raw["json"]) if "json" in raw else None, filter=raw.get("filter"),
                 limit=raw.get("limit"), sample=(int(sample["n"]), int(sample.get("seed", 0))) if sample else None,
                 options={k: raw[k] for k in ("split", "config", "revision") if k in raw})


def open_cases(value: Any, where: tuple[Any, ...], report: Report, suite_dir: Path) -> CaseSource | None:
    """The case rows a test's `cases_from` names, or None when the value has problems (reported at `where`).

    Args:
        value: The `cases_from` value as written (schema-valid).
        where: Its path in the suite file.
        report: The suite file's report: problems in the YAML at `where`, in the data at their file.
        suite_dir: The suite file's folder; relative paths resolve inside it.
    """
    spec = _spec(value)
    if (spec.file is None) == (spec.dataset is None):
        report.error(where, "`cases_from` names a `file:` (a file or folder beside the suite) or a `dataset:` "
                            "(a Hugging Face dataset), exactly one of them")
        return None
    misplaced = [k for k in (("split", "config", "revision") if spec.file else ("format",)) if k in value]
    if misplaced:
        report.error(where + (misplaced[0],), f"`{misplaced[0]}` belongs to "
                     + ("a `dataset:`; a file has none" if spec.file else "a `file:`; a dataset has its own format"),
                     key=True)
        return None
    keep: Callable[..., Any] | None = None
    if spec.filter is not None:
        try:
            keep = ENV.compile_expression(spec.filter, undefined_to_none=False)
        except TemplateSyntaxError as exc:
            report.error(where + ("filter",), f"this filter does not compile: {exc.message}; write a Jinja "
                                              "expression over the row's variables, e.g. \"level == 'hard'\"")
            return None
    if spec.dataset is not None:
        return CaseSource(spec, [], report, where, suite_dir, keep)
    files = _files(spec, where, report, suite_dir)
    return None if files is None else CaseSource(spec, files, report, where, suite_dir, keep)


def _files(spec: _Spec, where: tuple[Any, ...], report: Report, suite_dir: Path) -> list[tuple[Path, str, str]] | None:
    """(path to open, name in messages, format) of each file, or None (reported)."""
    assert spec.file is not None
    written = Path(spec.file)
    path = written if written.is_absolute() else suite_dir / written
    shown = str(written if written.is_absolute() else Path(report.file).parent / written)
    at = where + ("file",)   # the short form has no `file:` key: its position falls back to `cases_from` itself
    if path.is_dir():   # a FIFO or device named like a case file is kept: its reader says it is no regular file
        found = sorted(p for p in path.rglob("*") if not p.is_dir() and p.suffix.lower() in FORMATS
                       and not any(part.startswith(".") for part in p.relative_to(path).parts))
        if not found:
            report.error(at, f"the folder {path} holds no case files; put .csv, .tsv, .jsonl, .json or .parquet "
                             "files in it")
            return None
        return [(p, str(Path(shown) / p.relative_to(path)), spec.format or FORMATS[p.suffix.lower()])
                for p in found]
    if not path.exists():
        report.error(at, f"no such file: {path}; `cases_from` paths are relative to the suite file's folder")
        return None
    if not path.is_file():   # a FIFO, a device, a socket: never opened (reading one would block or never end)
        report.error(at, f"{path} is not a regular file; `cases_from` reads a regular file (or a folder of them): "
                         "save the data to a file and name that file")
        return None
    kind = spec.format or FORMATS.get(path.suffix.lower())
    if kind is None:
        report.error(at, f"cannot tell the format of '{written}' from its name; name it .csv, .tsv, .jsonl, "
                         ".json or .parquet, or add `format: csv` (or tsv, jsonl, json, parquet)")
        return None
    return [(path, shown, kind)]


@dataclass(eq=False)
class CaseSource:
    """A test's case rows, streamed: each iteration reads the data again and yields `FileRow`s.

    Problems in the data are reported on the first iteration only (the expander iterates twice).
    """

    spec: _Spec
    files: list[tuple[Path, str, str]]
    report: Report
    where: tuple[Any, ...]
    suite_dir: Path
    keep: Callable[..., Any] | None
    _passes: int = field(default=0, init=False, repr=False)

    def __iter__(self) -> Iterator[FileRow]:
        first = self._passes == 0
        self._passes += 1
        out: list[Diagnostic] = self.report.diagnostics if first else []
        rows = self._filtered(out)
        if self.spec.limit is not None:
            rows = islice(rows, self.spec.limit)
        if self.spec.sample is not None:
            rows = _reservoir(rows, *self.spec.sample)
        count = 0
        for row in rows:
            count += 1
            yield row
        if count == 0 and first and not any(d.severity == "error" for d in out):
            why = "no row passes its `filter:`" if self.keep is not None else "it holds no rows"
            self.report.warning(self.where, f"this test has no cases: {why}, so it makes no tests")

    def _filtered(self, out: list[Diagnostic]) -> Iterator[FileRow]:
        for raw, kind, sink in self._raw_rows(out):
            if self.keep is not None:
                try:
                    with budget():
                        passed = bool(self.keep(**raw.values))
                except Exception as exc:  # noqa: BLE001 - undefined names, sandbox refusals, type errors
                    # Said once: a filter that fails on one row usually fails on every row.
                    sink.error(raw.line, 1, f"the filter `{self.spec.filter}` fails on this row: {exc}; it is a "
                                            "Jinja expression over the file's columns (as the file names them)",
                               row=raw.number)
                    return
                if not passed:
                    continue
            row = self._row(raw, kind, sink)
            if row is not None:
                yield row

    def _raw_rows(self, out: list[Diagnostic]) -> Iterator[tuple[RawRow, str, Sink]]:
        """(row as read, its format, its file's sink) of every row of every file."""
        if self.spec.dataset is not None:
            from engine.suite.case_datasets import read_dataset

            sink = Sink(self.spec.dataset, out)
            for raw in read_dataset(self.spec.dataset, self.spec.options, self.suite_dir, sink):
                if raw.number == 1 and not self._columns_exist(sink, 0):
                    return
                yield raw, "dataset", sink
            return
        for path, shown, kind in self.files:
            sink = Sink(shown, out)
            for raw in read_file(path, kind, sink):
                if raw.number == 1 and sink.positions and not self._columns_exist(sink, raw.line and 1):
                    break
                yield raw, kind, sink

    def _columns_exist(self, sink: Sink, header_line: int) -> bool:
        """With a header (CSV, TSV, Parquet, datasets), every column `columns:` names exists: checked once."""
        if self.spec.columns is None:
            return True
        ok = True
        for variable, column in self.spec.columns.items():
            if column not in sink.positions:
                sink.error(header_line, 1, _missing_column(column, variable, sink.positions, self._yaml_at()))
                ok = False
        return ok

    def _yaml_at(self) -> str:
        line, col = self.report.positions.of(self.where + ("columns",))
        return f"{self.report.file}:{line}:{col}"

    def _row(self, raw: RawRow, kind: str, sink: Sink) -> FileRow | None:
        """The row as variables: columns picked and renamed, JSON cells decoded; None when it has a problem."""
        values = raw.values
        golden_column = "golden"
        if self.spec.columns is not None:
            picked: dict[str, Any] = {}
            for variable, column in self.spec.columns.items():
                if column not in values:
                    sink.error(raw.line, 1, _missing_column(column, variable, values, self._yaml_at()), row=raw.number)
                    return None
                picked[variable] = values[column]
                if variable == "golden":
                    golden_column = column
            values = picked
        names = self.spec.json_columns if self.spec.json_columns is not None else ()
        for variable in names:
            if variable in values and isinstance(values[variable], str):
                column = self.spec.columns[variable] if self.spec.columns else variable
                try:
                    values[variable] = json.loads(values[variable])
                except json.JSONDecodeError as exc:
                    sink.error(raw.line, sink.positions.get(column, 1), f"the '{column}' cell is not valid JSON "
                               f"({exc.msg}), but `json:` lists it; write JSON text (\"text\" in quotes, "
                               "{\"a\": 1}) or take it out of `json:`", row=raw.number)
                    return None
        if self.spec.json_columns is None and kind in ("csv", "tsv") and isinstance(values.get("golden"), str):
            values["golden"] = _json_if_structured(values["golden"])
        origin = CaseOrigin(sink.file, raw.line, raw.number, sink.positions.get(golden_column, 1))
        return FileRow(values, origin)


def _json_if_structured(text: str) -> Any:
    """A CSV golden cell that is a JSON object or array becomes that value; any other text stays text."""
    if text[:1] not in ("{", "[", " ", "\t", "\n", "\r"):
        return text   # the usual cell, decided by its first character
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            return text
    return text


def _missing_column(column: str, variable: str, columns: Mapping[str, Any], yaml_at: str) -> str:
    guess = did_you_mean(column, list(columns))
    hint = f"did you mean '{guess}'?" if guess else f"the columns are: {', '.join(map(str, columns)) or 'none'}"
    mapped = f"maps '{variable}' to it" if variable != column else "picks it"
    return f"no column '{column}', but `columns:` ({yaml_at}) {mapped}; {hint}"


def _reservoir(rows: Iterator[FileRow], n: int, seed: int) -> Iterator[FileRow]:
    """n rows chosen uniformly at random (Algorithm R, `random.Random(seed)`), yielded in file order.

    One pass, holding n rows: the same file and seed always give the same rows.
    """
    rng = random.Random(seed)
    kept: list[tuple[int, FileRow]] = []
    for i, row in enumerate(rows):
        if i < n:
            kept.append((i, row))
        else:
            j = rng.randrange(i + 1)
            if j < n:
                kept[j] = (i, row)
    kept.sort(key=lambda pair: pair[0])
    for _, row in kept:
        yield row
