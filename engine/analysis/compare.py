"""Paired comparisons: two models on the tests both ran, and two runs of the same models (`diff`).

Pairing by test is what makes these sound: a model-vs-model difference is measured on the same tests,
McNemar's exact test uses only the discordant tests, and the interval of the mean difference is a
cluster-robust t-interval over clusters of (suite, test_id).

A verdict ("A is better", "regression") needs all of:

1. at least `MIN_PAIRED_TESTS` paired clusters (below: "too few tests to compare (N)");
2. the paired interval of the mean score difference excludes 0 (a zero-width interval, every test
   differing by the same amount, counts only through 3);
3. McNemar's exact test on the pass/fail discordant tests has p < 1 − level, in the same direction.

The verdict cites both; when they disagree it says so and makes no claim. Requiring both keeps the rate
of false "better" verdicts at or below McNemar's (≤ 5% at level 0.95) however few tests there are.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.analysis.cells import DEFAULT_CLUSTER, ITEM_KEY, Cells, build_cells
from engine.analysis.stats import DEFAULT_LEVEL, cluster_t_interval, mcnemar_exact

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_TIE_EPSILON = 1e-9
# Fewest paired clusters for any verdict: a t-interval on 4 degrees of freedom, and (with McNemar) room
# for 6 discordant tests, the fewest that can reach p < 0.05.
MIN_PAIRED_TESTS = 5
TOO_FEW = "too few tests to compare"


@dataclass(frozen=True)
class Comparison:
    """Model A against model B on the tests both have scores for.

    Args:
        model_a: The first model.
        model_b: The second model.
        tests: Tests (cases) both ran (with at least one scored attempt each).
        clusters: Clusters of those tests (by default distinct (suite, test_id)): the sample size of the
            interval and of the minimum-tests rule.
        wins: Tests where A's mean score is higher.
        ties: Tests where the means are equal (within the tie epsilon).
        losses: Tests where B's mean score is higher.
        both_pass: Tests both pass (strict majority of attempts).
        only_a: Tests only A passes.
        only_b: Tests only B passes.
        both_fail: Tests both fail.
        mcnemar_p: Exact McNemar p-value on (only_a, only_b).
        mean_diff: Mean over tests of (A − B) score.
        diff_lo: Lower bound of the paired cluster-robust t-interval of mean_diff (None in JSON when
            there are fewer than two clusters).
        diff_hi: Upper bound.
        level: Interval coverage; McNemar is read at 1 − level.
        verdict: One sentence for people.
        better: The model the verdict calls better, or None.
        cluster_by: "test" or "case".
    """

    model_a: str
    model_b: str
    tests: int
    clusters: int
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
    better: str | None = None
    cluster_by: str = DEFAULT_CLUSTER

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields: NaN as None."""
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in asdict(self).items()}


def paired_verdict(
    *, mean: float, lo: float, hi: float, clusters: int, only_a: int, only_b: int, level: float,
    min_tests: int = MIN_PAIRED_TESTS,
) -> tuple[int, str]:
    """The decision rule of the module docstring, without names.

    Args:
        mean: Mean paired difference (A − B).
        lo: Lower interval bound.
        hi: Upper interval bound.
        clusters: Paired clusters.
        only_a: Discordant tests only A passes.
        only_b: Discordant tests only B passes.
        level: Interval coverage.
        min_tests: Fewest clusters for a verdict.

    Returns:
        (+1 A better | −1 B better | 0 no claim, the evidence as text: interval and McNemar).
    """
    p_value = mcnemar_exact(only_a, only_b)
    if clusters == 0:
        return 0, "no test in common"
    if clusters < min_tests:
        return 0, f"{TOO_FEW} ({clusters})"
    degenerate = not hi - lo > 1e-12
    interval = (f"{mean:+.3f} ({level:.0%} CI {lo:+.3f} to {hi:+.3f}, t over {clusters} test clusters"
                + ("; zero width: every test differs by the same amount" if degenerate else "") + ")")
    mcnemar = f"McNemar p = {p_value:.3g} ({only_a} vs {only_b} discordant)"
    alpha = 1.0 - level
    for sign in (1, -1):
        by_interval = (sign * lo > 0) if not degenerate else (sign * mean > 0)
        by_mcnemar = p_value < alpha and sign * (only_a - only_b) > 0
        if by_interval and by_mcnemar:
            return sign, f"{interval}; {mcnemar}"
        if by_interval != by_mcnemar and (by_interval or by_mcnemar):
            which = "the score interval excludes 0 but McNemar does not confirm it" if by_interval else \
                "McNemar is significant but the score interval includes 0"
            return 0, f"{interval}; {mcnemar}: {which}"
    return 0, f"{interval}; {mcnemar}"


