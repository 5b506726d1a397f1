"""Analysis past memory: the per-cell and per-model sums computed in DuckDB, the statistics unchanged.

`engine analyze` over a quarter's sweeps can pass 100M rows, which pandas cannot hold (the analysis
columns alone are ~40 bytes per row as Arrow and several times that as a DataFrame with Python strings).
Every statistic of `summary.analyze` reads only aggregates: the test × model grid (`cells.Cells`, sums per
cell), row figures per model (`models.ModelRows`: counts, means, latency quantiles) and the agent table.
Here DuckDB, streaming over the Parquet files, computes those aggregates; `summary.analyze_grid` then runs
the same functions as the in-memory path. A test (tests/analysis/test_large.py) holds the two paths equal.

DuckDB is an optional extra (`pip install '.[duckdb]'`), imported only here.

The switch (`choose_engine`): `auto` uses DuckDB when the files hold more rows than
`pandas_row_limit()` (a quarter of this machine's memory at `BYTES_PER_ROW_IN_PANDAS`) and DuckDB is
installed; below that the in-memory path is faster (no SQL planning, no second pass for the item table).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.analysis.cells import ITEM_KEY, Cells, assemble_cells
from engine.analysis.load import find_parquet_files
from engine.analysis.models import ModelRows
from engine.errors import ResultsError

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

ENGINES = ("auto", "pandas", "duckdb")
# Measured on results written by `engine run` (bench/bench_analyze_large.py): a loaded analysis frame
# (ANALYSIS_COLUMNS, object strings for ids and model names) peaks at ~597 bytes per row over a 5M-row load.
BYTES_PER_ROW_IN_PANDAS = 600
# `auto` leaves pandas a quarter of physical memory: the load holds Arrow and pandas copies at once.
PANDAS_MEMORY_SHARE = 0.25
INSTALL_HINT = "install DuckDB with `pip install '.[duckdb]'` (or `pip install duckdb`)"

# Columns read, and the value standing in for a column no file has (older runs, single-turn runs).
_COLUMNS: dict[str, str] = {
    "suite": "NULL::VARCHAR", "test_id": "NULL::VARCHAR", "case_index": "NULL::BIGINT",
    "model": "NULL::VARCHAR", "fallback": "NULL::BOOLEAN", "score": "NULL::DOUBLE", "passed": "NULL::BOOLEAN",
    "threshold": "NULL::DOUBLE", "truncated": "NULL::BOOLEAN", "temperature": "NULL::DOUBLE",
    "test_hash": "NULL::VARCHAR", "tags": "NULL::VARCHAR[]", "latency_s": "NULL::DOUBLE",
    "ttft_visible_s": "NULL::DOUBLE", "prompt_tokens": "NULL::DOUBLE", "completion_tokens": "NULL::DOUBLE",
    "cost": "NULL::DOUBLE", "error_kind": "NULL::VARCHAR", "variant": "NULL::VARCHAR",
    "cached": "NULL::BOOLEAN", "run_id": "NULL::VARCHAR", "batch_id": "NULL::VARCHAR",
}
_AGENT_COLUMNS = ("turns", "prose_turns", "tool_calls_made", "invented_tools", "bad_tool_args", "outcome")


def count_rows(files: Sequence[Path]) -> int:
    """Rows in Parquet files, from their footers (nothing else is read)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def pandas_row_limit() -> int:
    """How many rows `auto` still analyses in memory on this machine."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 8 << 30
    return int(memory * PANDAS_MEMORY_SHARE / BYTES_PER_ROW_IN_PANDAS)


def duckdb_available() -> bool:
    """Whether the optional DuckDB extra is installed."""
    try:
        import duckdb  # noqa: F401
    except ImportError:
        return False
    return True


def choose_engine(files: Sequence[Path], engine: str = "auto", *, row_limit: int | None = None) -> tuple[str, str]:
    """Pick the in-memory or the DuckDB path.

    Args:
        files: The Parquet files to analyse.
        engine: "auto", "pandas" or "duckdb".
        row_limit: Rows above which `auto` picks DuckDB; None: `pandas_row_limit()`.

    Returns:
        (engine, why): the path taken and a sentence saying why (shown by `engine analyze`).

    Raises:
        ResultsError: `duckdb` asked for but not installed, or an unknown engine name.
    """
    if engine not in ENGINES:
        raise ResultsError(f"--engine {engine}: choose one of {', '.join(ENGINES)}")
    if engine == "duckdb" and not duckdb_available():
        raise ResultsError(f"--engine duckdb: DuckDB is not installed; {INSTALL_HINT}")
    if engine != "auto":
        return engine, f"{engine} (asked for)"
    limit = pandas_row_limit() if row_limit is None else row_limit
    rows = count_rows(files)
    if rows <= limit:
        return "pandas", f"pandas ({rows:,} rows fit in memory)"
    if not duckdb_available():
        return "pandas", (f"pandas: {rows:,} rows is more than this machine should hold in memory "
                          f"({limit:,}); {INSTALL_HINT} to analyse them out of core")
    return "duckdb", f"duckdb ({rows:,} rows > {limit:,}, the in-memory limit on this machine)"


def _connect(memory_limit: str | None) -> duckdb.DuckDBPyConnection:
    try:
        import duckdb
    except ImportError as exc:
        raise ResultsError(f"the DuckDB path needs DuckDB; {INSTALL_HINT}") from exc
    con = duckdb.connect(":memory:")
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET preserve_insertion_order = false")  # aggregates only: order is ours to sort
    return con


def _present_columns(files: Sequence[Path]) -> set[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names: set[str] = set()
    for f in files:
        try:
            names.update(pq.read_schema(f).names)
        except (OSError, pa.ArrowException) as exc:
            raise ResultsError(f"{f}: cannot read as Parquet ({exc}); delete or move the file") from exc
    return names


def grid_from_parquet(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    include_fallback: bool = False,
    cluster_by: str = "test",
    memory_limit: str | None = None,
) -> tuple[Cells, ModelRows, pd.DataFrame | None]:
    """The grid, the per-model row figures and the agent table, summed in DuckDB.

    Args:
        paths: Run folders, a parent folder of runs, Parquet files, globs, or a list of them.
        include_fallback: Keep rows a fallback model served.
        cluster_by: "test" or "case".
        memory_limit: DuckDB's memory limit (e.g. "4GB"); None: DuckDB's default (80% of RAM). DuckDB spills
            to disk past it.

    Returns:
        (cells, rows, agents) for `summary.analyze_grid`. `cells.item_code` / `model_code` are empty.
    """
    from engine.analysis.agents import per_model_agents

    files = find_parquet_files(paths)
    present = _present_columns(files)
    con = _connect(memory_limit)
    select = ", ".join(name if name in present else f"{default} AS {name}" for name, default in _COLUMNS.items())
    agents = [c for c in _AGENT_COLUMNS if c in present]
    if agents:
        select += ", " + ", ".join(agents)
    # A view cannot take prepared parameters: the file list goes in as SQL string literals, quotes doubled.
    listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    con.execute(f"CREATE TEMP VIEW raw AS SELECT {select}, filename, file_row_number "
                f"FROM read_parquet([{listed}], union_by_name = true, filename = true, file_row_number = true)")
    fallback_counts = dict(con.execute(
        "SELECT CAST(model AS VARCHAR), count(*) FROM raw WHERE coalesce(fallback, false) GROUP BY ALL").fetchall())
    failed = [] if include_fallback or not fallback_counts else [
        {"run_id": str(run), "suite": str(suite), "test_id": str(test), "case_index": int(case), "rows": int(n)}
        for run, suite, test, case, n in con.execute(
            "SELECT coalesce(CAST(run_id AS VARCHAR), ''), coalesce(CAST(suite AS VARCHAR), 'None'), "
            "coalesce(CAST(test_id AS VARCHAR), 'None'), coalesce(case_index, -1), count(*) FROM raw "
            "WHERE coalesce(fallback, false) AND passed = false GROUP BY ALL").fetchall()]
    keep = "" if include_fallback else "WHERE NOT coalesce(fallback, false)"
    # The same per-row rules as cells.row_scores / item_codes: a NaN or null score is not scored; a scored
    # row without `passed` is judged against its threshold (1.0 when it has none).
    con.execute(f"""
        CREATE TEMP VIEW r AS
        SELECT coalesce(CAST(suite AS VARCHAR), 'None') AS suite, coalesce(CAST(test_id AS VARCHAR), 'None') AS test_id,
               CAST(coalesce(case_index, -1) AS BIGINT) AS case_index, CAST(model AS VARCHAR) AS model,
               scored, CASE WHEN scored THEN score ELSE 0 END AS s,
               CASE WHEN NOT scored THEN 0 WHEN passed IS NOT NULL THEN CAST(passed AS INTEGER)
                    ELSE CAST(score >= CASE WHEN threshold IS NULL OR isnan(threshold) THEN 1.0 ELSE threshold END
                              AS INTEGER) END AS p,
               threshold, truncated, temperature, test_hash, tags, prompt_tokens, coalesce(cached, false) AS cached,
               -- as models.model_rows: a row the response cache answered was not timed
               CASE WHEN coalesce(cached, false) THEN NULL ELSE latency_s END AS latency_s,
               CASE WHEN coalesce(cached, false) THEN NULL ELSE ttft_visible_s END AS ttft_visible_s,
               completion_tokens, cost, error_kind, variant, batch_id IS NOT NULL AS batched,
               {{'f': filename, 'r': file_row_number}} AS position
               {''.join(', ' + c for c in agents)}
        FROM (SELECT *, score IS NOT NULL AND NOT isnan(score) AS scored FROM raw {keep})
    """)
    item_frame = con.execute("""
        SELECT suite, test_id, case_index,
               arg_min_null(threshold, position) AS threshold, arg_min_null(tags, position) AS tags,
               arg_min_null(test_hash, position) AS test_hash, count(DISTINCT test_hash) AS hashes
        FROM r GROUP BY suite, test_id, case_index
    """).df()
    if con.execute("SELECT count(variant) FROM r").fetchone()[0]:   # type: ignore[index]
        # As cells.item_codes: with prompt variants a test is the set of its variants' hashes, and "edited"
        # means two hashes for one (test, variant).
        varied = con.execute("""
            SELECT suite, test_id, case_index,
                   array_to_string(list_sort(list_distinct(flatten(list(hashes)))), '+') AS test_hash,
                   max(n) AS hashes
            FROM (SELECT suite, test_id, case_index, list(DISTINCT coalesce(test_hash, '')) AS hashes,
                         count(DISTINCT coalesce(test_hash, '')) AS n
                  FROM r GROUP BY suite, test_id, case_index, coalesce(variant, ''))
            GROUP BY suite, test_id, case_index
        """).df()
        item_frame = item_frame.drop(columns=["test_hash", "hashes"]).merge(varied, on=list(ITEM_KEY))
    cell_frame = con.execute("""
        SELECT suite, test_id, case_index, model, count(*) AS n_rows, sum(CAST(scored AS INTEGER)) AS n_scored,
               sum(CAST(NOT scored AND error_kind IS NULL AS INTEGER)) AS n_unscored,
               sum(s) AS score_sum, sum(p) AS n_passed,
               min(CASE WHEN scored THEN s END) AS score_min, max(CASE WHEN scored THEN s END) AS score_max,
               sum(CAST(coalesce(truncated, false) AS INTEGER)) AS n_truncated,
               sum(CAST(scored AND coalesce(temperature = 0, false) AS INTEGER)) AS n_greedy
        FROM r GROUP BY suite, test_id, case_index, model
    """).df()
    model_frame = con.execute("""
        SELECT model, count(*) AS n_rows, sum(CAST(NOT scored AND error_kind IS NOT NULL AS INTEGER)) AS errors,
               sum(CAST(NOT scored AND error_kind IS NULL AS INTEGER)) AS unscored,
               sum(CAST(coalesce(truncated, false) AS INTEGER)) AS truncated,
               avg(prompt_tokens) AS prompt_tokens, avg(completion_tokens) AS completion_tokens,
               count(prompt_tokens) AS prompt_known, count(completion_tokens) AS completion_known,
               sum(cost) AS cost, quantile_cont(latency_s, [0.5, 0.9, 0.99]) AS latency,
               quantile_cont(ttft_visible_s, 0.5) AS ttft_p50, sum(CAST(cached AS INTEGER)) AS cached,
               sum(CAST(batched AS INTEGER)) AS batched
        FROM r GROUP BY model
    """).df()
    top_errors = con.execute("""
        SELECT model, kind FROM (
            SELECT model, kind, row_number() OVER (PARTITION BY model ORDER BY n DESC, kind) AS rank FROM (
                SELECT model, coalesce(CAST(error_kind AS VARCHAR), 'no score') AS kind, count(*) AS n
                FROM r WHERE NOT scored AND error_kind IS NOT NULL GROUP BY ALL)) WHERE rank = 1
    """).fetchall()   # as models._top_error_kind: the most rows, a tie going to the first name
    agent_rows = (con.execute(f"SELECT model, {', '.join(agents)} FROM r WHERE turns IS NOT NULL").df()
                  if "turns" in agents else None)
    con.close()

    items = _items(item_frame)
    models = sorted(str(m) for m in model_frame["model"])
    cells = _scatter(items, models, cell_frame, cluster_by)
    rows = _model_rows(models, model_frame, dict(top_errors),
                       {"included": include_fallback, "rows": {str(k): int(v) for k, v in fallback_counts.items()},
                        "failed": failed})
    return cells, rows, per_model_agents(agent_rows) if agent_rows is not None else None


def _items(frame: pd.DataFrame) -> pd.DataFrame:
    """The test table in `cells.item_codes`' order and types."""
    items = frame.sort_values(list(ITEM_KEY), kind="stable").reset_index(drop=True)
    items["case_index"] = items["case_index"].astype("int64")
    items["threshold"] = items["threshold"].astype("float64")
    items["tags"] = [tuple(t) if isinstance(t, (list, tuple, np.ndarray)) else () for t in items["tags"]]
    items["hashes"] = items["hashes"].astype("int64")
    return items[["suite", "test_id", "case_index", "threshold", "tags", "test_hash", "hashes"]]


