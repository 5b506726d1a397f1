"""Statistics with numpy only: cluster-robust t-intervals, Student's t quantile, McNemar's exact test,
Benjamini-Hochberg, row-wise correlation, and the clustered bootstrap.

Repeats and cases of a test are not independent draws, so every interval here is computed from *cluster*
totals (by default one cluster per (suite, test_id)), never from rows: a model's attempts at one test, and
the cases of one templated test, move together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

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


# Discordant pairs up to which McNemar's p-value is summed exactly in integers; past it the same tail is summed in
# floating point from an accurate log-probability (`_binomial_half_log_cdf`), which agrees with the integer sum to
# about 1e-13 relative (tests/analysis/test_stats.py) at a cost linear in the pairs instead of about cubic.
MCNEMAR_EXACT_PAIRS = 1_000


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs against p = 1/2.

    p = min(1, 2·P[X ≤ min(b, c)]) with X ~ Binomial(b + c, 1/2), which equals
    scipy.stats.binomtest(b, b + c, 0.5).pvalue. Up to `MCNEMAR_EXACT_PAIRS` discordant pairs the tail is a sum
    of big integers, rounded once; past it, a sum in floating point from Loader's saddle-point log-probability
    (docs/analysis.md, "Comparing two models"). No scipy at run time.

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
    if n > MCNEMAR_EXACT_PAIRS:
        return min(1.0, math.exp(math.log(2.0) + _binomial_half_log_cdf(k, n)))
    tail = sum(math.comb(n, i) for i in range(k + 1))
    # Exact big-integer ratio, rounded once (Python's int / int): no float underflow on the way.
    return min(1.0, (2 * tail) / (1 << n))


def _stirling_error(n: int) -> float:
    """log(n!) − log(√(2πn)·(n/e)^n), the error of Stirling's formula (Loader 2000; R's `stirlerr`)."""
    if n <= 15:
        return math.lgamma(n + 1.0) - (n + 0.5) * math.log(n) + n - 0.5 * math.log(2.0 * math.pi)
    s0, s1, s2, s3, s4 = 1.0 / 12, 1.0 / 360, 1.0 / 1260, 1.0 / 1680, 1.0 / 1188
    nn = float(n) * n
    if n > 500:
        return (s0 - s1 / nn) / n
    if n > 80:
        return (s0 - (s1 - s2 / nn) / nn) / n
    if n > 35:
        return (s0 - (s1 - (s2 - s3 / nn) / nn) / nn) / n
    return (s0 - (s1 - (s2 - (s3 - s4 / nn) / nn) / nn) / nn) / n


def _deviance_term(x: float, mean: float) -> float:
    """x·log(x / mean) + mean − x without cancellation near x = mean (Loader 2000; R's `bd0`)."""
    if abs(x - mean) < 0.1 * (x + mean):
        v = (x - mean) / (x + mean)
        total, term, v2 = (x - mean) * v, 2.0 * x * v, v * v
        for j in range(1, 1000):
            term *= v2
            step = total + term / (2 * j + 1)
            if step == total:
                break
            total = step
        return total
    return x * math.log(x / mean) + mean - x


def _binomial_half_log_pmf(x: int, n: int) -> float:
    """log P[X = x] for X ~ Binomial(n, 1/2), accurate to a few ulps whatever n (Loader's saddle point)."""
    if x in (0, n):
        return -n * math.log(2.0)
    half = n / 2.0
    exponent = (_stirling_error(n) - _stirling_error(x) - _stirling_error(n - x)
                - _deviance_term(x, half) - _deviance_term(n - x, half))
    return exponent - 0.5 * (math.log(2.0 * math.pi) + math.log(x) + math.log1p(-x / n))


def _binomial_half_log_cdf(k: int, n: int) -> float:
    """log P[X ≤ k] for X ~ Binomial(n, 1/2) and 2k < n.

    P[X = k] times Σ_{i ≤ k} P[X = i] / P[X = k], the ratios a running product of i / (n − i + 1) from i = k
    down, summed in blocks until a block adds nothing a float can hold (the ratios only shrink).
    """
    total, carry, top = 1.0, 1.0, k
    block = 4096
    while top > 0:
        i = np.arange(top, max(top - block, 0), -1, dtype="float64")
        ratios = carry * np.cumprod(i / (n - i + 1.0))
        total += float(ratios.sum())
        carry, top = float(ratios[-1]), top - len(i)
        if carry < total * 1e-17:
            break
    return _binomial_half_log_pmf(k, n) + math.log(total)


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


@lru_cache(maxsize=256)
def t_quantile(prob: float, df: int) -> float:
    """Quantile of Student's t with an integer number of degrees of freedom (no scipy at run time).

    The CDF has a closed form for integer df (Abramowitz & Stegun 26.7.3-4, a finite series in cos θ with
    θ = atan(t / √df)); the quantile is found by bisection to ~1e-13. Above 10,000 df the normal quantile
    is used (they agree to ~1e-4). Checked against scipy.stats.t.ppf in tests/analysis/test_stats.py.

    Args:
        prob: Lower-tail probability in (0, 1).
        df: Degrees of freedom, at least 1.

    Raises:
        ValueError: prob outside (0, 1) or df below 1.
    """
    from statistics import NormalDist

    if not 0.0 < prob < 1.0 or df < 1:
        raise ValueError(f"t_quantile({prob}, {df}): need 0 < prob < 1 and df >= 1")
    if df > 10_000:
        return NormalDist().inv_cdf(prob)
    if prob < 0.5:
        return -t_quantile(1.0 - prob, df)
    target = 2.0 * prob - 1.0  # P(|T| <= t)
    lo, hi = 0.0, 1.0
    while _t_central(hi, df) < target:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _t_central(mid, df) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def _t_central(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer df (A&S 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        term, total = math.cos(theta), 0.0
        for j in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * j) / (2 * j + 1)
        return (2.0 / math.pi) * (theta + s * total) if df > 1 else (2.0 / math.pi) * theta
    term, total = 1.0, 0.0
    for j in range(1, df // 2 + 1):
        total += term
        term *= c2 * (2 * j - 1) / (2 * j)
    return s * total


@dataclass(frozen=True)
class ClusterInterval:
    """Per-column means over items with t-intervals whose standard error is computed from cluster totals.

    Args:
        mean: Mean over present items (NaN when a column has none).
        lo: Lower bound (NaN below two clusters).
        hi: Upper bound.
        se: Cluster-robust standard error.
        clusters: Clusters with at least one present item.
        items: Present items.
    """

    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    se: np.ndarray
    clusters: np.ndarray
    items: np.ndarray


def cluster_t_interval(
    values: np.ndarray,
    clusters: np.ndarray,
    *,
    level: float = DEFAULT_LEVEL,
    bounds: tuple[float, float] | None = None,
) -> ClusterInterval:
    """Mean of each column over its present items, with a cluster-robust t-interval.

    The mean is a ratio (sum over clusters of item values / number of items), so its standard error is
    the linearised one survey statistics uses for cluster samples: with cluster totals y_c, sizes m_c,
    G clusters and mean r, se² = G / (G − 1) · Σ (y_c − r·m_c)² / (Σ m_c)². With equal cluster sizes this is
    exactly the one-sample t-interval over cluster means; the interval is mean ± t(G − 1) · se. Items of one
    cluster (the cases of one templated test, say) share whatever makes them easy or hard, so treating them
    as independent would give intervals that are too narrow.

    When `bounds` is given and every cluster sits at one bound (a model passes every test), the t-interval
    would have zero width; the exact binomial (Clopper-Pearson) interval over clusters is used instead:
    [(α/2)^(1/G), 1] at the upper bound, and its mirror at the lower one.

    Args:
        values: (n_items,) or (n_items × n_columns); NaN marks an item a column has no value for.
        clusters: (n_items,) integer cluster code of each item.
        level: Coverage, e.g. 0.95.
        bounds: The values' natural range, e.g. (0, 1); intervals are clipped to it.

    Returns:
        Arrays of length n_columns.
    """
    values = np.asarray(values, dtype="float64")
    if values.ndim == 1:
        values = values[:, None]
    codes = np.asarray(clusters, dtype="int64")
    n_clusters = int(codes.max()) + 1 if codes.size else 0
    k = values.shape[1]
    present = ~np.isnan(values)
    totals = np.zeros((n_clusters, k))
    sizes = np.zeros((n_clusters, k))
    np.add.at(totals, codes, np.where(present, values, 0.0))
    np.add.at(sizes, codes, present.astype("float64"))
    items = sizes.sum(axis=0)
    g = (sizes > 0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = totals.sum(axis=0) / items
        resid = totals - mean[None, :] * sizes
        var = g / (g - 1) * (resid**2).sum(axis=0) / items**2
    se = np.where(g >= 2, np.sqrt(np.maximum(var, 0.0)), np.nan)
    lo = np.full(k, np.nan)
    hi = np.full(k, np.nan)
    alpha = 1.0 - level
    for j in range(k):
        if g[j] < 2:
            continue
        t = t_quantile(1.0 - alpha / 2.0, int(g[j]) - 1)
        lo[j], hi[j] = mean[j] - t * se[j], mean[j] + t * se[j]
        if bounds is not None and se[j] <= 1e-12:
            cluster_means = totals[sizes[:, j] > 0, j] / sizes[sizes[:, j] > 0, j]
            edge = (alpha / 2.0) ** (1.0 / g[j])
            span = bounds[1] - bounds[0]
            if np.all(np.abs(cluster_means - bounds[1]) <= 1e-12):
                lo[j] = bounds[0] + edge * span
            elif np.all(np.abs(cluster_means - bounds[0]) <= 1e-12):
                hi[j] = bounds[1] - edge * span
    if bounds is not None:
        lo, hi = np.clip(lo, *bounds), np.clip(hi, *bounds)
    return ClusterInterval(mean=mean, lo=lo, hi=hi, se=se, clusters=g.astype("int64"), items=items.astype("int64"))


def benjamini_hochberg(p_values: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values); NaN entries stay NaN and are not counted.

    Rejecting every hypothesis with q ≤ α keeps the expected share of false discoveries among the
    rejections at or below α (independent or positively dependent tests).

    Args:
        p_values: Raw p-values.
    """
    def step_up(ranked: np.ndarray) -> np.ndarray:
        m = ranked.size
        return np.minimum(np.minimum.accumulate((ranked * m / np.arange(1, m + 1))[::-1])[::-1], 1.0)

    return _adjust_sorted(p_values, step_up)


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values; NaN entries stay NaN and are not counted.

    Rejecting every hypothesis with adjusted p ≤ α keeps the chance of *any* false rejection (the
    family-wise error rate) at or below α, under any dependence: stricter than Benjamini-Hochberg.

    Args:
        p_values: Raw p-values.
    """
    def step_down(ranked: np.ndarray) -> np.ndarray:
        m = ranked.size
        return np.maximum.accumulate(np.minimum(1.0, ranked * (m - np.arange(m))))

    return _adjust_sorted(p_values, step_down)


def _adjust_sorted(p_values: np.ndarray, adjust: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Apply `adjust` to the finite p-values in ascending order and put the results back in place (NaN stays)."""
    p = np.asarray(p_values, dtype="float64")
    out = np.full(p.shape, np.nan)
    finite = np.isfinite(p)
    if not finite.any():
        return out
    order = np.argsort(p[finite], kind="stable")
    adjusted = np.empty(int(finite.sum()))
    adjusted[order] = adjust(p[finite][order])
    out[finite] = adjusted
    return out


# How the per-test p-values are adjusted for testing many tests at once (`per_test(correction=...)`).
CORRECTIONS = {"bh": benjamini_hochberg, "holm": holm}


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's r of the average ranks (ties share their mean rank).

    NaN with fewer than 3 pairs or when either side is constant. Equal to scipy.stats.spearmanr.
    """
    import pandas as pd

    x, y = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
    keep = ~(np.isnan(x) | np.isnan(y))
    if keep.sum() < 3:
        return float("nan")
    rx = pd.Series(x[keep]).rank().to_numpy()
    ry = pd.Series(y[keep]).rank().to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b: (concordant − discordant) / sqrt((n0 − ties x)(n0 − ties y)) over all pairs.

    O(n²) pairs (meant for models, not rows). NaN with fewer than 3 pairs or a constant side. Equal to
    scipy.stats.kendalltau (variant b).
    """
    x, y = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    if len(x) < 3:
        return float("nan")
    upper = np.triu_indices(len(x), 1)
    dx = np.sign(x[:, None] - x[None, :])[upper]
    dy = np.sign(y[:, None] - y[None, :])[upper]
    denominator = math.sqrt(float(np.count_nonzero(dx)) * float(np.count_nonzero(dy)))
    return float((dx * dy).sum() / denominator) if denominator else float("nan")
