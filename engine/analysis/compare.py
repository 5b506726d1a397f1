"""Paired comparisons: two models on the tests both ran, and two runs of the same models (`diff`).

Pairing by test is what makes these sound: a model-vs-model difference is measured on the same tests,
McNemar's exact test uses only the discordant tests, and the bootstrap resamples tests.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.analysis.cells import ITEM_KEY, Cells, build_cells
from engine.analysis.stats import DEFAULT_LEVEL, bootstrap_mean_ci, mcnemar_exact

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_TIE_EPSILON = 1e-9


@dataclass(frozen=True)
class Comparison:
    """Model A against model B on the tests both have scores for.

    Args:
        model_a: The first model.
        model_b: The second model.
        tests: Tests both ran (with at least one scored attempt each).
        wins: Tests where A's mean score is higher.
        ties: Tests where the means are equal (within the tie epsilon).
        losses: Tests where B's mean score is higher.
        both_pass: Tests both pass (majority of attempts).
        only_a: Tests only A passes.
        only_b: Tests only B passes.
        both_fail: Tests both fail.
        mcnemar_p: Exact McNemar p-value on (only_a, only_b).
        mean_diff: Mean over tests of (A − B) score.
        diff_lo: Lower bound of the paired bootstrap CI of mean_diff.
        diff_hi: Upper bound.
        level: CI coverage.
        verdict: One sentence for people.
    """

    model_a: str
    model_b: str
    tests: int
    wins: int
    ties: int
    losses: int
    both_pass: int
    only_a: int
    only_b: int
    both_fail: int
    mcnemar_p: float
    mean_diff: float
    diff_lo: float
    diff_hi: float
    level: float
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        return asdict(self)


def _compare_columns(cells: Cells, a: int, b: int, *, resamples: int, level: float, seed: int,
                     tie_epsilon: float) -> Comparison:
    both = cells.has_data[:, a] & cells.has_data[:, b]
    sa, sb = cells.score[both, a], cells.score[both, b]
    pa, pb = cells.passes[both, a] == 1, cells.passes[both, b] == 1
    diff = sa - sb
    lo, hi = bootstrap_mean_ci(diff, resamples=resamples, level=level, seed=seed)
    only_a, only_b = int((pa & ~pb).sum()), int((~pa & pb).sum())
    p_value = mcnemar_exact(only_a, only_b)
    name_a, name_b = cells.models[a], cells.models[b]
    mean = float(diff.mean()) if diff.size else float("nan")
    if not diff.size:
        verdict = f"{name_a} and {name_b} share no scored test: no comparison possible"
    elif lo > 0:
        verdict = f"{name_a} is better than {name_b} by {mean:+.3f} ({level:.0%} CI {lo:+.3f} to {hi:+.3f})"
    elif hi < 0:
        verdict = f"{name_b} is better than {name_a} by {-mean:+.3f} ({level:.0%} CI {-hi:+.3f} to {-lo:+.3f})"
    else:
        verdict = (f"no clear difference between {name_a} and {name_b}: {mean:+.3f} "
                   f"({level:.0%} CI {lo:+.3f} to {hi:+.3f} includes 0)")
    return Comparison(
        model_a=name_a, model_b=name_b, tests=int(both.sum()),
        wins=int((diff > tie_epsilon).sum()), ties=int((np.abs(diff) <= tie_epsilon).sum()),
        losses=int((diff < -tie_epsilon).sum()), both_pass=int((pa & pb).sum()), only_a=only_a, only_b=only_b,
        both_fail=int((~pa & ~pb).sum()), mcnemar_p=p_value, mean_diff=mean, diff_lo=lo, diff_hi=hi,
        level=level, verdict=verdict,
    )


def compare(
    df: pd.DataFrame,
    model_a: str,
    model_b: str,
    *,
    resamples: int = 2000,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    tie_epsilon: float = DEFAULT_TIE_EPSILON,
    cells: Cells | None = None,
) -> Comparison:
    """Paired comparison of two models on the tests both ran.

    Args:
        df: Results rows holding both models.
        model_a: The first model's name.
        model_b: The second model's name.
        resamples: Bootstrap resamples for the CI of the mean difference.
        level: CI coverage.
        seed: Bootstrap seed.
        tie_epsilon: Per-test mean scores closer than this are a tie.
        cells: A grid already built from `df`; None builds it.

    Raises:
        KeyError: A model is not in the results (the message lists those that are).
    """
    cells = cells if cells is not None else build_cells(df)
    for name in (model_a, model_b):
        if name not in cells.models:
            raise KeyError(f"model {name!r} is not in the results; models: {', '.join(cells.models) or 'none'}")
    return _compare_columns(cells, cells.models.index(model_a), cells.models.index(model_b),
                            resamples=resamples, level=level, seed=seed, tie_epsilon=tie_epsilon)


def compare_to_best(df: pd.DataFrame, *, cells: Cells | None = None, order: Sequence[str] | None = None,
                    resamples: int = 2000, seed: int = 0) -> list[Comparison]:
    """The best model (first of `order`, else the highest mean score) against each other model.

    Args:
        df: Results rows.
        cells: A grid already built from `df`; None builds it.
        order: Model names best first (e.g. `per_model(df)["model"]`).
        resamples: Bootstrap resamples.
        seed: Bootstrap seed.
    """
    cells = cells if cells is not None else build_cells(df)
    if order is None:
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: NaN is the answer
            means = np.nanmean(np.where(cells.has_data, cells.score, np.nan), axis=0)
        order = [cells.models[i] for i in np.argsort(-np.nan_to_num(means, nan=-1.0), kind="stable")]
    order = list(order)
    if len(order) < 2:
        return []
    best = cells.models.index(order[0])
    return [_compare_columns(cells, best, cells.models.index(other), resamples=resamples, level=DEFAULT_LEVEL,
                             seed=seed, tie_epsilon=DEFAULT_TIE_EPSILON) for other in order[1:]]


@dataclass
class Diff:
    """What changed from run A (the base) to run B.

    Args:
        flips: One row per (model, test) whose verdict changed: model, suite, test_id, case_index,
            passed_a, passed_b, change ("pass→fail" | "fail→pass"), score_a, score_b, hash_changed.
        summary: One row per model present in both: tests, pass_to_fail, fail_to_pass, changed_tests,
            mean_a, mean_b, mean_diff (B − A), diff_lo, diff_hi, verdict
            ("regression" | "improvement" | "no significant change" | "no common tests").
    """

    flips: pd.DataFrame
    summary: pd.DataFrame

    @property
    def regressed(self) -> list[str]:
        """Models whose score dropped with the CI entirely below zero."""
        return [str(m) for m in self.summary.loc[self.summary["verdict"] == "regression", "model"]]


def _cell_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Long (model, test) table: score, pass verdict, test_hash."""
    import pandas as pd

    cells = build_cells(df)
    items = cells.items
    present = cells.has_data
    idx_item, idx_model = np.nonzero(present)
    return pd.DataFrame({
        "model": np.array(cells.models, dtype=object)[idx_model],
        "suite": items["suite"].to_numpy()[idx_item],
        "test_id": items["test_id"].to_numpy()[idx_item],
        "case_index": items["case_index"].to_numpy()[idx_item],
        "test_hash": items["test_hash"].to_numpy()[idx_item],
        "score": cells.score[idx_item, idx_model],
        "passed": cells.passes[idx_item, idx_model] == 1,
    })


