"""Per-test (item) analysis: difficulty, discrimination, saturation, flakiness; suite health.

Definitions (docs/analysis.md explains them for readers):

- difficulty: the mean over models of each model's mean score on the test (high = easy);
- spread: max − min of the model means (needs two models);
- item_rest_r: across models, the Pearson correlation of the test's score with the model's mean on the
  *rest* of its suite (the test itself left out); needs three models with scores;
- saturated: every model passes (majority of attempts at or above the threshold);
- floor: no model passes - often a broken golden or evaluator rather than a hard test;
- uninformative: neither, but the spread is below `epsilon`: every model scores about the same;
- flaky: some model's attempts disagree (pass rate strictly between 0 and 1, or score range > epsilon).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from engine.analysis.cells import Cells, build_cells
from engine.analysis.stats import rowwise_corr

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_EPSILON = 0.05

STATUS_ORDER = ("floor", "saturated", "uninformative", "discriminating", "single-model", "no-data")


def _rest_scores(cells: Cells) -> np.ndarray:
    """Each model's mean score over the other tests of the same suite, per (test, model)."""
    import pandas as pd

    present = cells.has_data
    filled = np.where(present, cells.score, 0.0)
    suite_code, _ = pd.factorize(cells.items["suite"])
    n_suites = int(suite_code.max()) + 1 if len(suite_code) else 0
    sums = np.zeros((n_suites, len(cells.models)))
    counts = np.zeros_like(sums)
    np.add.at(sums, suite_code, filled)
    np.add.at(counts, suite_code, present.astype("float64"))
    rest_sum = sums[suite_code] - filled
    rest_n = counts[suite_code] - present
    with np.errstate(invalid="ignore", divide="ignore"):
        rest = rest_sum / rest_n
    rest[rest_n <= 0] = np.nan
    return rest


def per_test(df: pd.DataFrame, *, epsilon: float = DEFAULT_EPSILON, cells: Cells | None = None) -> pd.DataFrame:
    """One row per test with difficulty, discrimination, saturation and flakiness.

    Args:
        df: Results rows (from `load`).
        epsilon: Score differences below this are treated as no difference (uninformative spread, flaky range).
        cells: A grid already built from `df` (saves rebuilding it); None builds it.

    Returns:
        Columns: suite, test_id, case_index, tags, threshold, models, difficulty, pass_rate, spread,
        item_rest_r, saturated, floor, uninformative, discriminating, flaky, flaky_models, truncation_share,
        error_share, hash_changed, status, reason. Sorted by suite, test_id, case_index.
    """
    import pandas as pd

    cells = cells if cells is not None else build_cells(df)
    items = cells.items
    present = cells.has_data
    n_models = present.sum(axis=1)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: NaN is the answer
        score = np.where(present, cells.score, np.nan)
        difficulty = np.nanmean(score, axis=1) if score.size else np.full(len(items), np.nan)
        pass_rate = np.nanmean(np.where(present, cells.pass_rate, np.nan), axis=1) if score.size else difficulty
        top = np.nanmax(score, axis=1) if score.size else difficulty
        bottom = np.nanmin(score, axis=1) if score.size else difficulty
    spread = np.where(n_models >= 2, top - bottom, np.nan)
    item_rest = rowwise_corr(score, _rest_scores(cells))
    passes = cells.passes
    any_data = n_models > 0
    saturated = any_data & (np.nansum(passes, axis=1) == n_models)
    floor = any_data & (np.nansum(passes, axis=1) == 0)
    uninformative = (n_models >= 2) & ~saturated & ~floor & (spread < epsilon)
    discriminating = (n_models >= 2) & ~saturated & ~floor & ~uninformative
    flaky_cell = present & (((cells.pass_rate > 0) & (cells.pass_rate < 1))
                            | ((cells.score_max - cells.score_min) > epsilon))
    flaky = flaky_cell.any(axis=1)
    model_names = np.array(cells.models, dtype=object)
    flaky_models = [", ".join(model_names[row]) for row in flaky_cell]
    rows_total = cells.n_rows.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        truncation = cells.n_truncated.sum(axis=1) / rows_total
        errors = (cells.n_rows - cells.n_scored).sum(axis=1) / rows_total

    status = np.select(
        [~any_data, floor, saturated, n_models < 2, uninformative],
        ["no-data", "floor", "saturated", "single-model", "uninformative"], "discriminating")
    reason = [
        _reason(str(s), int(m), d, sp, pr, epsilon)
        for s, m, d, sp, pr in zip(status, n_models, difficulty, spread, pass_rate, strict=True)
    ]
    out = pd.DataFrame({
        "suite": items["suite"], "test_id": items["test_id"], "case_index": items["case_index"],
        "tags": items["tags"], "threshold": items["threshold"], "models": n_models,
        "difficulty": difficulty, "pass_rate": pass_rate, "spread": spread, "item_rest_r": item_rest,
        "saturated": saturated, "floor": floor, "uninformative": uninformative,
        "discriminating": discriminating, "flaky": flaky, "flaky_models": flaky_models,
        "truncation_share": truncation, "error_share": errors, "hash_changed": items["hashes"].to_numpy() > 1,
        "status": status, "reason": reason,
    })
    return out


def _reason(status: str, n_models: int, difficulty: float, spread: float, pass_rate: float, epsilon: float) -> str:
    """One line saying why a test got its status, for tables and the report."""
    if status == "no-data":
        return "no scored attempt: every row is an error"
    if status == "floor":
        return (f"no model passes ({n_models} model{'s' if n_models != 1 else ''}, mean score {difficulty:.2f}): "
                f"check the golden and the evaluator before calling it hard")
    if status == "saturated":
        return (f"every model passes ({n_models} model{'s' if n_models != 1 else ''}, mean score {difficulty:.2f}): "
                f"it cannot tell these models apart; drop it or make it harder")
    if status == "single-model":
        return "one model only: discrimination needs two or more models"
    if status == "uninformative":
        return f"models score within {spread:.3f} of each other (< {epsilon:g}): it does not separate them"
    return f"spread {spread:.2f} between models, mean pass rate {pass_rate:.2f}"


def suite_health(tests: pd.DataFrame, by: str = "suite") -> pd.DataFrame:
    """Share of saturated / floor / uninformative / discriminating / flaky tests per suite or per tag.

    The health score is the share of discriminating tests: the tests that can tell the models apart.

    Args:
        tests: The output of `per_test`.
        by: "suite", or "tag" (a test with several tags counts in each).

    Returns:
        One row per group: tests, saturated, floor, uninformative, discriminating, flaky (shares), health.
    """
    import pandas as pd

    frame = tests
    key = "suite"
    if by == "tag":
        frame = tests.assign(tag=tests["tags"].map(lambda t: list(t) if len(t) else ["(untagged)"])).explode("tag")
        key = "tag"
    elif by != "suite":
        raise ValueError(f"suite_health(by={by!r}): use 'suite' or 'tag'")
    if frame.empty:
        return pd.DataFrame(columns=[key, "tests", "saturated", "floor", "uninformative", "discriminating",
                                     "flaky", "health"])
    grouped = frame.groupby(key, sort=True)
    out = grouped.agg(
        tests=("test_id", "size"), saturated=("saturated", "mean"), floor=("floor", "mean"),
        uninformative=("uninformative", "mean"), discriminating=("discriminating", "mean"), flaky=("flaky", "mean"),
    ).reset_index()
    out["health"] = out["discriminating"]
    return out
