"""Do the models' pass rates on one test differ beyond sampling noise? A permutation test per test.

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

Tests with more than `MAX_EXACT_ATTEMPTS` attempts, where the full table grows large, take one of three
paths, chosen per test from its counts in this order:

1. Pearson's chi-square distribution with k − 1 degrees of freedom when every expected count is at least 5
   (Cochran's rule: there the large-sample distribution is accurate);
2. the same exact computation restricted to the *minority* outcome when it is rare: with m = min(K, N − K)
   at most `MAX_EXACT_MINORITY` (swapping pass and fail when passes are the majority, which keeps the order
   of T given K, since Σ (n_m − x_m)² / n_m = N − 2K + T), on the statistic Σ round(S·x_m(x_m − 1)/n_m)
   (T − K/n exactly when attempt counts are equal; x(x − 1) is even, so S = n/2 suffices for even n), the
   table needs only rows 0..m and columns up to the largest observed statistic, whatever N is;
3. otherwise a sequential Monte Carlo permutation p-value (Besag & Clifford 1991): resamples are drawn
   until h = `DEFAULT_EXCEEDANCES` of them reach the observed statistic or `DEFAULT_PERMUTATIONS` have been
   drawn. Stopped at the L-th resample by the h-th exceedance, p = h / L; at the cap with g < h exceedances,
   p = (g + 1) / (cap + 1), the fixed-count formula. Either way P(p ≤ a) ≤ a: the sequential p-value is as
   valid as the fixed-count one, and equal to it whenever the cap is reached (every p below ~h / cap).
"""

from __future__ import annotations

import numpy as np

MAX_EXACT_ATTEMPTS = 400  # N above this: the full DP table would pass ~1e6 cells
_MAX_SCALE_CELLS = 3_000  # upper bound on the integer statistic's range, which sets the scale S
# Above MAX_EXACT_ATTEMPTS, a sparse test (an expected count under 5) whose rarer outcome occurs at most this
# often is computed exactly on rows 0..m. With 50 models, "an expected count under 5" means m < 5·50 = 250 when
# attempt counts are equal.
MAX_EXACT_MINORITY = 300
# The minority DP's statistic range: the scale S is half the largest attempt count unless S·m would pass this.
_MAX_MINORITY_COLUMNS = 8_000
DEFAULT_PERMUTATIONS = 4000  # the cap of the sequential Monte Carlo (and the old fixed count)
DEFAULT_EXCEEDANCES = 100  # h of Besag & Clifford: stop after this many resamples as extreme as observed
_FIRST_BLOCK = 128  # resamples drawn at once, doubling while a test runs on


def _weights(n: int, share: float = 0.5) -> np.ndarray:
    """Binomial(n, share) probabilities of 0..n passes.

    Any share gives the same conditional distribution given the total (the factor share^K (1 − share)^(N−K)
    is common to a row); the minority path takes share near m / N so that its rows stay far from underflow.
    """
    from math import comb, lgamma, log

    if share == 0.5:
        return np.array([comb(n, x) for x in range(n + 1)], dtype="float64") / float(2**n)
    x = np.arange(n + 1)
    log_comb = np.array([lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1) for k in range(n + 1)])
    return np.exp(log_comb + x * log(share) + (n - x) * log(1.0 - share))


def _increments(n: int, scale: float, *, pairs: bool = False) -> np.ndarray:
    """The integer statistic's increment for 0..n passes out of n attempts: round(S·x²/n), or with `pairs`
    round(S·x(x − 1)/n) (the minority path's statistic: see `_exact`)."""
    x = np.arange(n + 1, dtype="float64")
    return np.rint(scale * x * (x - 1.0 if pairs else x) / n).astype("int64")


def _step(dist: np.ndarray, n: int, scale: float, *, max_rows: int | None = None, share: float = 0.5,
          ceiling: np.ndarray | None = None, cap: int | None = None) -> np.ndarray:
    """Add one model with n attempts to the (total passes × statistic) distribution.

    Args:
        dist: The distribution so far: rows are total passes, columns the integer statistic.
        n: The model's attempts.
        scale: The statistic's scale S.
        max_rows: The minority path: keep rows 0..max_rows − 1 only (totals above are never asked for; a
            total only grows), with the arguments below.
        share: The pass chance of the weights (see `_weights`).
        ceiling: ceiling[j] ≥ the largest statistic a table with j passes reaches: columns past it hold no
            mass in row j and are not added.
        cap: Column `cap` holds all the mass at statistic ≥ cap (no p-value asks beyond it; the statistic
            only grows, so the mass stays there).
    """
    pairs = max_rows is not None
    inc = _increments(n, scale, pairs=pairs)
    w = _weights(n, share)
    rows, cols = dist.shape
    if max_rows is None:
        out = np.zeros((rows + n, cols + int(inc[-1])))
        for x in range(n + 1):
            out[x:x + rows, inc[x]:inc[x] + cols] += w[x] * dist
        return out
    out_rows = min(rows + n, max_rows)
    out_cols = cols + int(inc[min(n, out_rows - 1)])
    if ceiling is not None:
        out_cols = min(out_cols, int(ceiling[out_rows - 1]) + 1)
    if cap is not None:
        out_cols = min(out_cols, cap + 1)
    out = np.zeros((out_rows, out_cols))
    # Row blocks: the mass of row j lies in columns ≤ ceiling[j] (a wedge), so each block adds only its
    # part of the table.
    block = 32
    for x in range(min(n, out_rows - 1) + 1):
        shift = int(inc[x])
        for start in range(0, min(rows, out_rows - x), block):
            stop = min(start + block, rows, out_rows - x)
            width = cols if ceiling is None else min(cols, int(ceiling[stop - 1]) + 1)
            keep = min(width, out_cols - shift)  # source columns landing below the cap column
            if cap is not None:
                keep = min(keep, cap - shift)
            if keep > 0:
                out[start + x:stop + x, shift:shift + keep] += w[x] * dist[start:stop, :keep]
            if cap is not None and width > max(keep, 0):
                out[start + x:stop + x, cap] += w[x] * dist[start:stop, max(keep, 0):width].sum(axis=1)
    return out


