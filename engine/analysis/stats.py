"""Statistics with numpy only: clustered bootstrap, McNemar's exact test, row-wise correlation.

Repeats of a test are not independent draws, so every bootstrap here resamples *tests* (clusters),
never rows: a model's attempts at one test move together.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_RESAMPLES = 1000
DEFAULT_LEVEL = 0.95
# Upper bound on the (resamples × tests) weight block held in memory at once (~40 MB of float64).
_BLOCK_CELLS = 5_000_000


def _resample_weights(rng: np.random.Generator, n_clusters: int, n_resamples: int) -> np.ndarray:
    """Counts of how often each cluster is drawn, one row per bootstrap resample."""
    draws = rng.integers(0, n_clusters, size=(n_resamples, n_clusters))
    offsets = (np.arange(n_resamples) * n_clusters)[:, None]
    counts = np.bincount((draws + offsets).ravel(), minlength=n_resamples * n_clusters)
    return counts.reshape(n_resamples, n_clusters).astype("float64")


def cluster_bootstrap_means(
    values: np.ndarray,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> np.ndarray:
    """Bootstrap distribution of column means, resampling rows (tests) with replacement.

    Each column is one model; NaN marks a test the model has no score for, so each model's mean is over
    the resampled tests it ran. Implemented as a weights × values matrix product, so 20 models × 5,000
    tests × 1,000 resamples is one BLAS call per block rather than a Python loop.

    Args:
        values: (n_tests × n_columns) per-test means; NaN for missing.
        resamples: Number of bootstrap resamples.
        seed: Seed of the numpy generator (results are reproducible).

    Returns:
        (resamples × n_columns) resampled means; NaN where a resample held none of a column's tests.
    """
    values = np.asarray(values, dtype="float64")
    if values.ndim == 1:
        values = values[:, None]
    n, k = values.shape
    if n == 0:
        return np.full((resamples, k), np.nan)
    present = ~np.isnan(values)
    filled = np.where(present, values, 0.0)
    mask = present.astype("float64")
    rng = np.random.default_rng(seed)
    out = np.empty((resamples, k))
    block = max(1, _BLOCK_CELLS // n)
    for start in range(0, resamples, block):
        count = min(block, resamples - start)
        weights = _resample_weights(rng, n, count)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:start + count] = (weights @ filled) / (weights @ mask)
    return out


def percentile_ci(samples: np.ndarray, level: float = DEFAULT_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over the first axis, ignoring NaN resamples.

    Args:
        samples: (resamples × k) bootstrap draws.
        level: Coverage, e.g. 0.95.

    Returns:
        (low, high) arrays of length k; NaN where a column has no finite draw.
    """
    alpha = (1.0 - level) / 2.0
    samples = np.asarray(samples, dtype="float64")
    if samples.ndim == 1:
        samples = samples[:, None]
    low = np.full(samples.shape[1], np.nan)
    high = np.full(samples.shape[1], np.nan)
    finite = np.isfinite(samples).any(axis=0)
    if finite.any():
        q = np.nanquantile(samples[:, finite], [alpha, 1.0 - alpha], axis=0)
        low[finite], high[finite] = q[0], q[1]
    return low, high


def bootstrap_mean_ci(
    values: np.ndarray, *, resamples: int = DEFAULT_RESAMPLES, level: float = DEFAULT_LEVEL, seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of one vector of per-test values (NaN ignored).

    Args:
        values: Per-test values, e.g. paired score differences.
        resamples: Number of resamples.
        level: Coverage.
        seed: Generator seed.
    """
    values = np.asarray(values, dtype="float64")
    values = values[~np.isnan(values)]
    if values.size == 0:
        return math.nan, math.nan
    low, high = percentile_ci(cluster_bootstrap_means(values, resamples=resamples, seed=seed), level)
    return float(low[0]), float(high[0])


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs against p = 1/2.

    Computed with exact integer arithmetic (no scipy at run time): p = min(1, 2·P[X ≤ min(b, c)]) with
    X ~ Binomial(b + c, 1/2), which equals scipy.stats.binomtest(b, b + c, 0.5).pvalue.

    Args:
        only_a: Pairs where only the first model passed.
        only_b: Pairs where only the second model passed.

    Returns:
        The p-value; 1.0 when there is no discordant pair.
    """
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    if 2 * k == n:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1))
    # Exact big-integer ratio, rounded once (Python's int / int): no float underflow on the way.
    return min(1.0, (2 * tail) / (1 << n))


def rowwise_corr(x: np.ndarray, y: np.ndarray, min_count: int = 3) -> np.ndarray:
    """Pearson correlation of each row of x with the same row of y, over columns where both are finite.

    Args:
        x: (rows × cols).
        y: (rows × cols).
        min_count: Rows with fewer paired values than this get NaN (two points always correlate ±1).

    Returns:
        One correlation per row; NaN when too few values or a row has no variance.
    """
    both = np.isfinite(x) & np.isfinite(y)
    n = both.sum(axis=1).astype("float64")
    xf = np.where(both, x, 0.0)
    yf = np.where(both, y, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx = xf.sum(axis=1) / n
        my = yf.sum(axis=1) / n
        dx = np.where(both, xf - mx[:, None], 0.0)
        dy = np.where(both, yf - my[:, None], 0.0)
        sxy = (dx * dy).sum(axis=1)
        sxx = (dx * dx).sum(axis=1)
        syy = (dy * dy).sum(axis=1)
        r = sxy / np.sqrt(sxx * syy)
    r[(n < min_count) | (sxx <= 1e-12) | (syy <= 1e-12)] = np.nan
    return np.clip(r, -1.0, 1.0)