def _compare_columns(cells: Cells, a: int, b: int, *, level: float, tie_epsilon: float,
                     min_tests: int = MIN_PAIRED_TESTS) -> Comparison:
    both = cells.has_data[:, a] & cells.has_data[:, b]
    sa, sb = cells.score[both, a], cells.score[both, b]
    pa, pb = cells.passes[both, a] == 1, cells.passes[both, b] == 1
    diff = sa - sb
    interval = cluster_t_interval(diff, cells.cluster[both], level=level)
    lo, hi, clusters = float(interval.lo[0]), float(interval.hi[0]), int(interval.clusters[0])
    only_a, only_b = int((pa & ~pb).sum()), int((~pa & pb).sum())
    p_value = mcnemar_exact(only_a, only_b)
    name_a, name_b = cells.models[a], cells.models[b]
    mean = float(diff.mean()) if diff.size else float("nan")
    sign, evidence = paired_verdict(mean=mean, lo=lo, hi=hi, clusters=clusters, only_a=only_a, only_b=only_b,
                                    level=level, min_tests=min_tests)
    if not diff.size:
        verdict = f"{name_a} and {name_b} share no scored test: no comparison possible"
    elif evidence.startswith(TOO_FEW):
        verdict = f"{evidence}: {name_a} vs {name_b} share {clusters} tests, {min_tests} needed for a verdict"
    elif sign > 0:
        verdict = f"{name_a} is better than {name_b} by {evidence}"
    elif sign < 0:
        _, evidence = paired_verdict(mean=-mean, lo=-hi, hi=-lo, clusters=clusters, only_a=only_b,
                                     only_b=only_a, level=level, min_tests=min_tests)
        verdict = f"{name_b} is better than {name_a} by {evidence}"
    else:
        verdict = f"no clear difference between {name_a} and {name_b}: {evidence}"
    return Comparison(
        model_a=name_a, model_b=name_b, tests=int(both.sum()), clusters=clusters,
        wins=int((diff > tie_epsilon).sum()), ties=int((np.abs(diff) <= tie_epsilon).sum()),
        losses=int((diff < -tie_epsilon).sum()), both_pass=int((pa & pb).sum()), only_a=only_a, only_b=only_b,
        both_fail=int((~pa & ~pb).sum()), mcnemar_p=p_value, mean_diff=mean, diff_lo=lo, diff_hi=hi,
        level=level, verdict=verdict, better=name_a if sign > 0 else name_b if sign < 0 else None,
        cluster_by=cells.cluster_by,
    )


def compare(
    df: pd.DataFrame,
    model_a: str,
    model_b: str,
    *,
    level: float = DEFAULT_LEVEL,
    tie_epsilon: float = DEFAULT_TIE_EPSILON,
    cells: Cells | None = None,
    cluster_by: str = DEFAULT_CLUSTER,
    min_tests: int = MIN_PAIRED_TESTS,
) -> Comparison:
    """Paired comparison of two models on the tests both ran (verdict rule: the module docstring).

    Args:
        df: Results rows holding both models.
        model_a: The first model's name.
        model_b: The second model's name.
        level: Interval coverage (McNemar is read at 1 − level).
        tie_epsilon: Per-test mean scores closer than this are a tie.
        cells: A grid already built from `df`; None builds it.
        cluster_by: "test" or "case" when `cells` is None.
        min_tests: Fewest paired clusters for a verdict.

    Raises:
        KeyError: A model is not in the results (the message lists those that are).
    """
    cells = cells if cells is not None else build_cells(df, cluster_by=cluster_by)
    for name in (model_a, model_b):
        if name not in cells.models:
            raise KeyError(f"model {name!r} is not in the results; models: {', '.join(cells.models) or 'none'}")
    return _compare_columns(cells, cells.models.index(model_a), cells.models.index(model_b),
                            level=level, tie_epsilon=tie_epsilon, min_tests=min_tests)


def compare_to_best(df: pd.DataFrame | None, *, cells: Cells | None = None, order: Sequence[str] | None = None,
                    level: float = DEFAULT_LEVEL) -> list[Comparison]:
    """The best model (first of `order`, else the highest mean score) against each other model.

    Args:
        df: Results rows (None when `cells` is given).
        cells: A grid already built from `df`; None builds it.
        order: Model names best first (e.g. `per_model(df)["model"]`).
        level: Interval coverage.
    """
    if cells is None:
        if df is None:
            raise ValueError("compare_to_best: give results rows or cells")
        cells = build_cells(df)
    if order is None:
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: NaN is the answer
            means = np.nanmean(np.where(cells.has_data, cells.score, np.nan), axis=0)
        order = [cells.models[i] for i in np.argsort(-np.nan_to_num(means, nan=-1.0), kind="stable")]
    order = list(order)
    if len(order) < 2:
        return []
    best = cells.models.index(order[0])
    return [_compare_columns(cells, best, cells.models.index(other), level=level,
                             tie_epsilon=DEFAULT_TIE_EPSILON) for other in order[1:]]


