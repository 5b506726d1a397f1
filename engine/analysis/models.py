"""Per-model summary: score and pass rate with cluster-robust t-intervals, tokens, cost, latency, errors."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.analysis.cells import DEFAULT_CLUSTER, Cells, build_cells, row_scores, unscored_by_design
from engine.analysis.load import FALLBACK_ATTR
from engine.analysis.stats import DEFAULT_LEVEL, cluster_t_interval

if TYPE_CHECKING:
    import pandas as pd

TOKENS_NOT_REPORTED = "token counts not reported by the server"
#: How rows recorded with `eval: {none: true}` are described wherever they are counted.
UNSCORED_NOTE = "recorded unscored (eval: {none: true}); not in the pass rate"


@dataclass
class ModelRows:
    """Row-level figures per model, in the order of `Cells.models` (pandas or DuckDB computes them).

    Args:
        rows: Rows per model (attempts, error rows included).
        errors: Rows without a score that errored (the call or the evaluator).
        truncated: Rows cut at max_tokens.
        prompt_tokens: Mean prompt tokens over rows that report them (NaN when none do).
        completion_tokens: Mean completion tokens likewise.
        prompt_known: Rows reporting prompt tokens.
        completion_known: Rows reporting completion tokens.
        cost: Total cost (NaN when no row is priced).
        latency: (n_models × 3) latency quantiles 0.5, 0.9, 0.99 (linear interpolation; NaN when none).
        ttft_p50: Median time to first visible token.
        top_error: Model index → the most common error_kind among its unscored rows.
        fallback: What `load` recorded: {"included": bool, "rows": {model: count}}.
        cached: Rows the response cache answered (left out of latency and time to first token: nothing was
            timed; their cost is 0).
        unscored: Rows recorded unscored on purpose (`eval: {none: true}`: no score and no error).
        batched: Rows a provider's batch answered (`batch_id`: their cost is the batch price), or None.
    """

    rows: np.ndarray
    errors: np.ndarray
    truncated: np.ndarray
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    prompt_known: np.ndarray
    completion_known: np.ndarray
    cost: np.ndarray
    latency: np.ndarray
    ttft_p50: np.ndarray
    top_error: dict[int, str]
    fallback: dict
    cached: np.ndarray | None = None
    unscored: np.ndarray | None = None
    batched: np.ndarray | None = None


def model_rows(df: pd.DataFrame, cells: Cells) -> ModelRows:
    """Row-level figures per model from results rows (the in-memory path).

    Args:
        df: Results rows the grid was built from.
        cells: `build_cells(df)`.
    """
    import pandas as pd

    n_models = len(cells.models)
    code = cells.model_code
    rows = np.bincount(code, minlength=n_models).astype("float64")
    scored, _, _ = row_scores(df)
    unscored = unscored_by_design(df, scored)
    errors = rows - np.bincount(code, weights=(scored | unscored).astype("float64"), minlength=n_models)
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
    tokens = grouped[["prompt_tokens", "completion_tokens"]].mean()
    known = grouped[["prompt_tokens", "completion_tokens"]].count()

    def col(series: pd.Series | None) -> np.ndarray:
        if series is None:
            return np.full(n_models, np.nan)
        return series.reindex(range(n_models)).to_numpy(dtype="float64")

    quantiles = np.full((n_models, 3), np.nan)
    if latency is not None:
        for j, q in enumerate((0.5, 0.9, 0.99)):
            if q in latency:
                quantiles[:, j] = col(latency[q])
    return ModelRows(
        rows=rows, errors=errors, truncated=truncated,
        prompt_tokens=col(tokens["prompt_tokens"]), completion_tokens=col(tokens["completion_tokens"]),
        prompt_known=np.nan_to_num(col(known["prompt_tokens"])),
        completion_known=np.nan_to_num(col(known["completion_tokens"])),
        cost=col(grouped["cost"].sum(min_count=1)), latency=quantiles, ttft_p50=col(grouped["ttft"].median()),
        top_error=_top_error_kind(df, code, scored | unscored), fallback=fallback_rows(df),
        cached=np.bincount(code, weights=cached.astype("float64"), minlength=n_models),
        unscored=np.bincount(code, weights=unscored.astype("float64"), minlength=n_models),
        batched=np.bincount(code, weights=_batched(df).astype("float64"), minlength=n_models),
    )


def per_model(
    df: pd.DataFrame | None = None,
    *,
    level: float = DEFAULT_LEVEL,
    cells: Cells | None = None,
    cluster_by: str = DEFAULT_CLUSTER,
    rows: ModelRows | None = None,
) -> pd.DataFrame:
    """One row per model, best mean score first.

    The mean score is the mean over tests of the model's mean over attempts (each test weighs the
    same whatever its repeat count); `pass_rate` likewise averages each test's share of passed attempts
    (it is pass@1). Intervals are cluster-robust t-intervals (`stats.cluster_t_interval`) over clusters of
    (suite, test_id) by default: attempts at one test, and the cases of one templated test, are not
    independent. Error rows are not scored (they do not count as 0): read `error_rate` next to the score.

    Args:
        df: Results rows (from `load`); may be None when both `cells` and `rows` are given (the DuckDB path).
        level: Interval coverage.
        cells: A grid already built from `df`; None builds it.
        cluster_by: "test" or "case" when `cells` is None (see `build_cells`).
        rows: Row-level figures already computed (`model_rows`, or `engine.analysis.large`); None computes them.

    Returns:
        Columns: model, tests, clusters, rows, mean_score, score_lo, score_hi, pass_rate, pass_lo, pass_hi,
        error_rows, fallback_rows, error_rate, truncation_rate, prompt_tokens, completion_tokens (means; NaN
        when unreported), cost (total paid; NaN when unpriced; a row from the response cache costs 0),
        latency_p50, latency_p90, latency_p99, ttft_p50 (rows from the response cache left out: nothing was
        timed), notes. A model whose every row was served by a fallback (and dropped) still gets a row, with 0 tests
        and a note.
    """
    import pandas as pd

    if cells is None or rows is None:
        if df is None:
            raise ValueError("per_model: give results rows, or both cells and rows")
        cells = cells if cells is not None else build_cells(df, cluster_by=cluster_by)
        rows = rows if rows is not None else model_rows(df, cells)
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

    errors, fallback, top_error = rows.errors, rows.fallback, rows.top_error
    unscored = rows.unscored if rows.unscored is not None else np.zeros(n_models)
    notes = []
    for m in range(n_models):
        parts = []
        n_rows = int(rows.rows[m])
        if fallback["rows"].get(cells.models[m]):
            parts.append(_fallback_note(fallback["rows"][cells.models[m]], fallback["included"]))
        if unscored[m]:
            parts.append(f"{int(unscored[m])} of {n_rows} rows {UNSCORED_NOTE}")
        if not present[:, m].any() and errors[m]:
            kind = top_error.get(m)
            parts.append(f"no scored rows: all {int(errors[m])} other rows errored" if unscored[m] else
                         f"no scored rows: all {n_rows} rows errored"
                         + (f" (mostly {kind})" if kind else ""))
        elif not present[:, m].any():
            parts.append("no scored rows")
        elif errors[m]:
            parts.append(f"{int(errors[m])} of {n_rows} rows errored" + (
                f" (mostly {top_error[m]})" if m in top_error else "") + "; not counted in the score")
        if rows.batched is not None and rows.batched[m]:
            parts.append(f"{int(rows.batched[m])} of {n_rows} rows answered through batches (cost at the batch "
                         f"price)")
        if rows.cached is not None and rows.cached[m]:
            parts.append(f"{int(rows.cached[m])} of {n_rows} rows answered from the response cache "
                         f"(left out of latency; cost 0)")
        completion_known = int(rows.completion_known[m])
        if int(rows.prompt_known[m]) + completion_known == 0:
            parts.append(TOKENS_NOT_REPORTED)
        elif completion_known < n_rows:
            parts.append(f"{TOKENS_NOT_REPORTED} for {n_rows - completion_known} rows")
        notes.append("; ".join(parts))

    total = rows.rows
    out = pd.DataFrame({
        "model": cells.models,
        "tests": present.sum(axis=0),
        "clusters": clusters,
        "rows": total.astype("int64"),
        "mean_score": mean_score, "score_lo": score_lo, "score_hi": score_hi,
        "pass_rate": pass_rate, "pass_lo": pass_lo, "pass_hi": pass_hi,
        "error_rows": errors.astype("int64"),
        "unscored_rows": unscored.astype("int64"),
        "fallback_rows": np.array([int(fallback["rows"].get(m, 0)) for m in cells.models], dtype="int64"),
        "error_rate": np.divide(errors, total, out=np.full(n_models, np.nan), where=total > 0),
        "truncation_rate": np.divide(rows.truncated, total, out=np.full(n_models, np.nan), where=total > 0),
        "prompt_tokens": rows.prompt_tokens,
        "completion_tokens": rows.completion_tokens,
        "cost": rows.cost,
        "latency_p50": rows.latency[:, 0], "latency_p90": rows.latency[:, 1], "latency_p99": rows.latency[:, 2],
        "ttft_p50": rows.ttft_p50,
        "notes": notes,
    })
    vanished = sorted(set(fallback["rows"]) - set(cells.models)) if not fallback["included"] else []
    if vanished:
        gone = pd.DataFrame({"model": vanished, "tests": 0, "clusters": 0, "rows": 0, "error_rows": 0,
                             "unscored_rows": 0,
                             "fallback_rows": [int(fallback["rows"][m]) for m in vanished],
                             "notes": [_fallback_note(fallback["rows"][m], False, every=True) for m in vanished]})
        out = pd.concat([out, gone.reindex(columns=out.columns)], ignore_index=True) if len(out) else \
            gone.reindex(columns=out.columns)
    return out.sort_values(["mean_score", "model"], ascending=[False, True], na_position="last",
                           kind="stable").reset_index(drop=True)


def _batched(df: pd.DataFrame) -> np.ndarray:
    """Which rows a provider's batch answered (a run written before the `batch_id` column: none)."""
    if "batch_id" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return df["batch_id"].notna().to_numpy(dtype=bool)