def _scatter(items: pd.DataFrame, models: list[str], frame: pd.DataFrame, cluster_by: str) -> Cells:
    """Sparse per-cell sums → the dense n_items × n_models arrays `assemble_cells` takes."""
    import pandas as pd

    index = pd.MultiIndex.from_frame(items[list(ITEM_KEY)])
    row = index.get_indexer(pd.MultiIndex.from_frame(frame[list(ITEM_KEY)].astype({"case_index": "int64"})))
    col = pd.Index(models).get_indexer(frame["model"].astype(str))
    shape = (len(items), len(models))

    def dense(name: str, fill: float = 0.0) -> np.ndarray:
        out = np.full(shape, fill)
        out[row, col] = frame[name].to_numpy(dtype="float64", na_value=np.nan)
        return out

    return assemble_cells(
        items, models, n_rows=dense("n_rows"), n_scored=dense("n_scored"), n_unscored=dense("n_unscored"),
        score_sum=dense("score_sum"),
        n_passed=dense("n_passed"), score_min=dense("score_min", np.nan), score_max=dense("score_max", np.nan),
        n_truncated=dense("n_truncated"), n_greedy=dense("n_greedy"), cluster_by=cluster_by)


def _model_rows(models: list[str], frame: pd.DataFrame, top: dict[Any, Any], fallback: dict) -> ModelRows:
    by = frame.set_index(frame["model"].astype(str)).reindex(models)

    def col(name: str) -> np.ndarray:
        return by[name].to_numpy(dtype="float64", na_value=np.nan)

    latency = np.full((len(models), 3), np.nan)
    for i, values in enumerate(by["latency"]):
        if values is not None and not isinstance(values, float):
            latency[i] = [np.nan if v is None else float(v) for v in values]
    return ModelRows(
        rows=col("n_rows"), errors=col("errors"), truncated=col("truncated"),
        prompt_tokens=col("prompt_tokens"), completion_tokens=col("completion_tokens"),
        prompt_known=col("prompt_known"), completion_known=col("completion_known"), cost=col("cost"),
        latency=latency, ttft_p50=col("ttft_p50"), cached=col("cached"), unscored=col("unscored"),
        batched=col("batched"),
        top_error={models.index(str(m)): str(k) for m, k in top.items() if str(m) in models},
        fallback=fallback,
    )
