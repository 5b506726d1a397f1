"""Per-model summary: score and pass rate with cluster-robust t-intervals, tokens, cost, latency, errors."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from engine.analysis.cells import DEFAULT_CLUSTER, Cells, build_cells, row_scores
from engine.analysis.load import FALLBACK_ATTR
from engine.analysis.stats import DEFAULT_LEVEL, cluster_t_interval

if TYPE_CHECKING:
    import pandas as pd

TOKENS_NOT_REPORTED = "token counts not reported by the server"


def per_model(
    df: pd.DataFrame,
    *,
    level: float = DEFAULT_LEVEL,
    cells: Cells | None = None,
    cluster_by: str = DEFAULT_CLUSTER,
) -> pd.DataFrame:
    """One row per model, best mean score first.

    The mean score is the mean over tests of the model's mean over attempts (each test weighs the
    same whatever its repeat count); `pass_rate` likewise averages each test's share of passed attempts
    (it is pass@1). Intervals are cluster-robust t-intervals (`stats.cluster_t_interval`) over clusters of
    (suite, test_id) by default: attempts at one test, and the cases of one templated test, are not
    independent. Error rows are not scored (they do not count as 0): read `error_rate` next to the score.

    Args:
        df: Results rows (from `load`).
        level: Interval coverage.
        cells: A grid already built from `df`; None builds it.
        cluster_by: "test" or "case" when `cells` is None (see `build_cells`).

    Returns:
        Columns: model, tests, clusters, rows, mean_score, score_lo, score_hi, pass_rate, pass_lo, pass_hi,
        error_rows, fallback_rows, error_rate, truncation_rate, prompt_tokens, completion_tokens (means; NaN
        when unreported), cost (total paid; NaN when unpriced; a row from the response cache costs 0),
        latency_p50, latency_p90, latency_p99, ttft_p50 (rows from the response cache left out: nothing was
        timed), notes. A model whose every row was served by a fallback (and dropped) still gets a row, with 0 tests
        and a note.
    """
    import pandas as pd

    cells = cells if cells is not None else build_cells(df, cluster_by=cluster_by)
    present = cells.has_data
    score = np.where(present, cells.score, np.nan)
    rate = np.where(present, cells.pass_rate, np.nan)
    n_models = len(cells.models)
    in_unit = bool(np.all((score[present] >= 0.0) & (score[present] <= 1.0))) if present.any() else True
    score_ci = cluster_t_interval(score, cells.cluster, level=level, bounds=(0.0, 1.0) if in_unit else None)
    pass_ci = cluster_t_interval(rate, cells.cluster, level=level, bounds=(0.0, 1.0))
    score_lo, score_hi = score_ci.lo, score_ci.hi
    pass_lo, pass_hi = pass_ci.lo, pass_ci.hi
    clusters = score_ci.clusters if n_models else np.zeros(0, "int64")
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: NaN is the answer
        mean_score = np.nanmean(score, axis=0) if score.size else np.full(n_models, np.nan)
        pass_rate = np.nanmean(rate, axis=0) if rate.size else np.full(n_models, np.nan)

    code = cells.model_code
    rows = np.bincount(code, minlength=n_models).astype("float64")
    scored, _, _ = row_scores(df)
    errors = rows - np.bincount(code, weights=scored.astype("float64"), minlength=n_models)
    truncated = np.bincount(code, weights=np.asarray(df["truncated"].fillna(False), dtype="float64"),
                            minlength=n_models)
    cached = _cached(df)
    frame = pd.DataFrame({
        "code": code,
        "latency_s": np.where(cached, np.nan, np.asarray(df["latency_s"], dtype="float64")),
        "ttft": np.where(cached, np.nan, np.asarray(df["ttft_visible_s"], dtype="float64")),
        "prompt_tokens": np.asarray(df["prompt_tokens"], dtype="float64"),
        "completion_tokens": np.asarray(df["completion_tokens"], dtype="float64"),
        "cost": np.asarray(df["cost"], dtype="float64"),
    })
    grouped = frame.groupby("code", sort=True)
    latency = grouped["latency_s"].quantile([0.5, 0.9, 0.99]).unstack() if len(frame) else None
    ttft = grouped["ttft"].median()
    tokens = grouped[["prompt_tokens", "completion_tokens", "cost"]].mean()
    known = grouped[["prompt_tokens", "completion_tokens", "cost"]].count()
    cost_sum = grouped["cost"].sum(min_count=1)
    top_error = _top_error_kind(df, code, scored)
    cached_rows = np.bincount(code, weights=cached.astype("float64"), minlength=n_models)

    def col(series: pd.Series | None, key: object = None) -> np.ndarray:
        if series is None:
            return np.full(n_models, np.nan)
        s = series if key is None else series.get(key, None)
        return np.full(n_models, np.nan) if s is None else s.reindex(range(n_models)).to_numpy(dtype="float64")

    fallback = fallback_rows(df)
    notes = []
    for m in range(n_models):
        parts = []
        n_rows = int(rows[m])
        if fallback["rows"].get(cells.models[m]):
            parts.append(_fallback_note(fallback["rows"][cells.models[m]], fallback["included"]))
        if not present[:, m].any():
            kind = top_error.get(m)
            parts.append(f"no scored rows: all {n_rows} rows errored" + (f" (mostly {kind})" if kind else ""))
        elif errors[m]:
            parts.append(f"{int(errors[m])} of {n_rows} rows errored" + (
                f" (mostly {top_error[m]})" if m in top_error else "") + "; not counted in the score")
        if cached_rows[m]:
            parts.append(f"{int(cached_rows[m])} of {n_rows} rows answered from the response cache "
                         f"(left out of latency; cost 0)")
        prompt_known = int(known["prompt_tokens"].get(m, 0)) + int(known["completion_tokens"].get(m, 0))
        if prompt_known == 0:
            parts.append(TOKENS_NOT_REPORTED)
        elif int(known["completion_tokens"].get(m, 0)) < n_rows:
            parts.append(f"{TOKENS_NOT_REPORTED} for {n_rows - int(known['completion_tokens'].get(m, 0))} rows")
        notes.append("; ".join(parts))

    out = pd.DataFrame({
        "model": cells.models,
        "tests": present.sum(axis=0),
        "clusters": clusters,
        "rows": rows.astype("int64"),
        "mean_score": mean_score, "score_lo": score_lo, "score_hi": score_hi,
        "pass_rate": pass_rate, "pass_lo": pass_lo, "pass_hi": pass_hi,
        "error_rows": errors.astype("int64"),
        "fallback_rows": np.array([int(fallback["rows"].get(m, 0)) for m in cells.models], dtype="int64"),
        "error_rate": np.divide(errors, rows, out=np.full(n_models, np.nan), where=rows > 0),
        "truncation_rate": np.divide(truncated, rows, out=np.full(n_models, np.nan), where=rows > 0),
        "prompt_tokens": col(tokens, "prompt_tokens"),
        "completion_tokens": col(tokens, "completion_tokens"),
        "cost": col(cost_sum),
        "latency_p50": col(latency, 0.5), "latency_p90": col(latency, 0.9), "latency_p99": col(latency, 0.99),
        "ttft_p50": col(ttft),
        "notes": notes,
    })
    vanished = sorted(set(fallback["rows"]) - set(cells.models)) if not fallback["included"] else []
    if vanished:
        gone = pd.DataFrame({"model": vanished, "tests": 0, "clusters": 0, "rows": 0, "error_rows": 0,
                             "fallback_rows": [int(fallback["rows"][m]) for m in vanished],
                             "notes": [_fallback_note(fallback["rows"][m], False, every=True) for m in vanished]})
        out = pd.concat([out, gone.reindex(columns=out.columns)], ignore_index=True) if len(out) else \
            gone.reindex(columns=out.columns)
    return out.sort_values(["mean_score", "model"], ascending=[False, True], na_position="last",
                           kind="stable").reset_index(drop=True)


def _cached(df: pd.DataFrame) -> np.ndarray:
    """Which rows the response cache answered (a run written before the `cached` column: none)."""
    if "cached" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return df["cached"].astype("boolean").fillna(False).to_numpy(dtype=bool)


def _top_error_kind(df: pd.DataFrame, code: np.ndarray, scored: np.ndarray) -> dict[int, str]:
    """The most common error_kind among each model's unscored rows."""
    import pandas as pd

    unscored = ~scored
    if not unscored.any():
        return {}
    kinds = pd.Series(np.asarray(df["error_kind"].astype(object))[unscored]).fillna("no score")
    counts = pd.DataFrame({"code": code[unscored], "kind": kinds.to_numpy()}).value_counts()
    top: dict[int, str] = {}
    for m, kind in counts.index:
        top.setdefault(int(m), str(kind))
    return top


def fallback_rows(df: pd.DataFrame) -> dict:
    """What `load` recorded about fallback rows: {"included": bool, "rows": {model: count}}."""
    info = df.attrs.get(FALLBACK_ATTR) if hasattr(df, "attrs") else None
    if not isinstance(info, dict):
        return {"included": False, "rows": {}}
    return {"included": bool(info.get("included")), "rows": dict(info.get("rows") or {})}


def _fallback_note(count: int, included: bool, *, every: bool = False) -> str:
    """The per-model note for rows a fallback model served."""
    if included:
        return f"{count} rows served by a fallback model are included (--include-fallback): they measure that model"
    if every:
        return (f"every row ({count}) was served by a fallback model and left out; "
                f"--include-fallback keeps them (they measure the fallback model)")
    return f"{count} rows served by a fallback model left out (they measure another model)"
