"""A subset of N tests that keeps the models' ranking and scores, checked on held-out models.

Method (docs/analysis.md, "Choosing a subset of tests"):

1. Fit the 2PL IRT model (`irt.fit_counts`) on the models present: per test a difficulty b and a
   discrimination a, per model an ability theta (scale: mean 0, sd 1 over the models).
2. Choose N tests greedily, each step adding the test that most lowers the expected squared error of the
   models' estimated suite scores: sum over models of s_m² / (1 + I_S(theta_m)), where I_S is the Fisher
   information of the chosen tests at the model's ability (a² p (1 − p) per attempt) and s_m the slope of the
   suite score in theta there (a model at the ceiling needs no precision: its score cannot move). The a used
   here and in step 3 is shrunk by its reliability (`_shrunk_log_slopes`): choosing on the raw a picks the
   lucky ones, whose overestimated slopes then drag the estimated abilities toward the middle.
3. Estimate a model's full-suite pass rate from its answers on the subset alone (p-IRT, as in tinyBenchmarks,
   Polo et al. 2024): its ability from the subset (MAP, prior N(0, 1)), then the mean over every test of the
   observed pass share on the chosen tests and the predicted pass chance on the others.
4. Check it by leaving one model out: for each model, fit and choose on the other models only, then estimate
   the held-out model's score from its subset answers and compare with its full-suite pass rate: mean absolute
   error and the rank correlations (Spearman, Kendall) across the held-out models, beside random subsets of the
   same size scored by their plain mean (averaged over 20 seeds).

Below `irt.MIN_MODELS` models no IRT fit is made: the tests are chosen by difficulty strata (the one with the
most spread across models in each) and the estimate is the plain mean; no error figure is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.analysis.irt import MIN_MODELS, PRIOR_SD_THETA, _sigmoid, ability, fit_counts
from engine.analysis.stats import kendall_tau_b, spearman

if TYPE_CHECKING:
    import pandas as pd

    from engine.analysis.cells import Cells

# Each held-out fit keeps every other model and needs MIN_MODELS of them.
MIN_HOLDOUT_MODELS = MIN_MODELS + 1
# Under this many held-out models a rank correlation rests on a handful of points: shown, with a warning.
FEW_HOLDOUT_MODELS = 10
# Under this many chosen tests the engine draws no verdict (compare.MIN_PAIRED_TESTS is 5): said in a note.
FEW_TESTS = 10
RANDOM_SEEDS = 20
# The held-out fits stop at a coarser tolerance than the reported fit: the Fisher steps crawl along the
# weakly identified location of the scale, which the standardisation removes anyway; the difficulties move
# by far less than their standard errors (bench/README.md has the comparison).
HOLDOUT_TOL = 1e-4


@dataclass
class HoldOut:
    """Leave-one-model-out figures, and the same for random subsets of the same size.

    Args:
        models: Held-out models (each estimated by a fit on all the others).
        mae: Mean |estimate − full-suite pass rate| over the held-out models.
        max_error: The largest of those errors.
        spearman, kendall: Rank correlation of the estimates with the full-suite pass rates.
        random_mae, random_spearman, random_kendall: The same for random subsets scored by their plain mean,
            each the mean over `seeds` seeds.
        random_worse_share: Share of seeds whose random subset had a larger MAE than the method.
        seeds: Random subsets drawn per held-out model.
    """

    models: int
    mae: float
    max_error: float
    spearman: float
    kendall: float
    random_mae: float
    random_spearman: float
    random_kendall: float
    random_worse_share: float
    seeds: int = RANDOM_SEEDS


@dataclass
class SubsetResult:
    """The chosen tests, each model's estimate from them, and the held-out check.

    Args:
        size: Tests chosen.
        tests: Tests in the grid (with a scored attempt).
        method: "irt-information" or, below `MIN_MODELS` models, "difficulty-strata".
        selected: One row per chosen test, in the order chosen: suite, test_id, case_index, b, a (NaN without
            a fit), information (mean over models of its Fisher information at their abilities), pass_share.
        models: One row per model: model, full (pass rate over every test it has), estimate (from the subset
            with the fit on every model: in-sample, optimistic), held_out (from the subset chosen without it;
            NaN when not checked), error (held_out − full).
        holdout: The held-out check, or None when there are too few models.
        calls_share: Share of the grid's rows (calls) the chosen tests took.
        notes: What limits the figures.
    """

    size: int
    tests: int
    method: str
    selected: pd.DataFrame
    models: pd.DataFrame
    holdout: HoldOut | None
    calls_share: float
    notes: list[str] = field(default_factory=list)

    def test_ids(self) -> list[str]:
        """The chosen tests as `suite/test_id`, the lines of a `--filter-file`."""
        return [f"{r.suite}/{r.test_id}" for r in self.selected.itertuples()]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: NaN as None."""
        from dataclasses import asdict

        from engine.analysis.summary import _records, json_safe

        return {"size": self.size, "tests": self.tests, "method": self.method, "calls_share": self.calls_share,
                "estimated": "pass rate (mean over tests of the share of passed attempts)",
                "holdout": json_safe(asdict(self.holdout)) if self.holdout else None, "notes": self.notes,
                "selected": _records(self.selected), "models": _records(self.models)}


