"""The exact model × outcome test and pass@k / pass^k against brute-force enumeration."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from engine.analysis.homogeneity import MAX_EXACT_ATTEMPTS, chi2_sf, homogeneity_p_values, p_value_methods
from engine.analysis.passk import pass_at_k, pass_hat_k


def brute_force_p(passes: list[int], attempts: list[int]) -> float:
    """P(Σ x²/n ≥ observed | margins) by listing every table with the observed total."""
    total = sum(passes)
    observed = sum(x * x / n for x, n in zip(passes, attempts, strict=True))
    tail = weight = 0
    for table in itertools.product(*(range(n + 1) for n in attempts)):
        if sum(table) != total:
            continue
        w = math.prod(math.comb(n, x) for x, n in zip(table, attempts, strict=True))
        weight += w
        if sum(x * x / n for x, n in zip(table, attempts, strict=True)) >= observed - 1e-9:
            tail += w
    return tail / weight


def test_exact_p_values_equal_brute_force_enumeration() -> None:
    rng = np.random.default_rng(11)
    cases = [([3, 0], [3, 3]), ([4, 4, 0, 0], [4, 4, 4, 4]), ([1, 2, 3], [3, 3, 3]), ([5, 0, 2, 1, 4], [5] * 5)]
    for _ in range(40):
        k, n = int(rng.integers(2, 5)), int(rng.integers(1, 6))
        cases.append(([int(rng.integers(0, n + 1)) for _ in range(k)], [n] * k))
    for passes, attempts in cases:
        got = homogeneity_p_values(np.array([passes]), np.array([attempts]))[0]
        expected = brute_force_p(passes, attempts) if 0 < sum(passes) < sum(attempts) else 1.0
        assert got == pytest.approx(expected, rel=1e-9), (passes, attempts)


def test_exact_test_is_valid_under_the_null_with_unequal_attempts() -> None:
    """Same pass chance for every model, some attempts missing (errors): P(p ≤ α) stays ≤ α."""
    rng = np.random.default_rng(3)
    attempts = rng.integers(2, 6, size=(4000, 4))
    passes = rng.binomial(attempts, rng.uniform(0.2, 0.8, size=(4000, 1)))
    p = homogeneity_p_values(passes, attempts)
    for alpha in (0.01, 0.05, 0.2):
        assert (p <= alpha).mean() <= alpha + 0.01


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 20, 99])
def test_chi2_sf_matches_scipy(df: int) -> None:
    from scipy.stats import chi2

    for value in (0.0, 0.3, 1.0, df, 2.5 * df, 40.0, 300.0):
        assert chi2_sf(value, df) == pytest.approx(chi2.sf(value, df), rel=1e-9, abs=1e-300)


def test_large_tests_use_chi_square_when_counts_are_large() -> None:
    from scipy.stats import chi2_contingency

    x, n = np.array([[120, 100, 90, 140]]), np.array([[200, 200, 200, 200]])  # 800 attempts, expected ≥ 5
    table = np.stack([x[0], n[0] - x[0]], axis=1)
    expected = chi2_contingency(table, correction=False).pvalue
    assert homogeneity_p_values(x, n)[0] == pytest.approx(expected, rel=1e-9)


def test_large_sparse_tests_are_exact_on_the_rarer_outcome() -> None:
    # 2 models × 250 attempts exceeds MAX_EXACT_ATTEMPTS and 3 passes in all leave expected counts below 5:
    # the exact path on the rarer outcome; compare with the exact chi-square-ordered tail, computed here over
    # the hypergeometric distribution of model 1's passes. (The fixed-count rule drew 4,000 permutations here.)
    n, x = 250, [3, 0]
    assert 2 * n > MAX_EXACT_ATTEMPTS
    assert list(p_value_methods(np.array([x, [n - 3, n]]), np.array([[n, n]] * 2))) == ["exact-minority"] * 2
    total = sum(x)
    probs = {a: math.comb(n, a) * math.comb(n, total - a) / math.comb(2 * n, total) for a in range(total + 1)}
    observed = (x[0] ** 2 + x[1] ** 2) / n
    exact = sum(p for a, p in probs.items() if (a * a + (total - a) ** 2) / n >= observed - 1e-9)
    got = homogeneity_p_values(np.array([x, [n - 3, n]]), np.array([[n, n]] * 2))
    assert got == pytest.approx([exact, exact], rel=1e-9)  # passes the majority: the same table flipped


def test_exact_minority_path_equals_brute_force_on_small_tables() -> None:
    """The rows-0..m, wedge-and-cap dynamic programme on tables small enough to enumerate (equal counts,
    where its statistic Σ x(x − 1)/n orders tables as Σ x²/n does)."""
    from engine.analysis.homogeneity import _exact

    rng = np.random.default_rng(12)
    for _ in range(60):
        k, n = int(rng.integers(2, 5)), int(rng.integers(2, 7))
        passes = [int(rng.integers(0, n + 1)) for _ in range(k)]
        if not 0 < sum(passes) < k * n:
            continue
        got = _exact(np.array([passes]), np.array([[n] * k]), minority=True)[0]
        assert got == pytest.approx(brute_force_p(passes, [n] * k), rel=1e-9), passes


def test_trivial_and_single_model_tests() -> None:
    p = homogeneity_p_values(np.array([[3, 3], [0, 0], [2, 0]]), np.array([[3, 3], [3, 3], [2, 0]]))
    assert p[0] == 1.0 and p[1] == 1.0 and np.isnan(p[2])


def brute_pass_at_k(n: int, c: int, k: int) -> tuple[float, float]:
    """Share of the k-subsets of n attempts (c passing) with at least one pass, and with all passing."""
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    return (sum(any(s) for s in subsets) / len(subsets), sum(all(s) for s in subsets) / len(subsets))


def test_pass_at_k_and_pass_hat_k_against_enumeration_and_closed_form() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                at, hat = brute_pass_at_k(n, c, k)
                assert pass_at_k(np.array([n]), np.array([c]), k)[0] == pytest.approx(at, abs=1e-12)
                assert pass_hat_k(np.array([n]), np.array([c]), k)[0] == pytest.approx(hat, abs=1e-12)
                closed = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(np.array([n]), np.array([c]), k)[0] == pytest.approx(closed, abs=1e-12)
    # k above the attempts, or no attempt: no unbiased estimate.
    assert np.isnan(pass_at_k(np.array([3, 0]), np.array([1, 0]), 4)).all()
    assert pass_at_k(np.array([200]), np.array([3]), 100)[0] == pytest.approx(
        1 - math.comb(197, 100) / math.comb(200, 100), rel=1e-12)


def test_pass_at_k_is_unbiased_for_the_true_chance() -> None:
    """Mean of the estimator over many simulated cells equals 1 − (1 − p)^k and p^k."""
    rng = np.random.default_rng(9)
    p, n, k = 0.3, 10, 4
    c = rng.binomial(n, p, size=200_000)
    size = np.full_like(c, n)
    assert pass_at_k(size, c, k).mean() == pytest.approx(1 - (1 - p) ** k, abs=0.003)
    assert pass_hat_k(size, c, k).mean() == pytest.approx(p**k, abs=0.002)