def diff(
    run_a: pd.DataFrame | str | os.PathLike[str],
    run_b: pd.DataFrame | str | os.PathLike[str],
    *,
    resamples: int = 2000,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> Diff:
    """Compare a base run A with a new run B, test by test and model by model.

    Tests whose `test_hash` differs between the runs are listed (flagged `hash_changed`) but left out
    of the regression verdict: they are not the same measurement.

    Args:
        run_a: The base: a DataFrame from `load`, or a path `load` accepts.
        run_b: The new run, likewise.
        resamples: Bootstrap resamples for the CI of the score change.
        level: CI coverage.
        seed: Bootstrap seed.
    """
    import pandas as pd

    from engine.analysis.load import ANALYSIS_COLUMNS, load

    frames = [r if isinstance(r, pd.DataFrame) else load(r, columns=ANALYSIS_COLUMNS) for r in (run_a, run_b)]
    cell_a, cell_b = (_cell_frame(f) for f in frames)
    key = ["model", *ITEM_KEY]
    joined = cell_a.merge(cell_b, on=key, suffixes=("_a", "_b"))
    joined["hash_changed"] = joined["test_hash_a"].astype(object) != joined["test_hash_b"].astype(object)
    changed = joined["passed_a"] != joined["passed_b"]
    flips = joined.loc[changed, key + ["passed_a", "passed_b", "score_a", "score_b", "hash_changed"]].copy()
    flips.insert(len(key), "change", np.where(flips["passed_a"], "pass→fail", "fail→pass"))
    flips = flips.sort_values(key, kind="stable").reset_index(drop=True)

    summary_rows = []
    for model in sorted(set(cell_a["model"]) & set(cell_b["model"])):
        mine = joined[joined["model"] == model]
        same = mine[~mine["hash_changed"]]
        delta = (same["score_b"] - same["score_a"]).to_numpy(dtype="float64")
        lo, hi = bootstrap_mean_ci(delta, resamples=resamples, level=level, seed=seed)
        if not len(same):
            verdict = "no common tests"
        elif hi < 0:
            verdict = "regression"
        elif lo > 0:
            verdict = "improvement"
        else:
            verdict = "no significant change"
        summary_rows.append({
            "model": model, "tests": len(same),
            "pass_to_fail": int((same["passed_a"] & ~same["passed_b"]).sum()),
            "fail_to_pass": int((~same["passed_a"] & same["passed_b"]).sum()),
            "changed_tests": int(mine["hash_changed"].sum()),
            "mean_a": float(same["score_a"].mean()) if len(same) else float("nan"),
            "mean_b": float(same["score_b"].mean()) if len(same) else float("nan"),
            "mean_diff": float(delta.mean()) if delta.size else float("nan"),
            "diff_lo": lo, "diff_hi": hi, "verdict": verdict,
        })
    summary = pd.DataFrame(summary_rows, columns=[
        "model", "tests", "pass_to_fail", "fail_to_pass", "changed_tests", "mean_a", "mean_b", "mean_diff",
        "diff_lo", "diff_hi", "verdict"])
    return Diff(flips=flips, summary=summary)
