"""The aggregates `engine view` pages from: computed once per run by engine.analysis, kept beside the run.

A run's snapshot is what every page reads: the summary (models with their intervals, the paired comparisons,
notes, agents), one row per test (`per_test`'s columns: class, reason, p-values) and the tests × models grid
(`cells.Cells`). It is computed the way `engine analyze` computes it (DuckDB past memory), then written to
`<run>/_view/` (`summary.json`, `tests.arrow`, `cells.arrow`; Arrow IPC, zstd), so every `engine view` of the
run reads a few megabytes instead of analysing its rows. A large run's end writes it (`prepare`, called by
`engine run` and `engine rescore`: its first viewer is then as quick as the next); else its first viewer does.

The files are keyed on the run's Parquet files (each one's path, size, modification time and inode), the engine
version and this module's format: a part added, rewritten or removed makes the run be analysed again, and the
files rewritten. A folder that cannot be written (read-only, full disk) keeps the snapshot in memory only. The
files are read with a size cap, and anything unexpected in them (another format, a missing column, counts that
disagree, a stamp that differs between the three files) makes them be ignored and the run analysed again: they
are never trusted over the Parquet files.
"""

from __future__ import annotations

import functools
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.analysis.summary import json_safe

if TYPE_CHECKING:
    import pyarrow as pa

    from engine.analysis.cells import Cells
    from engine.analysis.summary import Analysis

CACHE_DIR = "_view"
SUMMARY_FILE = "summary.json"
TESTS_FILE = "tests.arrow"
CELLS_FILE = "cells.arrow"
# Bump when what the files hold (or how) changes: older files are then ignored and rewritten.
FORMAT = 3
MAX_SUMMARY_BYTES = 64 << 20
MAX_TABLE_BYTES = 4 << 30
# The grid's per-cell arrays, in the order `cells.arrow` holds them (one row per test × model, row-major).
CELL_COUNTS = ("n_rows", "n_scored", "n_unscored", "n_passed", "n_truncated")
CELL_VALUES = ("score", "score_min", "score_max")

Signature = list[list[Any]]


@dataclass
class Snapshot:
    """One run's aggregates, as the pages read them.

    Args:
        summary: JSON-ready: interval, notes, models, comparisons, agents (as `Analysis.to_dict` has them), and
            the grid's suites and tags (the filters' choices).
        overview: JSON-ready figures of the runs page: tests, rows, errors, cost, and each model's rates.
        ranking: Every model of the models table, best first.
        models: The grid's columns (`Cells.models`).
        cluster_by: The grid's clusters ("test" or "case").
        tests: One row per test, in the grid's order: `per_test`'s columns and the grid's items (`item_` names).
        cells: Per-cell arrays (n_tests × n_models) by name: CELL_COUNTS, CELL_VALUES and "greedy".
    """

    summary: dict[str, Any]
    overview: dict[str, Any]
    ranking: list[str]
    models: list[str]
    cluster_by: str
    tests: pa.Table
    cells: dict[str, np.ndarray]
    _derived: dict[str, Any] = field(default_factory=dict)

    def derived(self, name: str, build: Any) -> Any:
        """A value computed from the snapshot once, on first use (filter columns, a key index)."""
        if name not in self._derived:
            self._derived[name] = build()
        return self._derived[name]

    def column(self, name: str) -> np.ndarray:
        """A per-test column as numpy (strings as objects), converted once."""
        return self.derived(f"column:{name}", lambda: self.tests[name].to_numpy(zero_copy_only=False))

    def grid_cells(self) -> Cells:
        """The tests × models grid (`cells.Cells`), as `compare.diff` pairs it."""
        return self.derived("cells", self._build_cells)

    def _build_cells(self) -> Cells:
        import pandas as pd

        from engine.analysis.cells import Cells

        t = self.tests
        items = pd.DataFrame({
            "suite": t["suite"].to_pylist(), "test_id": t["test_id"].to_pylist(),
            "case_index": t["case_index"].to_numpy().astype("int64"),
            "threshold": t["threshold"].to_numpy(zero_copy_only=False).astype("float64"),
            "tags": [tuple(x) if x is not None else () for x in t["tags"].to_pylist()],
            "test_hash": t["item_test_hash"].to_pylist(), "hashes": t["item_hashes"].to_numpy().astype("int64"),
        })
        c = self.cells
        with np.errstate(invalid="ignore", divide="ignore"):
            pass_rate = c["n_passed"] / c["n_scored"]
        return Cells(
            items=items, models=list(self.models), n_rows=c["n_rows"], n_scored=c["n_scored"],
            n_unscored=c["n_unscored"], score=c["score"],
            pass_rate=pass_rate, score_min=c["score_min"], score_max=c["score_max"], n_truncated=c["n_truncated"],
            item_code=np.zeros(0, "int64"), model_code=np.zeros(0, "int64"), n_passed=c["n_passed"],
            greedy=c["greedy"], cluster=t["item_cluster"].to_numpy().astype("int64"), cluster_by=self.cluster_by)


