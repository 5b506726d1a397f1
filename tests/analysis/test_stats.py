"""Statistics against known answers: McNemar, t quantiles, BH and the cluster t-interval vs scipy; bootstrap
coverage, row-wise correlation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.analysis.stats import (
    MCNEMAR_EXACT_PAIRS,
    benjamini_hochberg,
    bootstrap_mean_ci,
    cluster_bootstrap_means,
    cluster_t_interval,
    holm,
    mcnemar_exact,
    percentile_ci,
    rowwise_corr,
    t_quantile,
)


@pytest.mark.parametrize("only_a,only_b", [(0, 0), (0, 1), (3, 10), (10, 3), (7, 7), (0, 25), (120, 180), (400, 610)])
def test_mcnemar_matches_scipy_binomtest(only_a: int, only_b: int) -> None:
    # scipy is imported in the test, not at collection: ~1 CPU-s per pytest-xdist worker otherwise.
    from scipy.stats import binomtest

    expected = 1.0 if only_a + only_b == 0 else binomtest(only_a, only_a + only_b, 0.5).pvalue
    assert mcnemar_exact(only_a, only_b) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_mcnemar_textbook_value() -> None:
    # 1 vs 9 discordant pairs: 2 * (1 + 9) / 2**10 = 0.021484375 exactly.
    assert mcnemar_exact(1, 9) == 0.021484375


def _mcnemar_by_definition(only_a: int, only_b: int) -> float:
    """min(1, 2·P[X ≤ min(a, b)]), X ~ Binomial(a + b, 1/2), summed in integers (each C(n, i + 1) from C(n, i))."""
    n, k = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return 1.0
    tail, term = 0, 1
    for i in range(k + 1):
        tail += term
        term = term * (n - i) // (i + 1)
    return min(1.0, 2 * tail / (1 << n))


@settings(max_examples=300, deadline=None)
@given(n=st.integers(MCNEMAR_EXACT_PAIRS - 300, 4 * MCNEMAR_EXACT_PAIRS), share=st.floats(0.0, 1.0),
       near_half=st.booleans(), swap=st.booleans())
def test_mcnemar_agrees_with_its_definition_on_both_sides_of_the_switch(n: int, share: float, near_half: bool,
                                                                        swap: bool) -> None:
    # Past MCNEMAR_EXACT_PAIRS discordant pairs the tail is summed in floating point: it must give the integer
    # sum's value (and around n/2, where p is near 1 and most terms count, as well as in the far tail).
    k = round(n / 2 - share * 3 * n ** 0.5) if near_half else round(share * n / 2)
    k = max(0, min(k, n // 2))
    a, b = (k, n - k) if not swap else (n - k, k)
    expected = _mcnemar_by_definition(a, b)
    assert mcnemar_exact(a, b) == pytest.approx(expected, rel=1e-11, abs=1e-300)
    assert mcnemar_exact(a, b) == mcnemar_exact(b, a)


@pytest.mark.parametrize("only_a,only_b", [(4_900, 5_100), (49_400, 50_600), (499_000, 501_000), (1, 2_000_000),
                                           (40_000, 60_000), (2_000_000, 2_000_001)])
def test_mcnemar_far_past_the_switch_matches_scipy(only_a: int, only_b: int) -> None:
    from scipy.stats import binom

    expected = min(1.0, 2 * binom.cdf(min(only_a, only_b), only_a + only_b, 0.5))
    assert mcnemar_exact(only_a, only_b) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_cluster_bootstrap_covers_the_true_mean_at_about_the_nominal_rate() -> None:
    """Seeded Monte Carlo: clustered data (a per-test effect shared by its repeats); the CI built by
    resampling tests should cover the true mean ~95% of the time. Resampling rows would under-cover."""
    rng = np.random.default_rng(1234)
    true_mean, n_tests, repeats, trials = 0.6, 60, 5, 300
    covered_cluster = covered_rows = 0
    for trial in range(trials):
        effects = rng.normal(0, 0.2, n_tests)
        rows = true_mean + effects[:, None] + rng.normal(0, 0.1, (n_tests, repeats))
        lo, hi = bootstrap_mean_ci(rows.mean(axis=1), resamples=400, seed=trial)
        covered_cluster += lo <= true_mean <= hi
        lo_r, hi_r = bootstrap_mean_ci(rows.ravel(), resamples=400, seed=trial)
        covered_rows += lo_r <= true_mean <= hi_r
    rate = covered_cluster / trials
    assert 0.90 <= rate <= 0.99, rate
    # The naive row bootstrap treats repeats as independent and is visibly too narrow.
    assert covered_rows / trials < rate - 0.1


def test_bootstrap_handles_missing_cells_per_column() -> None:
    values = np.array([[1.0, np.nan], [0.0, 1.0], [1.0, 1.0]])
    draws = cluster_bootstrap_means(values, resamples=200, seed=0)
    assert draws.shape == (200, 2)
    # The second column only ever averages its present tests (both 1.0) -> 1 or NaN, never below.
    finite = draws[:, 1][np.isfinite(draws[:, 1])]
    assert np.all(finite == 1.0)
    low, high = percentile_ci(draws)
    assert 0.0 <= low[0] <= high[0] <= 1.0


def test_bootstrap_is_reproducible_with_a_seed_and_varies_without_the_same_one() -> None:
    values = np.random.default_rng(0).random((50, 3))
    a = cluster_bootstrap_means(values, resamples=100, seed=7)
    assert np.array_equal(a, cluster_bootstrap_means(values, resamples=100, seed=7))
    assert not np.array_equal(a, cluster_bootstrap_means(values, resamples=100, seed=8))


def test_empty_and_all_nan_give_nan_not_an_error() -> None:
    assert all(np.isnan(v) for v in bootstrap_mean_ci(np.array([np.nan, np.nan])))
    low, high = percentile_ci(cluster_bootstrap_means(np.full((4, 1), np.nan), resamples=20))
    assert np.isnan(low[0]) and np.isnan(high[0])


def test_rowwise_corr_matches_scipy_and_refuses_too_few_points() -> None:
    from scipy.stats import pearsonr

    rng = np.random.default_rng(3)
    x, y = rng.random((4, 6)), rng.random((4, 6))
    x[1, 2] = np.nan
    r = rowwise_corr(x, y)
    for i in range(4):
        keep = np.isfinite(x[i]) & np.isfinite(y[i])
        assert r[i] == pytest.approx(pearsonr(x[i, keep], y[i, keep]).statistic)
    two = rowwise_corr(np.array([[1.0, 0.0]]), np.array([[0.5, 0.2]]))
    flat = rowwise_corr(np.array([[1.0, 1.0, 1.0]]), np.array([[0.5, 0.2, 0.1]]))
    assert np.isnan(two[0]) and np.isnan(flat[0])


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10, 19, 30, 120, 999])
@pytest.mark.parametrize("prob", [0.975, 0.995, 0.9, 0.55, 0.025])
def test_t_quantile_matches_scipy(df: int, prob: float) -> None:
    from scipy.stats import t

    assert t_quantile(prob, df) == pytest.approx(t.ppf(prob, df), rel=1e-9, abs=1e-12)


def test_cluster_t_interval_equals_the_t_interval_over_cluster_means_with_equal_sizes() -> None:
    from scipy.stats import t

    rng = np.random.default_rng(5)
    values = rng.random((12 * 4, 2))  # 12 clusters of 4 items, 2 columns
    values[3, 1] = np.nan  # a missing item: column 1 becomes a ratio estimate
    clusters = np.repeat(np.arange(12), 4)
    got = cluster_t_interval(values, clusters, level=0.95)
    means = values[:, 0].reshape(12, 4).mean(axis=1)
    half = t.ppf(0.975, 11) * means.std(ddof=1) / np.sqrt(12)
    assert got.mean[0] == pytest.approx(means.mean())
    assert (got.lo[0], got.hi[0]) == pytest.approx((means.mean() - half, means.mean() + half))
    assert got.clusters.tolist() == [12, 12] and got.items.tolist() == [48, 47]
    assert got.mean[1] == pytest.approx(np.nanmean(values[:, 1]))  # the item mean, not the mean of cluster means


def test_cluster_t_interval_degenerate_cases() -> None:
    clusters = np.repeat(np.arange(10), 3)
    every = cluster_t_interval(np.ones(30), clusters, bounds=(0.0, 1.0))
    # All clusters pass: the exact binomial bound over 10 clusters, not a zero-width interval.
    assert every.hi[0] == 1.0 and every.lo[0] == pytest.approx(0.025 ** (1 / 10))
    none = cluster_t_interval(np.zeros(30), clusters, bounds=(0.0, 1.0))
    assert none.lo[0] == 0.0 and none.hi[0] == pytest.approx(1 - 0.025 ** (1 / 10))
    one = cluster_t_interval(np.array([1.0, 0.0]), np.array([0, 0]))
    assert one.mean[0] == 0.5 and np.isnan(one.lo[0]) and np.isnan(one.hi[0]) and one.clusters[0] == 1


def test_benjamini_hochberg_matches_scipy_and_keeps_nan() -> None:
    from scipy.stats import false_discovery_control

    p = np.random.default_rng(2).random(40) ** 3
    assert benjamini_hochberg(p) == pytest.approx(false_discovery_control(p))
    with_nan = benjamini_hochberg(np.array([0.01, np.nan, 0.04]))
    assert np.isnan(with_nan[1]) and with_nan[[0, 2]] == pytest.approx(false_discovery_control([0.01, 0.04]))


def test_holm_by_its_definition() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.005, np.nan, 0.5])
    finite = [0.005, 0.01, 0.03, 0.04, 0.5]  # sorted; m = 5
    steps = np.maximum.accumulate([min(1.0, (5 - i) * v) for i, v in enumerate(finite)])
    expected = dict(zip(finite, steps, strict=True))
    got = holm(p)
    assert np.isnan(got[4])
    assert [got[i] for i in (0, 1, 2, 3, 5)] == pytest.approx([expected[v] for v in (0.01, 0.04, 0.03, 0.005, 0.5)])
