"""Optional two-parameter logistic (2PL) IRT fit: difficulty and discrimination per test, ability per model.

    P(attempt of model m passes test i) = sigmoid(a_i * (theta_m - b_i))

The data are per-(test, model) pass counts over scored attempts (binomial; error rows are not attempts).
The fit is the maximum of the likelihood times Gaussian priors on theta (N(0, 1)), log a (N(0, 0.5²),
the usual lognormal slope prior) and b (N(0, 2²)): the priors keep every value finite, also for a test
every model passes (whose maximum-likelihood b is -infinity). It runs block Fisher scoring with numpy
(abilities given the items, then each item's b and log a given the abilities) until the largest change
is below `tol`. The scale is then fixed as theta mean 0, sd 1 over the models, mapping a and b with it,
which leaves every probability unchanged.

With few models the item parameters are mostly the priors speaking: each test's a and b come from one
pass count per model. `MIN_MODELS` (5) is the floor below which no fit is made; even at 5-10 models read
b and theta as orderings and a as a rough hint. The plain per-test statistics stay the default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.analysis.cells import Cells, build_cells

if TYPE_CHECKING:
    import pandas as pd

MIN_MODELS = 5
MIN_TESTS = 10
PRIOR_SD_THETA = 1.0
PRIOR_SD_LOG_A = 0.5
PRIOR_SD_B = 2.0
_Z95 = 1.959963984540054
PAIRWISE_CAVEAT = ("theta intervals place each model on the scale; overlapping or not, they are not a test between "
                   "two models (with equal models ~14% of pairs would look different): read the paired comparisons")
_MAX_STEP = 1.0  # Fisher steps are clipped so a far-off start cannot overshoot into overflow


@dataclass
class IRTResult:
    """A 2PL fit, or the reason none was made.

    Args:
        fitted: Whether a fit was made; when False, `note` says why and the tables are empty.
        items: One row per test: suite, test_id, case_index, b (difficulty on the ability scale: high =
            hard), a (discrimination: how sharply the pass chance rises with ability), b_se, models,
            attempts, pass_share (of scored attempts), flag ("everyone passes" / "everyone fails" when the
            prior alone sets b and a, else "").
        models: One row per model, highest ability first: model, theta, theta_se, theta_lo, theta_hi (theta ±
            1.96 se: where the model sits on the scale, not a test between models; pairwise claims come from
            the paired comparisons), tests, pass_share.
        note: Why no fit was made, or a caveat about the fit.
        converged: Whether the largest parameter change fell below the tolerance.
        iterations: Fisher scoring rounds run.
    """

    fitted: bool
    items: pd.DataFrame
    models: pd.DataFrame
    note: str = ""
    converged: bool = False
    iterations: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the tables as lists of records, NaN as None."""
        from engine.analysis.summary import _records

        return {"fitted": self.fitted, "note": self.note, "converged": self.converged,
                "iterations": self.iterations, "caveat": PAIRWISE_CAVEAT if self.fitted else "",
                "models": _records(self.models), "items": _records(self.items)}


def _refuse(note: str) -> IRTResult:
    import pandas as pd

    items = pd.DataFrame(columns=["suite", "test_id", "case_index", "b", "a", "b_se", "models", "attempts",
                                  "pass_share", "flag"])
    models = pd.DataFrame(columns=["model", "theta", "theta_se", "theta_lo", "theta_hi", "tests", "pass_share"])
    return IRTResult(fitted=False, items=items, models=models, note=f"IRT not fitted: {note}")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # tanh form: no overflow warning for large |x|


def fit_counts(n: np.ndarray, k: np.ndarray, *, max_iter: int = 2000, tol: float = 1e-6
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool, int]:
    """The MAP 2PL fit on (tests × models) attempt and pass counts, before the scale is fixed.

    `fit_2pl` and the subset selection (`engine.analysis.subset`, which refits without each held-out model)
    share it. A cell with n = 0 adds nothing to the likelihood.

    Args:
        n: Scored attempts per (test, model).
        k: Passed attempts per (test, model).
        max_iter: Most Fisher scoring rounds.
        tol: Stop when no parameter moves by more than this in a round.

    Returns:
        (theta per model, b per test, log a per test, converged, rounds run), on the fit's own scale.
    """
    n_items, n_models = n.shape
    theta = np.zeros(n_models)
    b = np.zeros(n_items)
    log_a = np.zeros(n_items)
    converged, iteration = False, 0
    for iteration in range(1, max_iter + 1):  # noqa: B007 - the count is reported
        a = np.exp(log_a)
        p = _sigmoid(a[:, None] * (theta[None, :] - b[:, None]))
        weight = n * p * (1 - p)
        grad = (a[:, None] * (k - n * p)).sum(axis=0) - theta / PRIOR_SD_THETA**2
        info_theta = (a[:, None] ** 2 * weight).sum(axis=0) + 1 / PRIOR_SD_THETA**2
        step_theta = np.clip(grad / info_theta, -_MAX_STEP, _MAX_STEP)
        theta = theta + step_theta

        eta = a[:, None] * (theta[None, :] - b[:, None])
        p = _sigmoid(eta)
        resid, weight = k - n * p, n * p * (1 - p)
        # Per item, (b, log a) jointly: d eta / d b = -a, d eta / d log a = eta; 2×2 Fisher information.
        g_b = -(a[:, None] * resid).sum(axis=1) - b / PRIOR_SD_B**2
        g_la = (eta * resid).sum(axis=1) - log_a / PRIOR_SD_LOG_A**2
        i_bb = (a[:, None] ** 2 * weight).sum(axis=1) + 1 / PRIOR_SD_B**2
        i_ll = (eta**2 * weight).sum(axis=1) + 1 / PRIOR_SD_LOG_A**2
        i_bl = -(a[:, None] * eta * weight).sum(axis=1)
        det = i_bb * i_ll - i_bl**2
        step_b = np.clip((i_ll * g_b - i_bl * g_la) / det, -_MAX_STEP, _MAX_STEP)
        step_la = np.clip((i_bb * g_la - i_bl * g_b) / det, -_MAX_STEP, _MAX_STEP)
        b, log_a = b + step_b, log_a + step_la
        if max(np.abs(step_theta).max(), np.abs(step_b).max(), np.abs(step_la).max()) < tol:
            converged = True
            break
    return theta, b, log_a, converged, iteration