def signature(run_dir: Path, files: list[Path]) -> Signature:
    """What the snapshot of a run depends on: each Parquet file's path (relative to the run), size, mtime and
    inode (a part replaced by a rename within one tick of the file system's clock has another inode)."""
    out: Signature = []
    for file in files:
        stat = file.stat()
        try:
            name = file.relative_to(run_dir).as_posix()
        except ValueError:
            name = str(file)
        out.append([name, int(stat.st_size), int(stat.st_mtime_ns), int(stat.st_ino)])
    return out


def _key(sig: Signature) -> dict[str, Any]:
    from engine import __version__

    return {"format": FORMAT, "engine_version": __version__, "files": sig}


def compute(files: list[Path]) -> Snapshot:
    """Analyse the run as `engine analyze` does (DuckDB past memory) and keep what the pages read."""
    from engine.analysis.large import choose_engine

    path, _ = choose_engine(files, "auto")
    if path == "duckdb":
        from engine.analysis.large import grid_from_parquet
        from engine.analysis.summary import analyze_grid

        cells, rows, agents = grid_from_parquet(files)
        analysis = analyze_grid(cells, rows, agents=agents)
    else:
        from engine.analysis.cells import build_cells
        from engine.analysis.load import ANALYSIS_COLUMNS, load
        from engine.analysis.summary import analyze

        df = load(files, columns=ANALYSIS_COLUMNS)
        cells = build_cells(df)
        analysis = analyze(df, cells=cells)
        del df
    return snapshot_of(analysis, cells)


def current(run_dir: Path, files: list[Path], sig: Signature) -> Snapshot:
    """The snapshot of these files: the one beside the run when it is theirs, else computed and written there
    (kept in memory only when the folder cannot hold it)."""
    snapshot = read(run_dir, sig)
    if snapshot is None:
        snapshot = compute(files)
        write(run_dir, sig, snapshot)
    return snapshot


def prepare(run_dir: Path) -> None:
    """Leave beside the run the snapshot of its Parquet files as they are now (its viewers then read it)."""
    from engine.analysis.load import find_parquet_files

    files = find_parquet_files(run_dir)
    current(run_dir, files, signature(run_dir, files))


def _records(frame: Any) -> list[dict[str, Any]]:
    return json_safe(frame.to_dict(orient="records")) if frame is not None else []


def snapshot_of(analysis: Analysis, cells: Cells) -> Snapshot:
    """The snapshot of an analysis and the grid it was computed from."""
    import pyarrow as pa

    models = analysis.models
    tags = {str(t) for row in cells.items["tags"] for t in (row if row is not None else ())}
    summary = {"interval": analysis.interval_method, "notes": list(analysis.notes), "models": _records(models),
               "comparisons": [json_safe(c.to_dict()) for c in analysis.comparisons],
               "agents": _records(analysis.agents), "suites": sorted({str(s) for s in cells.items["suite"]}),
               "tags": sorted(tags)}
    overview = json_safe({
        "tests": len(cells.items), "rows": int(models["rows"].sum()) if len(models) else 0,
        "errors": int(models["error_rows"].sum()) if len(models) else 0,
        "cost": float(models["cost"].sum(min_count=1)) if len(models) else None,
        "models": [{"model": r["model"], "pass_rate": r["pass_rate"], "mean_score": r["mean_score"]}
                   for r in models.to_dict(orient="records")],
    })
    tests = analysis.tests.copy()
    tests["tags"] = [list(t) if t is not None else [] for t in tests["tags"]]
    tests["item_test_hash"] = cells.items["test_hash"].astype(object).to_numpy()
    tests["item_hashes"] = cells.items["hashes"].to_numpy(dtype="int64")
    tests["item_cluster"] = cells.cluster.astype("int64")
    table = pa.Table.from_pandas(tests, preserve_index=False).replace_schema_metadata(None)
    types = _tests_types()
    table = table.cast(pa.schema([pa.field(f.name, types.get(f.name, f.type)) for f in table.schema]))
    arrays = {name: np.asarray(getattr(cells, name), dtype="float64") for name in (*CELL_COUNTS, *CELL_VALUES)}
    arrays["greedy"] = np.asarray(cells.greedy, dtype=bool)
    return Snapshot(summary=summary, overview=overview, ranking=[str(m) for m in models["model"]],
                    models=list(cells.models), cluster_by=cells.cluster_by, tests=table, cells=arrays)


def write(run_dir: Path, sig: Signature, snap: Snapshot) -> bool:
    """Write the snapshot beside the run; False when the folder cannot be written (it then lives in memory only).

    The summary, which names the files' key and a stamp the two tables carry too, is written last.
    """
    import pyarrow as pa

    from engine.errors import StorageError
    from engine.results.writer import write_atomic

    folder = run_dir / CACHE_DIR
    stamp = secrets.token_hex(8)
    cells = pa.table({
        **{name: pa.array(snap.cells[name].reshape(-1).astype("int64")) for name in CELL_COUNTS},
        **{name: pa.array(snap.cells[name].reshape(-1)) for name in CELL_VALUES},
        "greedy": pa.array(snap.cells["greedy"].reshape(-1)),
    })
    summary = {"key": _key(sig), "stamp": stamp, "tests": snap.tests.num_rows, "models": snap.models,
               "ranking": snap.ranking, "cluster_by": snap.cluster_by, "summary": snap.summary,
               "overview": snap.overview}
    try:
        folder.mkdir(exist_ok=True)
        for name, table in ((TESTS_FILE, snap.tests), (CELLS_FILE, cells)):
            write_atomic(folder / name, functools.partial(_write_ipc, table=table, stamp=stamp), hidden_tmp=True)
        text = json.dumps(summary, ensure_ascii=False, allow_nan=False).encode()
        write_atomic(folder / SUMMARY_FILE, text, hidden_tmp=True)
    except (OSError, StorageError):
        return False
    return True