def parse_size(text: str, tests: int) -> int:
    """`--subset` as a count of tests: "20" is 20 tests, "20%" a fifth of them (at least one).

    Args:
        text: The option's value.
        tests: Tests with a scored attempt.

    Raises:
        ValueError: Not a whole number or a percentage, or not fewer than `tests`; the message says the fix.
    """
    value = text.strip()
    try:
        if value.endswith("%"):
            share = float(value[:-1])
            if not 0 < share < 100:
                raise ValueError
            size = max(1, round(tests * share / 100))
        else:
            size = int(value)
    except ValueError:
        raise ValueError(f"--subset {text}: give a number of tests (e.g. 40) or a share of them (e.g. 20%)") from None
    if size < 1:
        raise ValueError(f"--subset {text}: choose at least one test")
    if size >= tests:
        raise ValueError(f"--subset {text}: the results hold {tests} tests; a subset must be smaller")
    return size


Fit = tuple[np.ndarray, np.ndarray, np.ndarray]


def _fit(n: np.ndarray, k: np.ndarray, tol: float = 1e-6) -> Fit | None:
    """(a shrunk by its reliability, b, theta) on the scale theta mean 0, sd 1; None when there is no scale."""
    theta, b, log_a, _, _ = fit_counts(n, k, tol=tol)
    centre, scale = theta.mean(), theta.std()
    if not scale > 1e-6:
        return None
    shrunk = _shrunk_log_slopes(log_a, np.exp(log_a)[:, None] * (theta[None, :] - b[:, None]), n)
    return np.exp(shrunk) * scale, (b - centre) / scale, (theta - centre) / scale


