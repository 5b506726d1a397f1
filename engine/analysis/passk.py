"""pass@k and pass^k from repeated attempts, per model and per suite.

For one (test, model) with n scored attempts of which c passed, and k ≤ n:

- pass@k = 1 − C(n − c, k) / C(n, k): the unbiased estimate of the chance that at least one of k attempts
  passes (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1);
- pass^k = C(c, k) / C(n, k): the unbiased estimate of the chance that all k attempts pass (τ-bench, Yao
  et al. 2024): a reliability measure that falls as k grows.

Both are averaged over tests with the same weight per test (like every mean here). A (test, model) with
fewer than k scored attempts has no unbiased estimate at k and is left out of that k (counted in
`cells_short`). Intervals are the cluster-robust t-intervals of `stats.cluster_t_interval`.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb
from typing import TYPE_CHECKING

import numpy as np

from engine.analysis.cells import Cells, build_cells
from engine.analysis.stats import DEFAULT_LEVEL, cluster_t_interval

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_KS = (1, 2, 3, 5, 10, 20, 50, 100)
ALL_SUITES = "(all)"


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k per cell; NaN where n < k or n is 0.

    Computed as 1 − C(n−c, k) / C(n, k) (Chen et al. 2021), the ratios tabulated once per attempt count.

    Args:
        n: Scored attempts per cell.
        c: Passed attempts per cell.
        k: Attempts drawn, at least 1.
    """
    # C(f, k) / C(n, k) for f = n - c failures is the chance that all k drawn attempts fail (0 when f < k).
    return 1.0 - _draw_ratio(n, np.asarray(n, dtype="int64") - np.asarray(c, dtype="int64"), k)


def pass_hat_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass^k (all k attempts pass) per cell: C(c, k) / C(n, k); NaN where n < k or n is 0.

    Args:
        n: Scored attempts per cell.
        c: Passed attempts per cell.
        k: Attempts drawn, at least 1.
    """
    return _draw_ratio(n, c, k)


def _draw_ratio(n: np.ndarray, m: np.ndarray, k: int) -> np.ndarray:
    """C(m, k) / C(n, k) per cell: the chance that k attempts drawn from n all come from m marked ones.

    NaN where n < k or n is 0. Each ratio is computed once per (attempt count, m) the cells hold.
    """
    n = np.asarray(n, dtype="int64")
    m = np.asarray(m, dtype="int64")
    out = np.full(n.shape, np.nan)
    ok = (n >= k) & (n > 0)
    for size in np.unique(n[ok]):
        size = int(size)
        mask = ok & (n == size)
        marked, where = np.unique(m[mask], return_inverse=True)
        whole = comb(size, k)
        out[mask] = np.array([comb(int(j), k) / whole for j in marked])[where]
    return out


def default_ks(max_attempts: int) -> list[int]:
    """k values shown by default: 1, 2, 3, 5, 10, 20, 50, 100 up to the attempts, and the attempts themselves."""
    return sorted({k for k in DEFAULT_KS if k <= max_attempts} | ({max_attempts} if max_attempts >= 1 else set()))


def pass_k_table(
    df: pd.DataFrame | None = None,
    *,
    ks: Sequence[int] | None = None,
    level: float = DEFAULT_LEVEL,
    cells: Cells | None = None,
) -> pd.DataFrame:
    """pass@k and pass^k per model, per suite and over all suites, for each k.

    Args:
        df: Results rows (from `load`); may be None when `cells` is given.
        ks: The k values; default `default_ks(largest attempt count)`. A k above every cell's attempts
            gives no row.
        level: Interval coverage.
        cells: A grid already built from `df`.

    Returns:
        Columns: model, suite ("(all)" for every suite together), k, tests (cells with ≥ k attempts),
        cells_short (cells with fewer than k attempts, left out), pass_at_k, pass_at_k_lo, pass_at_k_hi,
        pass_hat_k, pass_hat_k_lo, pass_hat_k_hi. Sorted by model, suite ("(all)" first), k.
    """
    import pandas as pd

    if cells is None:
        if df is None:
            raise ValueError("pass_k_table: give results rows or cells")
        cells = build_cells(df)
    columns = ["model", "suite", "k", "tests", "cells_short", "pass_at_k", "pass_at_k_lo", "pass_at_k_hi",
               "pass_hat_k", "pass_hat_k_lo", "pass_hat_k_hi"]
    n = np.rint(cells.n_scored).astype("int64")
    c = np.rint(cells.n_passed).astype("int64")
    if not n.size or n.max() == 0:
        return pd.DataFrame(columns=columns)
    chosen = sorted({int(k) for k in (ks if ks is not None else default_ks(int(n.max()))) if int(k) >= 1})
    suites = cells.items["suite"].astype(str).to_numpy()
    groups = [(ALL_SUITES, np.ones(len(suites), bool))]
    if len(set(suites)) > 1:
        groups += [(s, suites == s) for s in sorted(set(suites))]
    rows = []
    for k in chosen:
        at_k, hat_k = pass_at_k(n, c, k), pass_hat_k(n, c, k)
        for suite, mask in groups:
            at = cluster_t_interval(at_k[mask], cells.cluster[mask], level=level, bounds=(0.0, 1.0))
            hat = cluster_t_interval(hat_k[mask], cells.cluster[mask], level=level, bounds=(0.0, 1.0))
            short = ((n[mask] > 0) & (n[mask] < k)).sum(axis=0)
            for m, model in enumerate(cells.models):
                if at.items[m] == 0:
                    continue
                rows.append([model, suite, k, int(at.items[m]), int(short[m]), at.mean[m], at.lo[m], at.hi[m],
                             hat.mean[m], hat.lo[m], hat.hi[m]])
    out = pd.DataFrame(rows, columns=columns)
    out["_all"] = out["suite"] != ALL_SUITES
    return out.sort_values(["model", "_all", "suite", "k"], kind="stable").drop(columns="_all").reset_index(drop=True)