def ability(n: np.ndarray, k: np.ndarray, a: np.ndarray, b: np.ndarray, *, max_iter: int = 100,
            tol: float = 1e-8) -> np.ndarray:
    """MAP abilities (prior N(0, 1)) of models given fixed item parameters: a new model placed on a fitted scale.

    Args:
        n: Scored attempts per (test, model), for the tests whose `a` and `b` are given.
        k: Passed attempts per (test, model).
        a: Discrimination per test (on the scale the abilities are wanted on).
        b: Difficulty per test.
        max_iter: Most Newton rounds (the posterior is log-concave: a handful suffice).
        tol: Stop when no ability moves by more than this.

    Returns:
        One ability per model (column); the prior mean 0 for a model with no attempts.
    """
    theta = np.zeros(n.shape[1])
    for _ in range(max_iter):
        p = _sigmoid(a[:, None] * (theta[None, :] - b[:, None]))
        grad = (a[:, None] * (k - n * p)).sum(axis=0) - theta / PRIOR_SD_THETA**2
        info = (a[:, None] ** 2 * n * p * (1 - p)).sum(axis=0) + 1 / PRIOR_SD_THETA**2
        step = np.clip(grad / info, -_MAX_STEP, _MAX_STEP)
        theta = theta + step
        if np.abs(step).max(initial=0.0) < tol:
            break
    return theta


def fit_2pl(
    cells_or_df: Cells | pd.DataFrame,
    *,
    min_models: int = MIN_MODELS,
    min_tests: int = MIN_TESTS,
    max_iter: int = 2000,
    tol: float = 1e-6,
) -> IRTResult:
    """Fit a 2PL IRT model to the pass counts of every (test, model) cell.

    Args:
        cells_or_df: Results rows (from `load`) or a grid from `build_cells`.
        min_models: Refuse (with a note, not an error) below this many models with a scored attempt.
        min_tests: Refuse below this many tests with a scored attempt.
        max_iter: Most Fisher scoring rounds.
        tol: Stop when no parameter moves by more than this in a round.

    Returns:
        The fit; `fitted` is False and `note` says why when there are too few models or tests, or when
        the models' results are indistinguishable.

    Raises:
        ValueError: `min_models` below 3 (a 2PL fit with two models is a guess, not an estimate).
    """
    import pandas as pd

    if min_models < 3:
        raise ValueError(f"fit_2pl(min_models={min_models}): use at least 3 ({MIN_MODELS} is the default)")
    cells = cells_or_df if isinstance(cells_or_df, Cells) else build_cells(cells_or_df)
    n_all = cells.n_scored
    keep_models = n_all.sum(axis=0) > 0
    keep_items = n_all[:, keep_models].sum(axis=1) > 0
    n = n_all[np.ix_(keep_items, keep_models)]
    k = np.rint(np.nan_to_num(cells.pass_rate[np.ix_(keep_items, keep_models)]) * n)
    n_items, n_models = n.shape
    if n_models < min_models:
        return _refuse(f"{n_models} model{'s' if n_models != 1 else ''} with scores; a 2PL fit needs at least "
                       f"{min_models} (each test's difficulty and discrimination come from one pass count per "
                       f"model); use the per-test spread and item-rest r instead")
    if n_items < min_tests:
        return _refuse(f"{n_items} test{'s' if n_items != 1 else ''} with scores; a 2PL fit needs at least "
                       f"{min_tests} to place the models on a scale")

    theta, b, log_a, converged, iteration = fit_counts(n, k, max_iter=max_iter, tol=tol)
    centre, scale = theta.mean(), theta.std()
    if not scale > 1e-6:
        return _refuse("every model has the same pass counts, so there is no ability scale to fit")
    a = np.exp(log_a)
    p = _sigmoid(a[:, None] * (theta[None, :] - b[:, None]))
    weight = n * p * (1 - p)
    theta_se = 1 / np.sqrt((a[:, None] ** 2 * weight).sum(axis=0) + 1 / PRIOR_SD_THETA**2) / scale
    b_se = 1 / np.sqrt((a[:, None] ** 2 * weight).sum(axis=1) + 1 / PRIOR_SD_B**2) / scale
    # theta' = (theta - c) / s, b' = (b - c) / s, a' = a * s keep a * (theta - b) unchanged.
    theta, b, a = (theta - centre) / scale, (b - centre) / scale, a * scale

    attempts, passes = n.sum(axis=1), k.sum(axis=1)
    flag = np.where(passes == attempts, "everyone passes", np.where(passes == 0, "everyone fails", ""))
    source = cells.items[keep_items].reset_index(drop=True)
    items = pd.DataFrame({
        "suite": source["suite"], "test_id": source["test_id"], "case_index": source["case_index"],
        "b": b, "a": a, "b_se": b_se, "models": (n > 0).sum(axis=1), "attempts": attempts.astype("int64"),
        "pass_share": passes / attempts, "flag": flag,
    })
    names = [m for m, kept in zip(cells.models, keep_models, strict=True) if kept]
    models = pd.DataFrame({
        "model": names, "theta": theta, "theta_se": theta_se, "theta_lo": theta - _Z95 * theta_se,
        "theta_hi": theta + _Z95 * theta_se, "tests": (n > 0).sum(axis=0),
        "pass_share": k.sum(axis=0) / n.sum(axis=0),
    }).sort_values("theta", ascending=False, kind="stable").reset_index(drop=True)
    note = "" if converged else f"the fit did not converge in {max_iter} rounds; treat the values as rough"
    if n_models < 10:
        note = (note + "; " if note else "") + (f"only {n_models} models: read b and theta as orderings and "
                                                f"a as a rough hint")
    return IRTResult(fitted=True, items=items, models=models, note=note, converged=converged,
                     iterations=iteration)