METHODS = ("exact", "exact-minority", "chi-square", "monte-carlo")


def p_value_methods(passes: np.ndarray, attempts: np.ndarray) -> np.ndarray:
    """Which computation `homogeneity_p_values` uses for each test (the rule of the module docstring).

    Args:
        passes: (n_tests × n_models) passed attempts.
        attempts: (n_tests × n_models) scored attempts.

    Returns:
        One of `METHODS` per test, or "" where no test is made (under two models, or every attempt alike).
    """
    x, n = _counts(passes, attempts)
    return _route(x, n)


def _counts(passes: np.ndarray, attempts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.rint(np.nan_to_num(np.asarray(passes, dtype="float64"))).astype("int64")
    n = np.rint(np.nan_to_num(np.asarray(attempts, dtype="float64"))).astype("int64")
    return x, n


def _route(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    method = np.full(len(x), "", dtype=object)
    models = (n > 0).sum(axis=1)
    total_n, total_x = n.sum(axis=1), x.sum(axis=1)
    todo = np.nonzero((models >= 2) & (total_x > 0) & (total_x < total_n))[0]
    small = total_n[todo] <= MAX_EXACT_ATTEMPTS
    method[todo[small]] = "exact"
    big = todo[~small]
    if big.size:
        _, _, least = _pearson(x[big], n[big])
        minority = np.minimum(total_x[big], total_n[big] - total_x[big])
        method[big] = np.where(least >= 5.0, "chi-square",
                               np.where(minority <= MAX_EXACT_MINORITY, "exact-minority", "monte-carlo"))
    return method


def homogeneity_p_values(
    passes: np.ndarray,
    attempts: np.ndarray,
    *,
    permutations: int = DEFAULT_PERMUTATIONS,
    exceedances: int = DEFAULT_EXCEEDANCES,
    seed: int = 0,
) -> np.ndarray:
    """Conditional p-value, per test, of "every model has the same pass chance on this test".

    Exact where the counts allow it, chi-square where Cochran's rule holds, sequential Monte Carlo otherwise
    (`p_value_methods` says which, per test; the module docstring gives the rule).

    Args:
        passes: (n_tests × n_models) passed attempts.
        attempts: (n_tests × n_models) scored attempts; 0 means the model has no data on the test.
        permutations: The Monte Carlo cap: at most this many resamples per test.
        exceedances: Besag and Clifford's h: a test stops once this many resamples are as extreme as the
            observed table. `exceedances > permutations` gives the fixed-count test (every test draws the cap).
        seed: Generator seed of the resamples.

    Returns:
        One p-value per test; NaN when fewer than two models have scored attempts. 1.0 when every
        attempt passed or every attempt failed (no table is more extreme).
    """
    x, n = _counts(passes, attempts)
    out = np.full(x.shape[0], np.nan)
    models = (n > 0).sum(axis=1)
    total_n, total_x = n.sum(axis=1), x.sum(axis=1)
    out[(models >= 2) & ((total_x == 0) | (total_x == total_n))] = 1.0
    method = _route(x, n)
    exact = np.nonzero(method == "exact")[0]
    if exact.size:
        out[exact] = _exact(x[exact], n[exact])
    minority = np.nonzero(method == "exact-minority")[0]
    if minority.size:
        out[minority] = _exact(x[minority], n[minority], minority=True)
    chi = np.nonzero(method == "chi-square")[0]
    if chi.size:
        statistic, df, _ = _pearson(x[chi], n[chi])
        out[chi] = [chi2_sf(float(v), int(d)) for v, d in zip(statistic, df, strict=True)]
    mc = np.nonzero(method == "monte-carlo")[0]
    if mc.size:
        out[mc] = _monte_carlo(x[mc], n[mc], permutations, seed, exceedances=exceedances)
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


def _exact(x: np.ndarray, n: np.ndarray, *, minority: bool = False) -> np.ndarray:
    """Exact p-values by the dynamic programme over models, tests sharing attempt multisets sharing work.

    Args:
        x: (tests × models) passes.
        n: (tests × models) attempts.
        minority: Count the rarer outcome (swap pass and fail where passes are the majority) and keep only
            rows 0..max m and the statistic's reachable wedge: the path for large sparse tests.
    """
    if minority:
        flip = 2 * x.sum(axis=1) > n.sum(axis=1)
        x = np.where(flip[:, None], n - x, x)
    k_obs = x.sum(axis=1)
    max_n = int(n.max())
    max_rows = int(k_obs.max()) + 1
    if minority:
        # The statistic Σ x(x − 1)/n_m: with equal attempt counts it is T − K/n, the same order as T given K,
        # and x(x − 1) is even, so S = n/2 (n even; n when odd) keeps it exact: for even n, half the columns
        # of Σ x²/n (the DP twice as fast).
        natural = max_n // 2 if max_n % 2 == 0 else max_n
        scale = float(max(1, min(natural, _MAX_MINORITY_COLUMNS // max_rows)))
        models = int((n > 0).sum(axis=1).max())
        # u ≤ S·j + ½ per model: x(x − 1)/n ≤ x, and each increment rounds by at most ½.
        ceiling = np.floor(scale * np.arange(max_rows) + 0.5 * models).astype("int64")
        share = float(np.clip(np.median(k_obs / n.sum(axis=1)), 1e-3, 0.5))
    else:
        biggest = int(n.sum(axis=1).max())
        scale = float(max(1, min(max_n, _MAX_SCALE_CELLS // max(biggest, 1))))
        ceiling, share = None, 0.5
    # Observed statistic per test, from the same rounded increments the DP uses.
    u_obs = np.zeros(len(x), dtype="int64")
    for size in np.unique(n[n > 0]):
        inc = _increments(int(size), scale, pairs=minority)
        mask = n == size
        u_obs += np.where(mask, inc[np.where(mask, x, 0)], 0).sum(axis=1)
    cap = int(u_obs.max()) if minority else None
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
            stack.append((prefix + (nxt,), _step(dist, nxt, scale, max_rows=max_rows if minority else None,
                                                 share=share, ceiling=ceiling, cap=cap)))
        final = stack[-1][1]
        idx = np.asarray(groups[key])
        rows = final[k_obs[idx]]
        tail = np.cumsum(rows[:, ::-1], axis=1)[:, ::-1]
        cols = np.minimum(u_obs[idx], final.shape[1] - 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[idx] = np.where(u_obs[idx] < final.shape[1], tail[np.arange(len(idx)), cols], 0.0) / tail[:, 0]
    # The observed table is itself in the tail, so p > 0; a tail that underflowed reads as the least float.
    return np.clip(out, np.finfo("float64").tiny, 1.0)


def _null_statistics(rng: np.random.Generator, sizes: np.ndarray, good: int, draws: int) -> np.ndarray:
    """T = Σ x²/n for `draws` permutations of the outcomes: sequential hypergeometric draws, models in turn."""
    left_good = np.full(draws, good)
    left_bad = np.full(draws, int(sizes.sum()) - good)
    t_null = np.zeros(draws)
    for size in sizes[:-1]:
        draw = rng.hypergeometric(left_good, left_bad, int(size)) if left_good.any() else np.zeros(draws, "int64")
        t_null += draw.astype("float64") ** 2 / size
        left_good, left_bad = left_good - draw, left_bad - (size - draw)
    t_null += left_good.astype("float64") ** 2 / sizes[-1]
    return t_null


def _monte_carlo(x: np.ndarray, n: np.ndarray, permutations: int, seed: int, *,
                 exceedances: int = DEFAULT_EXCEEDANCES) -> np.ndarray:
    """Besag-Clifford sequential permutation p-values, one test after another, resamples in doubling blocks.

    Resamples are drawn until `exceedances` (h) of them are as extreme as observed, or `permutations` (the cap)
    have been drawn: p = h / L at the L-th resample, else (g + 1) / (cap + 1). A block may run past L; the
    resamples after L are discarded, so the p-value is the one of drawing one resample at a time.
    """
    rng = np.random.default_rng(seed)
    out = np.empty(len(x))
    for i in range(len(x)):
        sizes = n[i][n[i] > 0]
        obs = x[i][n[i] > 0]
        t_obs = float((obs.astype("float64") ** 2 / sizes).sum()) - 1e-9  # ties count as extreme
        good = int(obs.sum())
        drawn = hits = 0
        block = _FIRST_BLOCK
        out[i] = np.nan
        while drawn < permutations:
            size = min(block, permutations - drawn)
            running = hits + np.cumsum(_null_statistics(rng, sizes, good, size) >= t_obs)
            if running[-1] >= exceedances:
                stop = drawn + int(np.searchsorted(running, exceedances)) + 1
                out[i] = exceedances / stop
                break
            hits, drawn, block = int(running[-1]), drawn + size, block * 2
        else:
            out[i] = (hits + 1) / (permutations + 1)
    return out
