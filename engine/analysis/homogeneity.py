"""Do the models' pass rates on one test differ beyond sampling noise? An exact test per test.

For one test, each model m has n_m scored attempts of which x_m passed: a k × 2 table (models × pass/fail).
Under the null hypothesis that every model has the same pass chance on this test, and given the table's
margins (attempts per model, total passes K), the table has the multivariate hypergeometric distribution

    P(x_1, ..., x_k | K) = Π C(n_m, x_m) / C(N, K)

whatever the common pass chance is: this is the permutation distribution of the pass/fail outcomes across
the test's attempts. The statistic is Pearson's chi-square, which for fixed margins is an increasing
function of T = Σ x_m² / n_m, and the p-value is P(T* ≥ T_obs | margins), computed exactly.

How: T is made integer as U = Σ round(S · x_m² / n_m) with one scale S (the largest n_m when it keeps the
table small: with equal attempt counts U is then exactly S/n · T). Any statistic gives an exact test as long
as the observed and the null values use the same one, so the rounding costs a little power, never validity.
The joint distribution of (total passes, U) under the product of Binomial(n_m, ½) weights is built by
dynamic programming over the models (one shifted add per possible x_m), and conditioning on the observed
total K removes the ½. The distribution depends only on the multiset of attempt counts, so tests sharing one
(the common case: every model ran every test `repeat` times) share one computation, and sorted multisets
share their prefixes (a depth-first walk keeps only the current prefix's table).

Tests whose table would be too large for the exact computation (more than `MAX_EXACT_ATTEMPTS` attempts)
use Pearson's chi-square distribution with k − 1 degrees of freedom when every expected count is at least 5
(Cochran's rule: there the large-sample distribution is accurate), and otherwise a Monte Carlo permutation
p-value, (1 + #{T* ≥ T_obs}) / (1 + R), which is valid for any R.
"""

from __future__ import annotations

import numpy as np

MAX_EXACT_ATTEMPTS = 400  # N above this: Monte Carlo (the DP table would pass ~1e6 cells)
_MAX_SCALE_CELLS = 3_000  # upper bound on the integer statistic's range, which sets the scale S
DEFAULT_PERMUTATIONS = 4000


def _weights(n: int) -> np.ndarray:
    """Binomial(n, ½) probabilities of 0..n passes."""
    from math import comb

    return np.array([comb(n, x) for x in range(n + 1)], dtype="float64") / float(2**n)


def _increments(n: int, scale: float) -> np.ndarray:
    """The integer statistic's increment for 0..n passes out of n attempts."""
    x = np.arange(n + 1, dtype="float64")
    return np.rint(scale * x * x / n).astype("int64")


def _step(dist: np.ndarray, n: int, scale: float) -> np.ndarray:
    """Add one model with n attempts to the (total passes × statistic) distribution."""
    inc = _increments(n, scale)
    w = _weights(n)
    rows, cols = dist.shape
    out = np.zeros((rows + n, cols + int(inc[-1])))
    for x in range(n + 1):
        out[x:x + rows, inc[x]:inc[x] + cols] += w[x] * dist
    return out