def _cached(df: pd.DataFrame) -> np.ndarray:
    """Which rows the response cache answered (a run written before the `cached` column: none)."""
    if "cached" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return df["cached"].astype("boolean").fillna(False).to_numpy(dtype=bool)


def _top_error_kind(df: pd.DataFrame, code: np.ndarray, judged: np.ndarray) -> dict[int, str]:
    """The most common error_kind among each model's error rows (`judged`: the rows scored or unscored by
    design, which are not errors)."""
    import pandas as pd

    unscored = ~judged
    if not unscored.any():
        return {}
    kinds = pd.Series(np.asarray(df["error_kind"].astype(object))[unscored]).fillna("no score")
    counts = pd.DataFrame({"code": code[unscored], "kind": kinds.astype(str).to_numpy()}).value_counts()
    ranked = counts.rename("n").reset_index().sort_values(["code", "n", "kind"], ascending=[True, False, True])
    top: dict[int, str] = {}
    for m, kind in zip(ranked["code"], ranked["kind"], strict=True):   # the most rows; a tie: the first name
        top.setdefault(int(m), str(kind))
    return top


def fallback_rows(df: pd.DataFrame) -> dict:
    """What `load` recorded about fallback rows: {"included": bool, "rows": {model: count}, "failed": the
    failing fallback rows left out, per run and test}."""
    info = df.attrs.get(FALLBACK_ATTR) if hasattr(df, "attrs") else None
    if not isinstance(info, dict):
        return {"included": False, "rows": {}, "failed": []}
    return {"included": bool(info.get("included")), "rows": dict(info.get("rows") or {}),
            "failed": list(info.get("failed") or [])}


def failed_fallbacks(fallback: dict, run_id: str | None = None) -> dict[tuple[str, str, int], int]:
    """(suite, test_id, case_index) -> failing rows left out because a fallback model served them (of one run,
    or of every run when `run_id` is None)."""
    out: dict[tuple[str, str, int], int] = {}
    for entry in fallback.get("failed") or ():
        if run_id is None or entry["run_id"] == run_id:
            key = (entry["suite"], entry["test_id"], int(entry["case_index"]))
            out[key] = out.get(key, 0) + int(entry["rows"])
    return out


def _fallback_note(count: int, included: bool, *, every: bool = False) -> str:
    """The per-model note for rows a fallback model served."""
    if included:
        return f"{count} rows served by a fallback model are included (--include-fallback): they measure that model"
    if every:
        return (f"every row ({count}) was served by a fallback model and left out; "
                f"--include-fallback keeps them (they measure the fallback model)")
    return f"{count} rows served by a fallback model left out (they measure another model)"