@dataclass
class Diff:
    """What changed from run A (the base) to run B.

    Args:
        flips: One row per (model, test) whose verdict changed: model, suite, test_id, case_index,
            passed_a, passed_b, change ("pass→fail" | "fail→pass"), score_a, score_b, hash_changed.
        summary: One row per model present in both: tests, clusters, pass_to_fail, fail_to_pass,
            changed_tests, mean_a, mean_b, mean_diff (B − A), diff_lo, diff_hi, mcnemar_p, verdict
            ("regression" | "improvement" | "no significant change" | "too few tests to compare (N)" |
            "no common tests"), evidence (the interval and McNemar, as text).
    """

    flips: pd.DataFrame
    summary: pd.DataFrame

    @property
    def regressed(self) -> list[str]:
        """Models whose verdict is "regression" (interval below zero and McNemar agreeing)."""
        return [str(m) for m in self.summary.loc[self.summary["verdict"] == "regression", "model"]]


def _cell_frame(data: pd.DataFrame | Cells) -> pd.DataFrame:
    """Long (model, test) table: score, pass verdict, test_hash."""
    import pandas as pd

    cells = data if isinstance(data, Cells) else build_cells(data)
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
    run_a: pd.DataFrame | Cells | str | os.PathLike[str],
    run_b: pd.DataFrame | Cells | str | os.PathLike[str],
    *,
    level: float = DEFAULT_LEVEL,
    cluster_by: str = DEFAULT_CLUSTER,
    min_tests: int = MIN_PAIRED_TESTS,
) -> Diff:
    """Compare a base run A with a new run B, test by test and model by model.

    Tests whose `test_hash` differs between the runs are listed (flagged `hash_changed`) but left out
    of the regression verdict: they are not the same measurement. The verdict follows the rule of the
    module docstring, with B − A as the difference and the flips as McNemar's discordant tests.

    Args:
        run_a: The base: a DataFrame from `load`, a grid (`build_cells`, or the DuckDB path's), or a path
            `load` accepts.
        run_b: The new run, likewise.
        level: Interval coverage.
        cluster_by: "test" (clusters of (suite, test_id)) or "case".
        min_tests: Fewest paired clusters for a verdict.
    """
    import pandas as pd

    from engine.analysis.load import ANALYSIS_COLUMNS, load

    frames = [r if isinstance(r, (pd.DataFrame, Cells)) else load(r, columns=ANALYSIS_COLUMNS) for r in (run_a, run_b)]
    cell_a, cell_b = (_cell_frame(f) for f in frames)
    key = ["model", *ITEM_KEY]
    joined = cell_a.merge(cell_b, on=key, suffixes=("_a", "_b"))
    joined["hash_changed"] = joined["test_hash_a"].astype(object) != joined["test_hash_b"].astype(object)
    changed = joined["passed_a"] != joined["passed_b"]
    flips = joined.loc[changed, key + ["passed_a", "passed_b", "score_a", "score_b", "hash_changed"]].copy()
    flips.insert(len(key), "change", np.where(flips["passed_a"], "pass→fail", "fail→pass"))
    flips = flips.sort_values(key, kind="stable").reset_index(drop=True)

    cluster_keys = ["suite", "test_id"] if cluster_by == "test" else list(ITEM_KEY)
    summary_rows = []
    for model in sorted(set(cell_a["model"]) & set(cell_b["model"])):
        mine = joined[joined["model"] == model]
        same = mine[~mine["hash_changed"]]
        delta = (same["score_b"] - same["score_a"]).to_numpy(dtype="float64")
        codes = same.groupby(cluster_keys, sort=True).ngroup().to_numpy() if len(same) else np.zeros(0, "int64")
        interval = cluster_t_interval(delta, codes, level=level)
        lo, hi, clusters = float(interval.lo[0]), float(interval.hi[0]), int(interval.clusters[0])
        to_fail = int((same["passed_a"] & ~same["passed_b"]).sum())
        to_pass = int((~same["passed_a"] & same["passed_b"]).sum())
        mean = float(delta.mean()) if delta.size else float("nan")
        sign, evidence = paired_verdict(mean=mean, lo=lo, hi=hi, clusters=clusters, only_a=to_pass,
                                        only_b=to_fail, level=level, min_tests=min_tests)
        if not len(same):
            verdict = "no common tests"
        elif evidence.startswith(TOO_FEW):
            verdict = evidence
        else:
            verdict = {1: "improvement", -1: "regression"}.get(sign, "no significant change")
        summary_rows.append({
            "model": model, "tests": len(same), "clusters": clusters,
            "pass_to_fail": to_fail, "fail_to_pass": to_pass,
            "changed_tests": int(mine["hash_changed"].sum()),
            "mean_a": float(same["score_a"].mean()) if len(same) else float("nan"),
            "mean_b": float(same["score_b"].mean()) if len(same) else float("nan"),
            "mean_diff": mean, "diff_lo": lo, "diff_hi": hi, "mcnemar_p": mcnemar_exact(to_pass, to_fail),
            "verdict": verdict, "evidence": evidence,
        })
    summary = pd.DataFrame(summary_rows, columns=[
        "model", "tests", "clusters", "pass_to_fail", "fail_to_pass", "changed_tests", "mean_a", "mean_b",
        "mean_diff", "diff_lo", "diff_hi", "mcnemar_p", "verdict", "evidence"])
    return Diff(flips=flips, summary=summary)
