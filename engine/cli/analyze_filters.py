"""The `engine analyze` options that end in a suite filter: `--subset N` and `--saturated-since DATE`.

Both append a section to the usual output (or an object to `--format json`) and, with `--filter-file FILE`,
write a file `engine run --filter-file FILE` reads: the chosen tests, or the newest run's tests without the
saturated ones. Kept apart from `analysis_cmds.py` so the command itself only calls `check` and `append`.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from engine.analysis.cells import Cells

USAGE = 2


def _usage(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(USAGE)


def check(fmt: str, subset: str | None, since: str | None, filter_file: Path | None) -> None:
    """Usage errors before anything is loaded (exit 2 with a one-line message)."""
    if subset is None and since is None:
        if filter_file is not None:
            raise _usage("--filter-file: give --subset N or --saturated-since DATE to say which tests to write")
        return
    if subset is not None and since is not None and filter_file is not None:
        raise _usage("--filter-file with both --subset and --saturated-since: write one filter at a time")
    if fmt == "csv":
        raise _usage(f"{'--subset' if subset is not None else '--saturated-since'}: use --format table, markdown "
                     f"or json (csv holds one table)")
    if since is not None:
        from engine.analysis.saturation import parse_since

        try:
            parse_since(since)
        except ValueError as exc:
            raise _usage(str(exc)) from None


def _command() -> str:
    return "engine " + shlex.join(sys.argv[1:])


def _write(path: Path, text: str, tests: int) -> None:
    """Write the filter file whole (a temporary file renamed over it: never half a list)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
    typer.echo(f"filter written to {path} ({tests} tests): engine run SUITES --filter-file {path}", err=True)


def _append(text: str, fmt: str, key: str, payload: object, notes: list[str], sections: list) -> str:
    from engine.analysis.render import dumps_json, tables_as_markdown, tables_as_text

    if fmt == "json":
        data = json.loads(text)
        data[key] = payload
        return dumps_json(data)
    if fmt == "markdown":
        return text + "\n" + tables_as_markdown(notes, sections)
    return text + tables_as_text(notes, sections)


def append(text: str, fmt: str, *, cells: Callable[[], Cells], files: list[Path], sources: list[str],
           subset: str | None, since: str | None, filter_file: Path | None, include_fallback: bool, alpha: float,
           correction: str) -> str:
    """Append the subset and/or saturation sections to `analyze` output; write `filter_file` when given.

    Args:
        text: The rendered output so far.
        fmt: table | markdown | json.
        cells: Builds the test × model grid (the one the rest of `analyze` used).
        files: The Parquet files analysed (saturation reloads them with the time and cost columns).
        sources: The RESULTS arguments, for the filter file's header.
        subset: `--subset` ("40" or "20%"), or None.
        since: `--saturated-since`, or None.
        filter_file: Where to write the filter, or None.
        include_fallback, alpha, correction: As for the rest of `analyze`.
    """
    if subset is not None:
        from engine.analysis import subset as chooser

        grid = cells()
        tests = int((grid.n_scored.sum(axis=1) > 0).sum())
        try:
            size = chooser.parse_size(subset, tests)
        except ValueError as exc:
            raise _usage(str(exc)) from None
        result = chooser.choose_subset(grid, size)
        payload = {**result.to_dict(), "filter_file": None if filter_file is None else str(filter_file)}
        notes = [f"note: {line}" for line in chooser.summary_lines(result)]
        if filter_file is None:
            notes.append("note: --filter-file FILE writes these tests as a filter for `engine run --filter-file`")
        text = _append(text, fmt, "subset", payload, notes, chooser.subset_sections(result))
        if filter_file is not None:
            _write(filter_file, chooser.filter_text(result, _command(), sources), result.size)
    if since is not None:
        from engine.analysis import saturation
        from engine.analysis.load import ANALYSIS_COLUMNS, load
        from engine.errors import EngineError

        try:
            df = load(files, include_fallback=include_fallback,
                      columns=[*ANALYSIS_COLUMNS, *saturation.EXTRA_COLUMNS])
            found = saturation.saturated_since(df, files, saturation.parse_since(since), alpha=alpha,
                                               correction=correction)
        except (EngineError, ValueError) as exc:
            raise _usage(str(exc)) from None
        payload = {**found.to_dict(), "filter_file": None if filter_file is None else str(filter_file)}
        notes = [f"note: {line}" for line in found.notes]
        text = _append(text, fmt, "saturated_since", payload, notes, saturation.saturation_sections(found))
        if filter_file is not None:
            _write(filter_file, saturation.filter_text(found, _command()), len(found.keep))
    return text
