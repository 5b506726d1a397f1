"""Per-test (item) analysis: difficulty, discrimination from evidence, saturation, flakiness; suite health.

Definitions (docs/analysis.md explains them for readers; "pass" is the strict-majority rule of `cells`):

- difficulty: the mean over models of each model's mean score on the test (high = easy);
- spread: max − min of the model means (descriptive only; it decides nothing);
- item_rest_r: across models, the Pearson correlation of the test's score with the model's mean on the
  *rest* of its suite (the test itself left out); needs three models with scores;
- p_value: the exact conditional test (`homogeneity`) of "every model has the same pass chance on this
  test", from the pass/fail outcomes of all the models' scored attempts; q_value: its Benjamini-Hochberg
  adjustment (Holm's with correction="holm") over the tests with two or more models whose attempts both
  pass and fail (the others cannot be called and keep q = 1);
- discriminating: q_value ≤ alpha (default 0.05): the models' pass rates differ beyond sampling noise, with
  the expected share of false calls among the tests called discriminating kept at or below alpha;
- saturated: not discriminating, and every model passes (most of its attempts); floor: not discriminating, and
  no model passes;
- uninformative: not discriminating, some models pass and some fail: no evidence the test separates them;
- fallback-left-out: rows of the test that failed were served by a fallback model and left out (`load`'s
  default): the rows left are biased toward passing, so the test gets none of the classes above;
- flaky: some model ran the test with temperature 0 (deterministic decoding asked) and its attempts still
  disagree (pass and fail, or different scores): a nondeterministic server or evaluator. At temperature > 0,
  disagreeing attempts are sampling, shown as pass counts (`mixed_models`), never as a flag.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from engine.analysis.cells import Cells, build_cells
from engine.analysis.homogeneity import homogeneity_p_values, p_value_methods
from engine.analysis.models import failed_fallbacks, fallback_rows
from engine.analysis.stats import CORRECTIONS, rowwise_corr

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_ALPHA = 0.05
DEFAULT_CORRECTION = "bh"

STATUS_ORDER = ("discriminating", "uninformative", "saturated", "floor", "fallback-left-out", "single-model",
                "no-data")
#: The status of a test whose failing rows a fallback model served and `load` left out (module docstring).
FALLBACK_LEFT_OUT = "fallback-left-out"


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


def per_test(df: pd.DataFrame | None = None, *, alpha: float = DEFAULT_ALPHA, cells: Cells | None = None,
             seed: int = 0, correction: str = DEFAULT_CORRECTION,
             left_out: Mapping[tuple[str, str, int], int] | None = None) -> pd.DataFrame:
    """One row per test with difficulty, discrimination evidence, saturation and flakiness.

    Args:
        df: Results rows (from `load`); may be None when `cells` is given.
        alpha: Error rate of the "discriminating" call: the false-discovery rate with correction "bh"
            (Benjamini-Hochberg, the default), the family-wise error rate with "holm".
        cells: A grid already built from `df` (saves rebuilding it); None builds it.
        seed: Seed of the sequential Monte Carlo permutations (large sparse tests only: `homogeneity`).
        correction: "bh" or "holm": how p-values are adjusted for testing every test at once.
        left_out: (suite, test_id, case_index) -> failing rows a fallback model served that were left out
            (`models.failed_fallbacks`); None reads them from `df` when given. Such a test is not classed.

    Returns:
        Columns: suite, test_id, case_index, tags, threshold, models, attempts, difficulty, pass_rate, spread,
        item_rest_r, p_value, q_value, saturated, floor, uninformative, discriminating, flaky, flaky_models,
        mixed_models, pass_counts, truncation_share, error_share, unscored_share, hash_changed, status, reason.
        Sorted by suite, test_id, case_index.
    """
    import pandas as pd

    if cells is None:
        if df is None:
            raise ValueError("per_test: give results rows or cells")
        cells = build_cells(df)
    if left_out is None:
        left_out = failed_fallbacks(fallback_rows(df)) if df is not None else {}
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
    p_value = homogeneity_p_values(cells.n_passed, cells.n_scored, seed=seed) if len(items) else np.zeros(0)
    if correction not in CORRECTIONS:
        raise ValueError(f"correction={correction!r}: use one of {', '.join(CORRECTIONS)}")
    # Tests whose every attempt passed (or failed) have p = 1 given their margins and can never be called:
    # leaving them out of the correction (as Tarone's rule does) stops a suite full of saturated tests from
    # diluting the evidence of the others. They keep q = 1.
    attempts_all, passes_all = cells.n_scored.sum(axis=1), cells.n_passed.sum(axis=1)
    varied = (passes_all > 0) & (passes_all < attempts_all)
    q_value = CORRECTIONS[correction](np.where(varied, p_value, np.nan))
    q_value[~varied & np.isfinite(p_value)] = 1.0
    passes = cells.passes
    any_data = n_models > 0
    discriminating = (n_models >= 2) & (q_value <= alpha)
    saturated = any_data & ~discriminating & (np.nansum(passes, axis=1) == n_models)
    floor = any_data & ~discriminating & (np.nansum(passes, axis=1) == 0)
    uninformative = (n_models >= 2) & ~discriminating & ~saturated & ~floor
    dropped = np.array([int(left_out.get((str(su), str(t), int(c)), 0)) for su, t, c in
                        zip(items["suite"], items["test_id"], items["case_index"], strict=True)], dtype="int64") \
        if left_out else np.zeros(len(items), dtype="int64")
    unclassed = any_data & (dropped > 0)
    discriminating, saturated = discriminating & ~unclassed, saturated & ~unclassed
    floor, uninformative = floor & ~unclassed, uninformative & ~unclassed
    mixed = present & (((cells.n_passed > 0) & (cells.n_passed < cells.n_scored))
                       | ((cells.score_max - cells.score_min) > 1e-9))
    flaky_cell = mixed & cells.greedy
    flaky = flaky_cell.any(axis=1)
    counts, mixed_models = _pass_counts([str(m) for m in cells.models], cells.n_passed, cells.n_scored, present,
                                        mixed)
    flaky_models = [", ".join(m for m, hit in zip(cells.models, row, strict=True) if hit)
                    for row in flaky_cell.tolist()]
    rows_total = cells.n_rows.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        truncation = cells.n_truncated.sum(axis=1) / rows_total
        errors = cells.n_errors.sum(axis=1) / rows_total
        unscored = cells.n_unscored.sum(axis=1) / rows_total

    status = np.select(
        [~any_data, unclassed, discriminating, saturated, floor, n_models < 2],
        ["no-data", FALLBACK_LEFT_OUT, "discriminating", "saturated", "floor", "single-model"], "uninformative")
    attempts = cells.n_scored.sum(axis=1).astype("int64")
    methods = p_value_methods(cells.n_passed, cells.n_scored) if len(items) else np.zeros(0, dtype=object)
    reason = [
        _reason(s, m, d, pr, p, q, alpha, a, _TEST_NAMES.get(how, "exact test"), left)
        for s, m, d, pr, p, q, a, how, left in zip(status.tolist(), n_models.tolist(), difficulty.tolist(),
                                                   pass_rate.tolist(), p_value.tolist(), q_value.tolist(),
                                                   attempts.tolist(), [str(x) for x in methods], dropped.tolist(),
                                                   strict=True)
    ]
    return pd.DataFrame({
        "suite": items["suite"], "test_id": items["test_id"], "case_index": items["case_index"],
        "tags": items["tags"], "threshold": items["threshold"], "models": n_models, "attempts": attempts,
        "difficulty": difficulty, "pass_rate": pass_rate, "spread": spread, "item_rest_r": item_rest,
        "p_value": p_value, "q_value": q_value,
        "saturated": saturated, "floor": floor, "uninformative": uninformative,
        "discriminating": discriminating, "flaky": flaky, "flaky_models": flaky_models,
        "mixed_models": mixed_models, "pass_counts": ["; ".join(c) for c in counts],
        "truncation_share": truncation, "error_share": errors, "unscored_share": unscored,
        "hash_changed": items["hashes"].to_numpy() > 1,
        "status": status, "reason": reason,
    })


def _pass_counts(models: list[str], passed: np.ndarray, scored: np.ndarray, present: np.ndarray,
                 mixed: np.ndarray) -> tuple[list[list[str]], list[str]]:
    """Per test: "model passed/scored" for each model with data, and those of models whose attempts disagree."""
    counts, disagree = [], []
    for xs, ns, here, split in zip(passed.astype("int64").tolist(), scored.astype("int64").tolist(),
                                   present.tolist(), mixed.tolist(), strict=True):
        row = [f"{m} {x}/{n}" for m, x, n, ok in zip(models, xs, ns, here, strict=True) if ok]
        counts.append(row)
        disagree.append(", ".join(c for c, hit in zip(row, [h for h, ok in zip(split, here, strict=True) if ok],
                                                       strict=True) if hit))
    return counts, disagree


# How each homogeneity path is named in a test's reason (homogeneity.p_value_methods).
_TEST_NAMES = {"exact": "exact test", "exact-minority": "exact test", "chi-square": "chi-square test",
               "monte-carlo": "Monte Carlo permutation test"}


def _reason(status: str, n_models: int, difficulty: float, pass_rate: float, p_value: float, q_value: float,
            alpha: float, attempts: int, test: str = "exact test", left_out: int = 0) -> str:
    """One line saying why a test got its status, for tables and the report."""
    models = f"{n_models} model{'s' if n_models != 1 else ''}"
    evidence = "" if np.isnan(p_value) else f" ({test} p = {p_value:.3g}, adjusted q = {q_value:.3g})"
    if status == "no-data":
        return "no scored attempt: every row is an error or unscored (eval: {none: true})"
    if status == FALLBACK_LEFT_OUT:
        return (f"not classed: {left_out} failing row{'s' if left_out != 1 else ''} of this test "
                f"{'were' if left_out != 1 else 'was'} served by a fallback model and left out, so the rows left "
                f"(mean pass rate {pass_rate:.2f}) are not how the test went; --include-fallback keeps them")
    if status == "discriminating":
        return (f"pass rates differ between models beyond sampling noise{evidence}; "
                f"mean pass rate {pass_rate:.2f} over {attempts} attempts")
    if status == "floor":
        return (f"no model passes most of its attempts ({models}, mean score {difficulty:.2f}){evidence}: "
                f"check the golden and the evaluator before calling it hard")
    if status == "saturated":
        return (f"every model passes most of its attempts ({models}, mean score {difficulty:.2f}){evidence}: "
                f"it cannot tell these models apart; drop it or make it harder")
    if status == "single-model":
        return "one model only: discrimination needs two or more models"
    return (f"no evidence the models' pass rates differ{evidence} with {attempts} attempts over {models}"
            + ("; one attempt per model cannot show a difference on a single test" if attempts <= n_models else ""))


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