def _tail_table(dist: np.ndarray) -> np.ndarray:
    """P(U ≥ u | total = K) for every (K, u) of a final distribution."""
    tail = np.cumsum(dist[:, ::-1], axis=1)[:, ::-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return tail / tail[:, :1]


def homogeneity_p_values(
    passes: np.ndarray,
    attempts: np.ndarray,
    *,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> np.ndarray:
    """Exact conditional p-value, per test, of "every model has the same pass chance on this test".

    Args:
        passes: (n_tests × n_models) passed attempts.
        attempts: (n_tests × n_models) scored attempts; 0 means the model has no data on the test.
        permutations: Monte Carlo resamples for tests above `MAX_EXACT_ATTEMPTS` attempts.
        seed: Generator seed for those.

    Returns:
        One p-value per test; NaN when fewer than two models have scored attempts. 1.0 when every
        attempt passed or every attempt failed (no table is more extreme).
    """
    x = np.rint(np.nan_to_num(np.asarray(passes, dtype="float64"))).astype("int64")
    n = np.rint(np.nan_to_num(np.asarray(attempts, dtype="float64"))).astype("int64")
    n_tests = x.shape[0]
    out = np.full(n_tests, np.nan)
    models = (n > 0).sum(axis=1)
    total_n, total_x = n.sum(axis=1), x.sum(axis=1)
    testable = models >= 2
    trivial = testable & ((total_x == 0) | (total_x == total_n))
    out[trivial] = 1.0
    todo = np.nonzero(testable & ~trivial)[0]
    exact = todo[total_n[todo] <= MAX_EXACT_ATTEMPTS]
    if exact.size:
        out[exact] = _exact(x[exact], n[exact])
    big = todo[total_n[todo] > MAX_EXACT_ATTEMPTS]
    if big.size:
        statistic, df, min_expected = _pearson(x[big], n[big])
        large = min_expected >= 5.0
        out[big[large]] = [chi2_sf(float(v), int(d)) for v, d in zip(statistic[large], df[large], strict=True)]
        if (~large).any():
            out[big[~large]] = _monte_carlo(x[big[~large]], n[big[~large]], permutations, seed)
    return out


def _pearson(x: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pearson's chi-square of each models × pass/fail table, its degrees of freedom, the least expected count."""
    present = n > 0
    total_n = n.sum(axis=1, keepdims=True).astype("float64")
    share = x.sum(axis=1, keepdims=True) / total_n
    expected_pass, expected_fail = n * share, n * (1.0 - share)
    with np.errstate(invalid="ignore", divide="ignore"):
        terms = np.where(present, (x - expected_pass) ** 2 / expected_pass
                         + ((n - x) - expected_fail) ** 2 / expected_fail, 0.0)
    least = np.where(present, np.minimum(expected_pass, expected_fail), np.inf).min(axis=1)
    return terms.sum(axis=1), present.sum(axis=1) - 1, least


def chi2_sf(value: float, df: int) -> float:
    """P(X ≥ value) for a chi-square variable with an integer number of degrees of freedom (closed form).

    Even df: e^(−v/2) Σ_{j<df/2} (v/2)^j / j!; odd df: erfc(√(v/2)) + e^(−v/2) Σ_{j=1}^{(df−1)/2}
    (v/2)^(j−½) / Γ(j + ½). Checked against scipy.stats.chi2.sf in tests/analysis/test_exact.py.

    Args:
        value: The statistic, ≥ 0.
        df: Degrees of freedom, ≥ 1.
    """
    import math

    half = value / 2.0
    if df % 2 == 0:
        term, total = 1.0, 0.0
        for j in range(df // 2):
            total += term
            term *= half / (j + 1)
        return min(1.0, math.exp(-half) * total)
    term, total = math.sqrt(half) / math.gamma(1.5), 0.0
    for j in range(1, (df - 1) // 2 + 1):
        total += term
        term *= half / (j + 0.5)
    return min(1.0, math.erfc(math.sqrt(half)) + math.exp(-half) * total)


def _exact(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Exact p-values for tests whose attempt multisets keep the DP small."""
    max_n = int(n.max())
    biggest = int(n.sum(axis=1).max())
    scale = float(max(1, min(max_n, _MAX_SCALE_CELLS // max(biggest, 1))))
    # Observed statistic per test, from the same rounded increments the DP uses.
    u_obs = np.zeros(len(x), dtype="int64")
    for size in np.unique(n[n > 0]):
        inc = _increments(int(size), scale)
        mask = n == size
        u_obs += np.where(mask, inc[np.where(mask, x, 0)], 0).sum(axis=1)
    k_obs = x.sum(axis=1)
    # Multisets of attempt counts, largest first, so that sorted multisets share prefixes.
    keys = [tuple(sorted((int(v) for v in row if v > 0), reverse=True)) for row in n]
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out = np.empty(len(x))
    stack: list[tuple[tuple[int, ...], np.ndarray]] = [((), np.ones((1, 1)))]
    for key in sorted(groups):
        while len(stack[-1][0]) > len(key) or stack[-1][0] != key[:len(stack[-1][0])]:
            stack.pop()
        while len(stack[-1][0]) < len(key):
            prefix, dist = stack[-1]
            nxt = key[len(prefix)]
            stack.append((prefix + (nxt,), _step(dist, nxt, scale)))
        tail = _tail_table(stack[-1][1])
        idx = np.asarray(groups[key])
        out[idx] = tail[k_obs[idx], u_obs[idx]]
    return np.clip(out, 0.0, 1.0)


def _monte_carlo(x: np.ndarray, n: np.ndarray, permutations: int, seed: int) -> np.ndarray:
    """Permutation p-values by sequential hypergeometric draws (models in turn), vectorised over resamples."""
    rng = np.random.default_rng(seed)
    out = np.empty(len(x))
    for i in range(len(x)):
        sizes = n[i][n[i] > 0]
        obs = x[i][n[i] > 0]
        t_obs = float((obs.astype("float64") ** 2 / sizes).sum())
        good = np.full(permutations, int(obs.sum()))
        bad = np.full(permutations, int(sizes.sum() - obs.sum()))
        t_null = np.zeros(permutations)
        for size in sizes[:-1]:
            draw = rng.hypergeometric(good, bad, int(size)) if good.any() else np.zeros(permutations, "int64")
            t_null += draw.astype("float64") ** 2 / size
            good, bad = good - draw, bad - (size - draw)
        t_null += good.astype("float64") ** 2 / sizes[-1]
        out[i] = (1 + int((t_null >= t_obs - 1e-9).sum())) / (1 + permutations)
    return out

