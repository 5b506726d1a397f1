"""Per-model summary: score and pass rate with clustered bootstrap CIs, tokens, cost, latency, errors."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from engine.analysis.cells import Cells, build_cells, row_scores
from engine.analysis.stats import DEFAULT_LEVEL, DEFAULT_RESAMPLES, cluster_bootstrap_means, percentile_ci

if TYPE_CHECKING:
    import pandas as pd

TOKENS_NOT_REPORTED = "token counts not reported by the server"


def per_model(
    df: pd.DataFrame,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    cells: Cells | None = None,
) -> pd.DataFrame:
    """One row per model, best mean score first.

    The mean score is the mean over tests of the model's mean over attempts (each test weighs the
    same whatever its repeat count). CIs come from a bootstrap that resamples tests, since attempts
    at one test are not independent. Error rows are not scored (they do not count as 0): read
    `error_rate` next to the score.

    Args:
        df: Results rows (from `load`).
        resamples: Bootstrap resamples.
        level: CI coverage.
        seed: Bootstrap seed (same data and seed give the same CIs).
        cells: A grid already built from `df`; None builds it.

    Returns:
        Columns: model, tests, rows, mean_score, score_lo, score_hi, pass_rate, pass_lo, pass_hi,
        error_rate, truncation_rate, prompt_tokens, completion_tokens (means; NaN when unreported),
        cost (total; NaN when unpriced), latency_p50, latency_p90, latency_p99, ttft_p50, notes.
    """
    import pandas as pd

    cells = cells if cells is not None else build_cells(df)
    present = cells.has_data
    score = np.where(present, cells.score, np.nan)
    rate = np.where(present, cells.pass_rate, np.nan)
    n_models = len(cells.models)
    boot_score = cluster_bootstrap_means(score, resamples=resamples, seed=seed)
    boot_pass = cluster_bootstrap_means(rate, resamples=resamples, seed=seed)
    score_lo, score_hi = percentile_ci(boot_score, level)
    pass_lo, pass_hi = percentile_ci(boot_pass, level)
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
    frame = pd.DataFrame({
        "code": code,
        "latency_s": np.asarray(df["latency_s"], dtype="float64"),
        "ttft": np.asarray(df["ttft_visible_s"], dtype="float64"),
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

    def col(series: pd.Series | None, key: object = None) -> np.ndarray:
        if series is None:
            return np.full(n_models, np.nan)
        s = series if key is None else series.get(key, None)
        return np.full(n_models, np.nan) if s is None else s.reindex(range(n_models)).to_numpy(dtype="float64")

    notes = []
    for m in range(n_models):
        parts = []
        n_rows = int(rows[m])
        if not present[:, m].any():
            kind = top_error.get(m)
            parts.append(f"no scored rows: all {n_rows} rows errored" + (f" (mostly {kind})" if kind else ""))
        elif errors[m]:
            parts.append(f"{int(errors[m])} of {n_rows} rows errored" + (
                f" (mostly {top_error[m]})" if m in top_error else "") + "; not counted in the score")
        prompt_known = int(known["prompt_tokens"].get(m, 0)) + int(known["completion_tokens"].get(m, 0))
        if prompt_known == 0:
            parts.append(TOKENS_NOT_REPORTED)
        elif int(known["completion_tokens"].get(m, 0)) < n_rows:
            parts.append(f"{TOKENS_NOT_REPORTED} for {n_rows - int(known['completion_tokens'].get(m, 0))} rows")
        notes.append("; ".join(parts))

    out = pd.DataFrame({
        "model": cells.models,
        "tests": present.sum(axis=0),
        "rows": rows.astype("int64"),
        "mean_score": mean_score, "score_lo": score_lo, "score_hi": score_hi,
        "pass_rate": pass_rate, "pass_lo": pass_lo, "pass_hi": pass_hi,
        "error_rate": np.divide(errors, rows, out=np.full(n_models, np.nan), where=rows > 0),
        "truncation_rate": np.divide(truncated, rows, out=np.full(n_models, np.nan), where=rows > 0),
        "prompt_tokens": col(tokens, "prompt_tokens"),
        "completion_tokens": col(tokens, "completion_tokens"),
        "cost": col(cost_sum),
        "latency_p50": col(latency, 0.5), "latency_p90": col(latency, 0.9), "latency_p99": col(latency, 0.99),
        "ttft_p50": col(ttft),
        "notes": notes,
    })
    return out.sort_values(["mean_score", "model"], ascending=[False, True], na_position="last",
                           kind="stable").reset_index(drop=True)


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
