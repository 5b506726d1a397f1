"""Load results Parquet into one pandas DataFrame.

Accepts run folders (`part-*.parquet` + `manifest.json`), a parent folder of runs (`results/`), single
Parquet files, glob patterns of any of these (`results/2026-12-*`), or any mix. Files written by different
engine versions are read together: the schemas are
unified, so a column only later runs have is kept (null for older rows), never dropped, and any column of
`engine.results.schema.SCHEMA` missing from every file is added as nulls so analysis code can rely on it.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ResultsError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

# The columns the statistics need; text columns (prompt, answer, evaluators) are only for drill-down.
# The last six are the agent counts (engine/analysis/agents.py); a single-turn run has none of them,
# and a column absent from every file is simply not read.
ANALYSIS_COLUMNS: tuple[str, ...] = (
    "run_id", "model", "fallback", "suite", "test_id", "test_hash", "case_index", "attempt", "tags",
    "prompt_tokens", "completion_tokens", "latency_s", "ttft_visible_s", "truncated", "cost",
    "score", "passed", "threshold", "error_kind", "temperature",
    "turns", "prose_turns", "tool_calls_made", "invented_tools", "bad_tool_args", "outcome",
    "variant",
    "cached",   # answered from the response cache: left out of latency figures (null in older runs: not cached)
    "batch_id",   # answered through a provider's batch (the batch price; absent in older runs: live)
)


# df.attrs key where `load` records the fallback rows per model (dropped, or kept with include_fallback).
FALLBACK_ATTR = "fallback_rows"


def _run_named_by(path: Path) -> Path | None:
    """The sibling run folder a small `latest` text file names, or None."""
    try:
        if path.stat().st_size > 4096:
            return None
        name = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    target = path.parent / name
    return target if name and "/" not in name and target.is_dir() else None


def find_parquet_files(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Resolve run folders, parent folders and files to a sorted list of distinct Parquet files.

    A folder is searched recursively without following symlinks, so `results/latest` (a symlink to a
    run that the parent walk already finds) does not count its run twice; naming `results/latest`
    directly still works.

    Args:
        paths: One path or several.

    Returns:
        Parquet files, each once (by resolved path), in a stable order.

    Raises:
        ResultsError: A path does not exist, or no Parquet file was found under the paths.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    from engine.results.remote import localize

    found: dict[Path, Path] = {}
    names: list[Path] = []
    for given in paths:
        # A glob (`results/2026-*`, `sweeps/*/run-*`) names every match; one that matches nothing is an error.
        text = os.fspath(given)
        if not Path(text).exists() and any(c in text for c in "*?[") and "://" not in text:
            matches = sorted(glob.glob(text))
            if not matches:
                raise ResultsError(f"{text}: the pattern matches no file or folder")
            names.extend(Path(m) for m in matches)
        else:
            names.append(localize(text))   # a URL run folder (s3://...) is read from a local copy
    for path in names:
        if not path.exists():
            raise ResultsError(f"{path}: no such file or folder; pass a run folder (results/<run>), "
                               f"a results folder or a .parquet file")
        if path.is_file() and path.suffix != ".parquet":
            # `results/latest` is a text file naming the run where symlinks are not available.
            named = _run_named_by(path)
            if named is None:
                raise ResultsError(f"{path}: not a Parquet file; pass a run folder or a .parquet file")
            path = named
        if path.is_file():
            if path.suffix != ".parquet":
                raise ResultsError(f"{path}: not a Parquet file; pass a run folder or a .parquet file")
            found.setdefault(path.resolve(), path)
            continue
        for root, dirs, files in os.walk(path):  # followlinks=False: `latest` is not walked twice
            dirs.sort()
            folder = Path(root)
            real = folder.resolve()   # once per folder: a file's own path resolves only when it is a link
            for name in sorted(files):
                # `_labels.parquet` (human review, engine/analysis/labels.py) and hidden temporaries are not rows.
                if name.endswith(".parquet") and not name.startswith((".", "_")):
                    file = folder / name
                    found.setdefault(file.resolve() if file.is_symlink() else real / name, file)
    if not found:
        shown = ", ".join(str(p) for p in names) or "(nothing)"
        raise ResultsError(f"{shown}: no Parquet results found; run `engine run SUITES --out results` first, "
                           f"or pass the run folder that holds part-*.parquet")
    return sorted(found.values(), key=str)


def has_values(files: Sequence[Path], column: str) -> bool:
    """Whether any row of the files holds a non-null `column`, from the Parquet footers where they say so.

    A file without the column holds none; a row group whose statistics count as many nulls as values holds
    none; otherwise (or without statistics) the one column is read. Lets a command skip a second, wide load
    (the judges section reads every row's evaluator list) when a run has nothing for it.

    Args:
        files: Parquet files (`find_parquet_files`).
        column: A top-level column name.
    """
    import pyarrow.parquet as pq

    for file in files:
        meta = pq.ParquetFile(file).metadata
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        if column not in names:
            continue
        index = names.index(column)
        for group in range(meta.num_row_groups):
            stats = meta.row_group(group).column(index).statistics
            if stats is not None and stats.has_null_count:
                if stats.null_count < meta.row_group(group).num_rows:
                    return True
                continue
            # No statistics (a writer may leave them out): read the one column once.
            if pq.read_table(file, columns=[column])[column].null_count < meta.num_rows:
                return True
            break
    return False


def load(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] = "results/latest",
    *,
    include_fallback: bool = False,
    columns: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Read one or many runs into one tidy DataFrame (one row per run × model × test × case × attempt).

    Args:
        paths: Run folders, a parent folder of runs, Parquet files, or a list of them.
        include_fallback: Keep rows whose `fallback` is true (a different model served the call; they
            measure that model, not the one asked, so they are dropped by default).
        columns: Read only these columns (plus those the fallback filter needs); None reads all.
            `ANALYSIS_COLUMNS` is enough for `per_model`, `per_test`, `compare` and `diff`.

    Returns:
        A DataFrame holding every column of the results schema (absent ones as nulls) and any extra
        columns later engine versions wrote. `df.attrs["fallback_rows"]` records
        {"included": bool, "rows": {model: fallback rows}, "failed": [...]} so the analysis can say what was
        left out; "failed" lists, when they were left out, the tests whose fallback rows failed
        ({run_id, suite, test_id, case_index (-1: none), rows}): the rest of such a test cannot class it.

    Raises:
        ResultsError: Paths missing, no Parquet found, or files whose column types cannot be unified.
    """
    import pyarrow.compute as pc

    table = read_table(paths, columns=columns)
    is_fallback = pc.fill_null(table["fallback"], False)
    counts = {str(r["values"]): int(r["counts"])
              for r in pc.value_counts(table.filter(is_fallback)["model"]).to_pylist() if r["values"] is not None}
    failed: list[dict[str, Any]] = []
    if counts and not include_fallback and {"passed", "run_id", "suite", "test_id", "case_index"} <= set(
            table.column_names):
        failed = _failed_fallbacks(table.filter(pc.and_(is_fallback, pc.equal(table["passed"], False))))
    if not include_fallback:
        table = table.filter(pc.invert(is_fallback))
    df = table.to_pandas()
    df.attrs[FALLBACK_ATTR] = {"included": include_fallback, "rows": counts, "failed": failed}
    return df


def _failed_fallbacks(rows: pa.Table) -> list[dict[str, Any]]:
    """The failing fallback rows counted per run and test: [{run_id, suite, test_id, case_index, rows}]."""
    import pyarrow.compute as pc

    if not rows.num_rows:
        return []
    keys = rows.select(["run_id", "suite", "test_id"]).append_column(
        "case_index", pc.fill_null(rows["case_index"].cast("int64"), -1))
    grouped = keys.group_by(["run_id", "suite", "test_id", "case_index"]).aggregate([([], "count_all")])
    return [{"run_id": str(r["run_id"]), "suite": str(r["suite"]), "test_id": str(r["test_id"]),
             "case_index": int(r["case_index"]), "rows": int(r["count_all"])} for r in grouped.to_pylist()]


def open_dataset(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> ds.Dataset:
    """The runs' Parquet files as one dataset, their schemas unified; `read_table` scans it.

    Kept by a reader that scans the same files again and again (`engine view`): each file's footer, read at its
    first filtered scan, is kept with it, so later scans skip the files whose statistics rule a filter out
    without opening them.

    Raises:
        ResultsError: Paths missing, no Parquet found, or column types that cannot be unified.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    files = find_parquet_files(paths)
    schemas = []
    for file in files:
        try:
            schemas.append(pq.read_schema(file))
        except (OSError, pa.ArrowException) as exc:
            raise ResultsError(f"{file}: cannot read as Parquet ({exc}); delete or move the file") from exc
    try:
        unified = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowException, TypeError) as exc:
        raise ResultsError(f"{files[0].parent}: the results files disagree on a column type ({exc}); "
                           f"load the runs separately") from exc
    try:
        return ds.dataset([str(f) for f in files], schema=unified, format="parquet")
    except (OSError, pa.ArrowException) as exc:
        raise ResultsError(f"{files[0].parent}: cannot read the results ({exc})") from exc


def read_table(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | ds.Dataset,
    *,
    columns: Sequence[str] | None = None,
    where: pc.Expression | None = None,
) -> pa.Table:
    """Read runs as one Arrow table (fallback rows included), schemas unified, absent schema columns as nulls.

    Args:
        paths: Run folders, a parent folder of runs, Parquet files, or a list of them; or their `open_dataset`.
        columns: Read only these columns (plus `fallback`); None reads all.
        where: A row filter pushed into the scan (files and row groups its statistics rule out are not read).

    Raises:
        ResultsError: Paths missing, no Parquet found, or column types that cannot be unified.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds

    from engine.results.schema import SCHEMA

    dataset = paths if isinstance(paths, ds.Dataset) else open_dataset(paths)
    unified = dataset.schema
    wanted = list(columns) if columns is not None else list(unified.names)
    if columns is not None and "fallback" not in wanted:
        wanted.append("fallback")
    present = [c for c in wanted if c in unified.names]
    try:
        if where is not None and isinstance(dataset, ds.FileSystemDataset):
            dataset = _pruned(dataset, where)
        table = dataset.to_table(columns=present, filter=where)
    except (OSError, pa.ArrowException) as exc:
        files = dataset.files if isinstance(dataset, ds.FileSystemDataset) else []
        raise ResultsError(f"{Path(files[0]).parent if files else 'the runs'}: cannot read the results ({exc})") \
            from exc
    for field in SCHEMA:
        if (columns is None or field.name in wanted) and field.name not in table.column_names:
            table = table.append_column(field.name, pa.nulls(table.num_rows, field.type))
    return table


def _pruned(dataset: ds.FileSystemDataset, where: pc.Expression) -> ds.FileSystemDataset:
    """The dataset without the row groups whose statistics rule `where` out (files with none left are not opened)."""
    import pyarrow.dataset as ds

    kept = []
    for fragment in dataset.get_fragments():
        if isinstance(fragment, ds.ParquetFileFragment):
            fragment = fragment.subset(filter=where, schema=dataset.schema)
            if not fragment.num_row_groups:
                continue
        kept.append(fragment)
    return ds.FileSystemDataset(kept, dataset.schema, dataset.format, dataset.filesystem)