def irt_sections(result: IRTResult, top: int = 10) -> list[tuple[str, list[str], list[list[str]]]]:
    """The IRT views as (title, header, rows): abilities, then the lowest and highest discrimination tests.

    Tests every model passes or fails (flagged) are left out of the discrimination ranking.

    Args:
        result: A fit from `fit_2pl`.
        top: Tests shown at each end of the discrimination ranking.
    """
    if not result.fitted:
        return []

    def test_rows(frame: pd.DataFrame) -> list[list[str]]:
        return [[f"{r.suite}/{r.test_id}" + (f"#{r.case_index}" if r.case_index >= 0 else ""),
                 f"{r.a:.2f}", f"{r.b:+.2f} ± {r.b_se:.2f}", f"{r.pass_share:.2f}", str(r.flag)]
                for r in frame.itertuples()]

    header = ["test", "a (discrimination)", "b (difficulty) ± se", "pass share", "flag"]
    # Tests everyone passes or fails carry no information on a (the prior sets it): keep them out of the ranking.
    ranked = result.items[result.items["flag"] == ""].sort_values("a", kind="stable")
    out = [("IRT abilities (2PL; theta mean 0, sd 1 over these models; 95% interval, not a pairwise test)",
            ["model", "theta [95% interval]", "se", "pass share", "tests"],
            [[str(r.model), f"{r.theta:+.2f} [{r.theta_lo:+.2f}, {r.theta_hi:+.2f}]", f"{r.theta_se:.2f}",
              f"{r.pass_share:.3f}", str(r.tests)]
             for r in result.models.itertuples()])]
    if 0 < len(ranked) <= 2 * top:
        out.append(("IRT tests by discrimination a (lowest first)", header, test_rows(ranked)))
    elif len(ranked):
        out.append((f"IRT lowest discrimination (bottom {top})", header, test_rows(ranked.head(top))))
        out.append((f"IRT highest discrimination (top {top})", header, test_rows(ranked.tail(top).iloc[::-1])))
    return out


def render_irt(result: IRTResult, fmt: str = "table") -> str:
    """The fit's note and tables as rich text ("table") or Markdown ("markdown").

    Args:
        result: A fit from `fit_2pl`.
        fmt: "table" or "markdown".
    """
    notes = [f"note: {result.note}"] if result.note else []
    if result.fitted:
        notes.append(f"note: {PAIRWISE_CAVEAT}")
    extreme = int((result.items["flag"] != "").sum())
    if extreme:
        notes.append(f"note: {extreme} test{'s' if extreme != 1 else ''} that every model passes or fails "
                     f"{'are' if extreme != 1 else 'is'} left out of the IRT discrimination ranking: "
                     f"the prior alone sets a and b for such tests")
    from engine.analysis.render import tables_as_markdown, tables_as_text

    if fmt == "markdown":
        return "\n" + tables_as_markdown(notes, irt_sections(result))
    return tables_as_text(notes, irt_sections(result))
