"""The test × model grid every statistic starts from.

A *test* is identified across models and runs by (suite, test_id, case_index); a *cell* is one test
for one model, aggregating its attempts. Rows whose score is null or NaN are not scored, never a zero: error
rows (an `error_kind`), and rows recorded unscored on purpose (`eval: {none: true}`: no score, no error).

A model *passes* a test when more than half of its scored attempts passed (a strict majority: 1 of 1,
2 of 2, 2 of 3, 3 of 4, 3 of 5). One pass in two is not a pass. This one rule feeds saturation, floor,
McNemar, `diff` and JUnit.

A *cluster* is the unit intervals are computed over: by default (suite, test_id), so the cases of one templated test
(which share the template's difficulty) count as one cluster; `cluster_by="case"` treats every case as
independent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

ITEM_KEY = ("suite", "test_id", "case_index")
CLUSTER_KEYS = {"test": ("suite", "test_id"), "case": ITEM_KEY}
DEFAULT_CLUSTER = "test"
# The strict-majority rule above: a cell passes when its pass rate exceeds this share.
CELL_PASS_SHARE = 0.5


@dataclass
class Cells:
    """Per-(test, model) aggregates as (n_tests × n_models) arrays.

    Args:
        items: One row per test: suite, test_id, case_index (-1 when none), threshold, tags, test_hash
            (the first seen) and hashes (how many distinct hashes the rows carry).
        models: Model names, the columns of every array.
        n_rows: Rows per cell (attempts, error rows included).
        n_scored: Rows with a score.
        n_unscored: Rows recorded unscored on purpose (no score, no error); the other rows without a score are
            errors (`n_errors`).
        score: Mean score over scored attempts; NaN when the cell has none.
        pass_rate: Share of scored attempts that passed; NaN when none.
        score_min: Lowest scored attempt; NaN when none.
        score_max: Highest scored attempt; NaN when none.
        n_truncated: Rows cut at max_tokens.
        item_code: For each input row, its test's row in `items`.
        model_code: For each input row, its model's column.
        n_passed: Passed scored attempts.
        greedy: Cells whose every scored attempt ran at temperature 0 (deterministic decoding asked).
        cluster: For each test (row of `items`), its cluster number.
        cluster_by: "test" (clusters are (suite, test_id)) or "case" (every test its own cluster).
    """

    items: pd.DataFrame
    models: list[str]
    n_rows: np.ndarray
    n_scored: np.ndarray
    n_unscored: np.ndarray
    score: np.ndarray
    pass_rate: np.ndarray
    score_min: np.ndarray
    score_max: np.ndarray
    n_truncated: np.ndarray
    item_code: np.ndarray
    model_code: np.ndarray
    n_passed: np.ndarray
    greedy: np.ndarray
    cluster: np.ndarray
    cluster_by: str = DEFAULT_CLUSTER

    @property
    def n_clusters(self) -> int:
        """Distinct clusters among the tests."""
        return int(self.cluster.max()) + 1 if self.cluster.size else 0

    @property
    def has_data(self) -> np.ndarray:
        """Cells with at least one scored attempt."""
        return self.n_scored > 0

    @property
    def n_errors(self) -> np.ndarray:
        """Error rows per cell: neither scored nor recorded unscored."""
        return self.n_rows - self.n_scored - self.n_unscored

    @property
    def passes(self) -> np.ndarray:
        """Cell verdicts as floats: 1 pass, 0 fail, NaN no scored attempt (the strict-majority rule)."""
        out = np.where(2 * self.n_passed > self.n_scored, 1.0, 0.0)
        out[~self.has_data] = np.nan
        return out


def row_scores(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row (scored mask, score, passed as 0/1) with error rows masked out.

    A row with a score but no `passed` value is judged against its threshold.

    Args:
        df: Results rows.
    """
    score = np.asarray(df["score"], dtype="float64")
    scored = ~np.isnan(score)
    passed_col = df["passed"]
    known = np.asarray(passed_col.notna())
    passed = np.zeros(len(df), dtype="float64")
    passed[known] = np.asarray(passed_col[known], dtype=bool)
    if not known.all():
        threshold = np.asarray(df["threshold"], dtype="float64")
        fill = ~known & scored
        passed[fill] = (score[fill] >= np.nan_to_num(threshold[fill], nan=1.0)).astype("float64")
    return scored, np.where(scored, score, 0.0), np.where(scored, passed, 0.0)


def unscored_by_design(df: pd.DataFrame, scored: np.ndarray) -> np.ndarray:
    """Rows recorded unscored on purpose (`eval: {none: true}`): no score, and no error either (rows without an
    `error_kind` column cannot say: none)."""
    if "error_kind" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return ~scored & np.asarray(df["error_kind"].isna())