def _shrunk_log_slopes(log_a: np.ndarray, eta: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Each test's log a shrunk toward the suite's mean by how reliably it was measured (empirical Bayes).

    Choosing the tests with the largest fitted a picks those whose a was overestimated by chance (the winner's
    curse), and an overestimated a pulls the abilities estimated from them toward the middle. These shrunk
    values are used both to choose and to estimate (posterior means stay calibrated after selection).

    The fit's prior on log a (N(0, 0.5²)) is fixed; here the slopes' spread is estimated from the suite
    (method of moments): the MAP value divided by its prior shrinkage w_i = 0.25 / (0.25 + s_i²) approximates
    the likelihood's estimate L_i, of variance s_i² (from the Fisher information); with precision weights
    1 / s_i², m = the weighted mean of L and tau² = max(0, weighted mean of (L_i − m)² − s_i²) is the spread of
    the true slopes; each L_i moves toward m by r_i = tau² / (tau² + s_i²). When every test has one true a
    (tau² near 0) the choice rests on the difficulties; when the slopes truly differ it keeps about the fit's
    own shrinkage. Measured on simulated runs in docs/analysis.md.

    Args:
        log_a: The fit's log a, on its own scale (the prior's mean 0 is there).
        eta: a (theta − b) per (test, model).
        n: Scored attempts per (test, model).
    """
    from engine.analysis.irt import PRIOR_SD_LOG_A

    p = _sigmoid(eta)
    s_sq = 1 / np.maximum((eta**2 * n * p * (1 - p)).sum(axis=1), 1e-12)
    prior = PRIOR_SD_LOG_A**2
    likelihood = log_a * (prior + s_sq) / prior
    # Weighted by precision: a test everyone passes has almost no information on its slope and would swamp
    # an unweighted variance.
    weight = 1 / s_sq
    mean = float((weight * likelihood).sum() / weight.sum())
    tau_sq = max(0.0, float((weight * ((likelihood - mean) ** 2 - s_sq)).sum() / weight.sum()))
    return mean + tau_sq / (tau_sq + s_sq) * (likelihood - mean)


def _greedy(fit: Fit, n: np.ndarray, size: int) -> np.ndarray:
    """The `size` tests chosen by step 2 of the module docstring, in the order chosen.

    Args:
        fit: From `_fit`.
        n: Scored attempts per (test, model) the fit used.
        size: Tests to choose.
    """
    a, b, theta = fit
    attempts = float(np.median(n[n > 0]))
    p = _sigmoid(a[:, None] * (theta[None, :] - b[:, None]))
    info = attempts * a[:, None] ** 2 * p * (1 - p)
    slope_sq = (a[:, None] * p * (1 - p)).mean(axis=0) ** 2
    total = np.full(len(theta), 1 / PRIOR_SD_THETA**2)
    free = np.ones(len(a), bool)
    chosen = np.empty(size, "int64")
    for step in range(size):
        loss = (slope_sq[None, :] / (total[None, :] + info)).sum(axis=1)
        loss[~free] = np.inf
        best = int(np.argmin(loss))
        chosen[step], free[best] = best, False
        total += info[best]
    return chosen


def _estimate(n: np.ndarray, k: np.ndarray, chosen: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """p-IRT estimates of each model's (column's) pass rate over every test, from its chosen tests only."""
    theta = ability(n[chosen], k[chosen], a[chosen], b[chosen])
    predicted = _sigmoid(a[:, None] * (theta[None, :] - b[:, None]))
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = k[chosen] / n[chosen]
    seen = n[chosen] > 0
    predicted[chosen] = np.where(seen, observed, predicted[chosen])
    return predicted.mean(axis=0)


def _strata(share: np.ndarray, size: int) -> np.ndarray:
    """Without a fit: split the tests by difficulty into `size` strata; in each, the one spreading models most."""
    mean = np.nanmean(share, axis=1)
    spread = np.nan_to_num(np.nanvar(share, axis=1))
    order = np.argsort(mean, kind="stable")
    return np.array([group[np.argmax(spread[group])] for group in np.array_split(order, size)], dtype="int64")


def _random_baseline(share: np.ndarray, full: np.ndarray, size: int, mae: float) -> tuple[float, float, float, float]:
    """Random subsets scored by their plain mean: mean MAE, Spearman, Kendall over seeds, share worse than `mae`."""
    tests, models = share.shape
    maes, rhos, taus = [], [], []
    for seed in range(RANDOM_SEEDS):
        rng = np.random.default_rng(seed)
        estimate = np.empty(models)
        for m in range(models):
            pick = rng.choice(tests, size, replace=False)
            column = share[pick, m]
            estimate[m] = np.nanmean(column) if np.isfinite(column).any() else np.nan
        maes.append(float(np.nanmean(np.abs(estimate - full))))
        rhos.append(spearman(estimate, full))
        taus.append(kendall_tau_b(estimate, full))
    worse = float(np.mean([m > mae for m in maes]))
    return float(np.mean(maes)), float(np.nanmean(rhos)), float(np.nanmean(taus)), worse


def choose_subset(cells: Cells, size: int) -> SubsetResult:
    """Choose `size` tests (module docstring) and check the choice on held-out models.

    Args:
        cells: The test × model grid (`build_cells`, or the DuckDB grid).
        size: Tests to choose (`parse_size`); must be fewer than the tests with a scored attempt.

    Returns:
        The chosen tests, the estimates and the held-out figures (None with too few models), with notes.
    """
    import pandas as pd

    keep_models = cells.n_scored.sum(axis=0) > 0
    keep_items = cells.n_scored[:, keep_models].sum(axis=1) > 0
    n = cells.n_scored[np.ix_(keep_items, keep_models)]
    k = cells.n_passed[np.ix_(keep_items, keep_models)]
    rows = cells.n_rows[keep_items]
    items = cells.items[keep_items].reset_index(drop=True)
    names = [m for m, kept in zip(cells.models, keep_models, strict=True) if kept]
    tests, models = n.shape
    if not 0 < size < tests:
        raise ValueError(f"choose_subset(size={size}): give 1 to {tests - 1} (the grid holds {tests} tests)")
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n > 0, k / n, np.nan)
    full = np.nanmean(share, axis=0)
    notes: list[str] = []

    fit = _fit(n, k) if models >= MIN_MODELS else None
    holdout: HoldOut | None = None
    held_out = np.full(models, np.nan)
    if fit is None:
        method = "difficulty-strata"
        chosen = _strata(share, size)
        estimate = np.nanmean(share[chosen], axis=0)
        a = b = information = np.full(tests, np.nan)
        why = (f"{models} model{'s' if models != 1 else ''}: an IRT fit needs {MIN_MODELS}" if models < MIN_MODELS
               else "every model has the same pass counts, so there is no ability scale")
        notes.append(f"{why}; the tests are chosen by difficulty strata (in each, the one whose pass share varies "
                     f"most across models) and the estimate is their plain mean. The error against the full suite "
                     f"cannot be measured on held-out models: not informative; run more models before dropping "
                     f"tests")
    else:
        method = "irt-information"
        a, b, theta = fit
        chosen = _greedy(fit, n, size)
        estimate = _estimate(n, k, chosen, a, b)
        p = _sigmoid(a[:, None] * (theta[None, :] - b[:, None]))
        information = (a[:, None] ** 2 * p * (1 - p)).mean(axis=1)
        if models >= MIN_HOLDOUT_MODELS:
            for h in range(models):
                others = np.arange(models) != h
                fold = _fit(n[:, others], k[:, others], tol=HOLDOUT_TOL)
                if fold is None:
                    continue
                fa, fb, _ = fold
                pick = _greedy(fold, n[:, others], size)
                held_out[h] = _estimate(n[:, [h]], k[:, [h]], pick, fa, fb)[0]
            mae = float(np.nanmean(np.abs(held_out - full)))
            random_mae, random_rho, random_tau, worse = _random_baseline(share, full, size, mae)
            holdout = HoldOut(models=int(np.isfinite(held_out).sum()), mae=mae,
                              max_error=float(np.nanmax(np.abs(held_out - full))),
                              spearman=spearman(held_out, full), kendall=kendall_tau_b(held_out, full),
                              random_mae=random_mae, random_spearman=random_rho, random_kendall=random_tau,
                              random_worse_share=worse)
            if holdout.models < FEW_HOLDOUT_MODELS:
                notes.append(f"only {holdout.models} held-out models: the rank correlation rests on a handful of "
                             f"points; read it as a rough figure, not a verdict")
        else:
            notes.append(f"{models} models: the held-out check needs {MIN_HOLDOUT_MODELS} (each fit leaves one "
                         f"out and keeps {MIN_MODELS}), so the subset's error against the full suite is not "
                         f"measured: not informative; run more models before dropping tests")
    if size < FEW_TESTS:
        notes.append(f"{size} tests: the engine draws no verdict from a handful of tests; comparisons run on the "
                     f"subset alone will say so")
    notes.append("the estimate is the pass rate over the whole suite; it holds for models like these: a model "
                 "unlike them (another family, a specialism) can be misestimated, so run the full suite now and then")

    selected = pd.DataFrame({
        "suite": items["suite"].iloc[chosen].to_numpy(), "test_id": items["test_id"].iloc[chosen].to_numpy(),
        "case_index": items["case_index"].iloc[chosen].to_numpy(), "b": b[chosen], "a": a[chosen],
        "information": information[chosen], "pass_share": np.nanmean(share[chosen], axis=1),
    })
    table = pd.DataFrame({"model": names, "full": full, "estimate": estimate, "held_out": held_out,
                          "error": held_out - full}).sort_values("full", ascending=False, kind="stable")
    return SubsetResult(size=size, tests=tests, method=method, selected=selected,
                        models=table.reset_index(drop=True), holdout=holdout,
                        calls_share=float(rows[chosen].sum() / rows.sum()) if rows.sum() else float("nan"),
                        notes=notes)


def _figure(value: float, spec: str = "{:.3f}") -> str:
    return "-" if value != value else spec.format(value)


def summary_lines(result: SubsetResult) -> list[str]:
    """The held-out check (or why there is none) and the notes, as lines."""
    share = _figure(100 * result.calls_share, "{:.0f}%")
    lines = [f"subset: {result.size} of {result.tests} tests ({share} of the calls), method {result.method}; "
             f"estimated: each model's pass rate over the whole suite"]
    h = result.holdout
    if h is not None:
        lines.append(f"held out (leave-one-model-out, {h.models} models): MAE {_figure(h.mae)} (max "
                     f"{_figure(h.max_error)}), Spearman {_figure(h.spearman)}, Kendall {_figure(h.kendall)}")
        worse = _figure(100 * h.random_worse_share, "{:.0f}%")
        lines.append(f"random subsets of {result.size} scored by their mean ({h.seeds} seeds): MAE "
                     f"{_figure(h.random_mae)}, Spearman {_figure(h.random_spearman)}, Kendall "
                     f"{_figure(h.random_kendall)}; random had the larger MAE in {worse} of seeds")
    return lines + result.notes


def subset_sections(result: SubsetResult, top: int = 50) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the estimates per model and the chosen tests (the first `top` chosen)."""
    models = [[str(r.model), _figure(r.full), _figure(r.estimate), _figure(r.held_out), _figure(r.error, "{:+.3f}")]
              for r in result.models.itertuples()]
    shown = result.selected.head(top)
    tests = [[f"{r.suite}/{r.test_id}", _figure(r.b, "{:+.2f}"), _figure(r.a, "{:.2f}"),
              _figure(r.information, "{:.3f}"), _figure(r.pass_share, "{:.2f}")] for r in shown.itertuples()]
    more = f", the first {top} of {result.size} (the filter file lists all)" if result.size > top else ""
    return [("Subset: each model's pass rate, full suite against the estimate from the subset (estimate: fit on "
             "every model, in-sample; held out: fit without the model)",
             ["model", "full", "estimate", "held out", "error"], models),
            (f"Subset tests, in the order chosen{more}",
             ["test", "b (difficulty)", "a (discrimination)", "information", "pass share"], tests)]


def filter_text(result: SubsetResult, command: str, sources: list[str]) -> str:
    """The `--filter-file` text: a commented header (how it was chosen, its error), then one test a line."""
    header = [f"# {command}", f"# from: {', '.join(sources)} ({len(result.models)} models)",
              *(f"# {line}" for line in summary_lines(result)),
              "# run exactly these tests with: engine run SUITES --filter-file THIS_FILE (docs/analysis.md)"]
    return "\n".join([*header, *sorted(result.test_ids())]) + "\n"