def _write_ipc(fh: Any, *, table: pa.Table, stamp: str) -> None:
    """One Arrow IPC file (zstd), its schema carrying the stamp its summary names."""
    import pyarrow as pa

    table = table.replace_schema_metadata({b"stamp": stamp.encode()})
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(fh, table.schema, options=options) as writer:
        writer.write_table(table)


def _read_summary(run_dir: Path, sig: Signature) -> dict[str, Any] | None:
    """`summary.json` when it is the one of these files and holds what it should, else None."""
    path = run_dir / CACHE_DIR / SUMMARY_FILE
    try:
        if not path.is_file() or path.stat().st_size > MAX_SUMMARY_BYTES:
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != _key(sig):
        return None
    models, ranking, summary = data.get("models"), data.get("ranking"), data.get("summary")
    if not (isinstance(data.get("stamp"), str) and isinstance(data.get("tests"), int) and isinstance(models, list)
            and isinstance(ranking, list) and all(isinstance(m, str) for m in [*models, *ranking])
            and isinstance(summary, dict) and isinstance(data.get("overview"), dict)
            and data.get("cluster_by") in ("test", "case") and isinstance(summary.get("interval"), str)
            and all(isinstance(summary.get(k), list) for k in ("notes", "models", "comparisons", "agents", "suites",
                                                               "tags"))):
        return None
    return data


def read_overview(run_dir: Path, sig: Signature) -> dict[str, Any] | None:
    """The runs page's figures of the run from its snapshot, without reading the tables (None: none for these
    files)."""
    data = _read_summary(run_dir, sig)
    return data["overview"] if data is not None else None


def read(run_dir: Path, sig: Signature) -> Snapshot | None:
    """The snapshot written beside the run for these files, or None (absent, stale, unreadable or inconsistent)."""
    import pyarrow as pa

    data = _read_summary(run_dir, sig)
    if data is None:
        return None
    n_tests, models, stamp = data["tests"], data["models"], data["stamp"]
    try:
        tests = _read_ipc(run_dir / CACHE_DIR / TESTS_FILE, stamp)
        cells = _read_ipc(run_dir / CACHE_DIR / CELLS_FILE, stamp)
    except (OSError, ValueError, pa.ArrowException):
        return None
    if tests is None or cells is None or tests.num_rows != n_tests or cells.num_rows != n_tests * len(models):
        return None
    if not (_typed(tests, _tests_types()) and _typed(cells, _cells_types())
            and all(cells[name].null_count == 0 for name in cells.column_names)):
        return None
    shape = (n_tests, len(models))
    arrays = {name: cells[name].to_numpy().astype("float64").reshape(shape) for name in (*CELL_COUNTS, *CELL_VALUES)}
    arrays["greedy"] = cells["greedy"].to_numpy(zero_copy_only=False).astype(bool).reshape(shape)
    return Snapshot(summary=data["summary"], overview=data["overview"], ranking=list(data["ranking"]),
                    models=list(models), cluster_by=str(data["cluster_by"]), tests=tests.replace_schema_metadata(None),
                    cells=arrays)


def _tests_types() -> dict[str, pa.DataType]:
    """The per-test table's columns the pages read, and their types."""
    import pyarrow as pa

    text, whole, real = pa.string(), pa.int64(), pa.float64()
    return {"suite": text, "test_id": text, "case_index": whole, "tags": pa.list_(text), "threshold": real,
            "status": text, "mixed_models": text, "difficulty": real, "reason": text, "item_test_hash": text,
            "item_hashes": whole, "item_cluster": whole}


def _cells_types() -> dict[str, pa.DataType]:
    import pyarrow as pa

    return {**{name: pa.int64() for name in CELL_COUNTS}, **{name: pa.float64() for name in CELL_VALUES},
            "greedy": pa.bool_()}


def _typed(table: pa.Table, types: dict[str, pa.DataType]) -> bool:
    """Every named column is there with its type."""
    names = set(table.column_names)
    return all(name in names and table.schema.field(name).type == kind for name, kind in types.items())


def _read_ipc(path: Path, stamp: str) -> pa.Table | None:
    import pyarrow as pa

    if not path.is_file() or path.stat().st_size > MAX_TABLE_BYTES:
        return None
    with pa.OSFile(str(path), "rb") as source:   # read into memory: nothing refers to the file once closed
        reader = pa.ipc.open_file(source)
        if (reader.schema.metadata or {}).get(b"stamp") != stamp.encode():
            return None
        return reader.read_all()