def item_codes(df: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Number each row's test (suite, test_id, case_index) and return the test table.

    Args:
        df: Results rows.

    Returns:
        (code per row, one row per test sorted by suite, test_id, case_index).
    """
    import pandas as pd

    case = df["case_index"].astype("float64").fillna(-1).astype("int64")
    keys = pd.DataFrame({"suite": df["suite"].astype(str), "test_id": df["test_id"].astype(str), "case_index": case})
    codes = keys.groupby(list(ITEM_KEY), sort=True).ngroup().to_numpy()
    _, first = np.unique(codes, return_index=True)
    items = keys.iloc[first].reset_index(drop=True)
    items["threshold"] = np.asarray(df["threshold"], dtype="float64")[first]
    items["tags"] = [tuple(t) if t is not None and not isinstance(t, float) else () for t in df["tags"].iloc[first]]
    hashes = df["test_hash"]
    variant = df["variant"] if "variant" in df.columns else None
    if variant is not None and bool(variant.notna().any()):
        # Prompt variants (engine.analysis.variants): each variant of a test has its own hash, so a test's
        # identity is the set of them and "edited" means two hashes for one (test, variant).
        frame = pd.DataFrame({"code": codes, "variant": variant.astype(object).fillna("").astype(str).to_numpy(),
                              "hash": hashes.astype(object).fillna("").astype(str).to_numpy()})
        items["test_hash"] = frame.groupby("code")["hash"].agg(lambda h: "+".join(sorted(set(h)))).to_numpy()
        items["hashes"] = frame.groupby(["code", "variant"])["hash"].nunique().groupby(level=0).max().to_numpy()
        return codes, items
    items["test_hash"] = hashes.iloc[first].to_numpy()
    items["hashes"] = pd.Series(hashes.to_numpy()).groupby(codes).nunique().to_numpy()
    return codes, items


def build_cells(df: pd.DataFrame, *, cluster_by: str = DEFAULT_CLUSTER) -> Cells:
    """Aggregate results rows into the test × model grid.

    Args:
        df: Results rows (as from `load`), at least the columns of `load.ANALYSIS_COLUMNS`.
        cluster_by: "test" (default: one cluster per (suite, test_id)) or "case" (one per test case).

    Returns:
        The grid. An empty frame gives zero tests and zero models.
    """
    import pandas as pd

    if cluster_by not in CLUSTER_KEYS:
        raise ValueError(f"cluster_by={cluster_by!r}: use one of {', '.join(CLUSTER_KEYS)}")
    item_code, items = item_codes(df)
    model_code, model_names = pd.factorize(df["model"].astype(str), sort=True)
    n_items, n_models = len(items), len(model_names)
    size = n_items * n_models
    cell = item_code.astype("int64") * n_models + model_code
    scored, score, passed = row_scores(df)
    truncated = np.asarray(df["truncated"].fillna(False), dtype=bool) if len(df) else np.zeros(0, bool)
    if "temperature" in df.columns:
        greedy_row = np.asarray(pd.to_numeric(df["temperature"], errors="coerce"), dtype="float64") == 0.0
    else:
        greedy_row = np.zeros(len(df), bool)

    def grid(weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(cell, weights=weights, minlength=size).astype("float64").reshape(n_items, n_models)

    lo = np.full(size, np.nan)
    hi = np.full(size, np.nan)
    if scored.any():
        extremes = pd.Series(score[scored]).groupby(cell[scored]).agg(["min", "max"])
        lo[extremes.index.to_numpy()] = extremes["min"].to_numpy()
        hi[extremes.index.to_numpy()] = extremes["max"].to_numpy()
    return assemble_cells(
        items, [str(m) for m in model_names], n_rows=grid(), n_scored=grid(scored.astype("float64")),
        n_unscored=grid(unscored_by_design(df, scored).astype("float64")),
        score_sum=grid(score), n_passed=grid(passed), score_min=lo.reshape(n_items, n_models),
        score_max=hi.reshape(n_items, n_models), n_truncated=grid(truncated.astype("float64")),
        n_greedy=grid((scored & greedy_row).astype("float64")), item_code=item_code, model_code=model_code,
        cluster_by=cluster_by,
    )


def assemble_cells(
    items: pd.DataFrame,
    models: list[str],
    *,
    n_rows: np.ndarray,
    n_scored: np.ndarray,
    n_unscored: np.ndarray,
    score_sum: np.ndarray,
    n_passed: np.ndarray,
    score_min: np.ndarray,
    score_max: np.ndarray,
    n_truncated: np.ndarray,
    n_greedy: np.ndarray,
    item_code: np.ndarray | None = None,
    model_code: np.ndarray | None = None,
    cluster_by: str = DEFAULT_CLUSTER,
) -> Cells:
    """The grid from per-cell sums (n_items × n_models arrays): the one place means, rates and clusters are made.

    `build_cells` sums rows in memory; `engine.analysis.large` sums them in DuckDB and passes no per-row
    codes (`item_code` and `model_code` are then empty: nothing that needs single rows may use that grid).

    Args:
        items: One row per test, sorted by (suite, test_id, case_index) (see `item_codes`).
        models: Model names, sorted.
        n_rows, n_scored, n_unscored, score_sum, n_passed, score_min, score_max, n_truncated, n_greedy: Per-cell
            sums,
            minimum and maximum (NaN where a cell has no scored attempt).
        item_code: For each input row, its test's row (None: no rows kept).
        model_code: For each input row, its model's column.
        cluster_by: "test" or "case".
    """
    if cluster_by not in CLUSTER_KEYS:
        raise ValueError(f"cluster_by={cluster_by!r}: use one of {', '.join(CLUSTER_KEYS)}")
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = score_sum / n_scored
        pass_rate = n_passed / n_scored
    keys = list(CLUSTER_KEYS[cluster_by])
    cluster = items.groupby(keys, sort=True).ngroup().to_numpy() if len(items) else np.zeros(0, "int64")
    return Cells(
        items=items, models=models, n_rows=n_rows, n_scored=n_scored, n_unscored=n_unscored, score=mean,
        pass_rate=pass_rate,
        score_min=score_min, score_max=score_max, n_truncated=n_truncated,
        item_code=item_code if item_code is not None else np.zeros(0, "int64"),
        model_code=model_code if model_code is not None else np.zeros(0, "int64"),
        n_passed=n_passed, greedy=(n_scored > 0) & (n_greedy == n_scored), cluster=cluster.astype("int64"),
        cluster_by=cluster_by,
    )
