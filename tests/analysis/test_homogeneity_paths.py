"""The homogeneity test's large-count paths against what they replaced.

Before them every test with more than 400 attempts and an expected count under 5 drew a fixed 4,000
permutations. Now such a test is computed exactly on its rarer outcome when that is rare (`exact-minority`),
else by Besag and Clifford's sequential Monte Carlo (`monte-carlo`, h = 100 exceedances, cap 4,000). Here:

(a) both agree with the fixed 4,000-permutation test within Monte Carlo error, on tables near and far from
    p = 0.05, and the sequential p-value is the fixed-count one whenever it runs to the cap;
(b) the classes of `per_test` on a simulated suite in the large-count regime are those the fixed-count test
    gives, except where the fixed-count p-value is within its Monte Carlo error of the cut-off;
(c) under the null hypothesis both paths reject at most alpha of the time.

The reference fixed-count test is `simulate.fixed_count`: the sequential code with more exceedances than the
cap (it never stops early), which is the fixed-count test.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from simulate import fixed_count, large_count_frame, old_rule, sparse_grid

from engine.analysis import items, per_test
from engine.analysis.homogeneity import (
    DEFAULT_EXCEEDANCES,
    DEFAULT_PERMUTATIONS,
    homogeneity_p_values,
    p_value_methods,
)

CAP = DEFAULT_PERMUTATIONS


def enumerated_p(passes: list[int], attempts: list[int]) -> float:
    """Exact P(T* ≥ T | margins) for tables whose last model holds the rest: every other cell enumerated."""
    total, big = sum(passes), attempts[-1]
    observed = sum(x * x / n for x, n in zip(passes, attempts, strict=True))
    tail = weight = 0.0
    for head in itertools.product(*(range(n + 1) for n in attempts[:-1])):
        rest = total - sum(head)
        if not 0 <= rest <= big:
            continue
        w = math.prod(math.comb(n, x) for x, n in zip(head, attempts, strict=False)) * math.comb(big, rest)
        weight += w
        if sum(x * x / n for x, n in zip((*head, rest), attempts, strict=True)) >= observed - 1e-9:
            tail += w
    return tail / weight


# Six models with 4 attempts beside one with 700: over 400 attempts, expected counts of 2, and each outcome
# 362 times (more than MAX_EXACT_MINORITY): the sequential Monte Carlo's ground. Exact p-values from 0.002 to 0.8.
SMALL = [4] * 6
MC_CASES = [
    [4, 4, 4, 0, 0, 0], [4, 4, 3, 1, 0, 0], [4, 3, 3, 1, 1, 0], [4, 4, 2, 1, 1, 1],
    [3, 3, 3, 1, 1, 1], [4, 3, 2, 2, 1, 1], [3, 3, 2, 2, 1, 1], [3, 2, 2, 2, 2, 1],
]


def mc_table(head: list[int]) -> tuple[list[int], list[int]]:
    passes = [*head, 362 - sum(head)]
    return passes, [*SMALL, 700]


def test_the_large_sparse_cases_take_the_sequential_monte_carlo_path() -> None:
    x, n = zip(*(mc_table(h) for h in MC_CASES), strict=True)
    assert set(p_value_methods(np.array(x), np.array(n))) == {"monte-carlo"}


@pytest.mark.parametrize("head", MC_CASES)
def test_sequential_p_values_agree_with_the_fixed_count_test(head: list[int]) -> None:
    """Over 40 seeds, the mean sequential and the mean fixed-count p-value each sit within four standard
    errors of the exact value and of each other, and so do their shares of p ≤ 0.05 (the decision)."""
    passes, attempts = mc_table(head)
    exact = enumerated_p(passes, attempts)
    x, n = np.array([passes] * 40), np.array([attempts] * 40)
    seq = np.array([homogeneity_p_values(x[:1], n[:1], seed=s)[0] for s in range(40)])
    fixed = np.array([fixed_count(x[:1], n[:1], seed=1000 + s)[0] for s in range(40)])
    # Standard errors of one p-value: the fixed count's binomial one; the sequential one's is about
    # p·√((1 − p)/h) when it stops early (h / L with L negative binomial), the fixed one's at the cap.
    se_fixed = math.sqrt(exact * (1 - exact) / CAP)
    se_seq = max(exact * math.sqrt((1 - exact) / DEFAULT_EXCEEDANCES), se_fixed)
    expected = (1 + CAP * exact) / (CAP + 1)  # E[(g + 1) / (cap + 1)]: the floor 1 / 4,001 for tiny p
    for name, got, se in (("sequential", seq, se_seq), ("fixed", fixed, se_fixed)):
        assert abs(got.mean() - expected) <= 4 * se / math.sqrt(40) + 1e-5, (name, got.mean(), exact)
    assert abs(seq.mean() - fixed.mean()) <= 4 * math.hypot(se_seq, se_fixed) / math.sqrt(40) + 1e-4
    # The decision at 0.05: each seed's call agrees with the exact one unless p is within MC error of 0.05.
    near = abs(exact - 0.05) <= 4 * se_seq
    if not near:
        assert ((seq <= 0.05) == (exact <= 0.05)).all() and ((fixed <= 0.05) == (exact <= 0.05)).all()


def test_the_sequential_p_value_is_the_fixed_count_formula_when_it_reaches_the_cap() -> None:
    """p ≈ 0.002 < h / 4,000: too few exceedances to stop, so p = (g + 1) / 4,001 as the fixed count gives."""
    passes, attempts = mc_table(MC_CASES[0])
    assert enumerated_p(passes, attempts) < DEFAULT_EXCEEDANCES / CAP / 2
    for seed in range(5):
        p = homogeneity_p_values(np.array([passes]), np.array([attempts]), seed=seed)[0]
        hits = p * (CAP + 1) - 1
        assert hits == pytest.approx(round(hits), abs=1e-6) and hits < DEFAULT_EXCEEDANCES


def test_the_sequential_test_stops_early_far_from_significance() -> None:
    """A table with p ≈ 0.8 stops at about h / p = 125 resamples: p = h / L with L ≤ the first block."""
    passes, attempts = mc_table(MC_CASES[-1])
    p = homogeneity_p_values(np.array([passes]), np.array([attempts]), seed=3)[0]
    stopped_at = DEFAULT_EXCEEDANCES / p
    assert stopped_at == pytest.approx(round(stopped_at), abs=1e-6) and stopped_at < 400


@pytest.mark.parametrize("error", [0.0, 0.02])
def test_exact_minority_p_values_agree_with_the_fixed_count_test(error: float) -> None:
    """Fifty models × 20 attempts with passes rare: the exact path against 4,000 permutations. With equal
    attempt counts its statistic orders tables as Pearson's does and the two agree within Monte Carlo
    error. With error rows (unequal counts) the rounded statistic ties tables that Pearson's separates by
    their 1/n_m, so the exact p-value can only be larger (more conservative), by up to ~0.1 here."""
    rng = np.random.default_rng(22)
    grids = [sparse_grid(rng, 20, s, (0.03, 0.12), error=error) for s in (0.0, 0.3, 0.6)]
    x, n = np.concatenate([g[0] for g in grids]), np.concatenate([g[1] for g in grids])
    assert set(p_value_methods(x, n)) == {"exact-minority"}
    exact = homogeneity_p_values(x, n)
    fixed = fixed_count(x, n, seed=5)
    se = np.sqrt(np.maximum(exact * (1 - exact), 1 / CAP) / CAP)
    assert ((exact > 0.001) & (exact < 0.5)).sum() >= 10  # cases near the threshold, not only extremes
    assert (exact - fixed >= -4 * se - 1 / CAP).all()
    if error == 0.0:
        assert (np.abs(exact - fixed) <= 4 * se + 1 / CAP).all()
    else:
        assert np.median(exact - fixed) <= 0.02
        assert abs(int((exact <= 0.05).sum()) - int((fixed <= 0.05).sum())) <= 2


@pytest.mark.parametrize("correction", ["bh", "holm"])
def test_classes_on_a_simulated_large_count_suite_are_unchanged(monkeypatch: pytest.MonkeyPatch,
                                                                correction: str) -> None:
    df = large_count_frame(np.random.default_rng(2204))
    new = per_test(df, correction=correction)
    methods = set(p_value_methods(*_grid(df)))
    assert methods <= {"exact-minority", "chi-square"} and "exact-minority" in methods
    monkeypatch.setattr(items, "homogeneity_p_values", old_rule)
    old = per_test(df, correction=correction)
    assert (new["status"] == "discriminating").sum() >= 40  # the clear tests are found
    changed = (new["status"] != old["status"]).to_numpy()
    if changed.any():
        # Only a fixed-count p-value within four of its standard errors of the cut-off may change class:
        # the largest p called discriminating by either rule.
        called = (new["status"] == "discriminating") | (old["status"] == "discriminating")
        cut = max(new.loc[new["status"] == "discriminating", "p_value"].max(),
                  old.loc[old["status"] == "discriminating", "p_value"].max())
        p_old = old["p_value"].to_numpy()[changed]
        se = np.sqrt(np.maximum(p_old * (1 - p_old), 1 / CAP) / CAP)
        assert called.to_numpy()[changed].all()
        assert (np.abs(p_old - cut) <= 4 * se + 1 / CAP).all(), (p_old, cut)
    assert changed.sum() <= 2


def _grid(df) -> tuple[np.ndarray, np.ndarray]:
    from engine.analysis import build_cells

    cells = build_cells(df)
    return cells.n_passed, cells.n_scored


def test_exact_minority_path_holds_its_level_under_the_null() -> None:
    """4,000 flat tests of 50 models × 19-20 attempts (errors make the attempt counts unequal, where the
    path's statistic Σ x(x − 1)/n differs from Pearson's): P(p ≤ α) ≤ α within three standard errors."""
    rng = np.random.default_rng(7)
    x, n = sparse_grid(rng, 4000, 0.0, (0.02, 0.12), error=0.03)
    n = np.maximum(n, 19)  # two attempt counts keep the multisets few (and the test fast)
    x = np.minimum(x, n)
    assert (p_value_methods(x, n) == "exact-minority").mean() > 0.99
    p = homogeneity_p_values(x, n)
    for alpha in (0.01, 0.05, 0.1):
        assert (p <= alpha).mean() <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / len(p)), alpha
    assert (p <= 0.1).mean() >= 0.05  # not a test that never rejects


def test_sequential_monte_carlo_holds_its_level_under_the_null() -> None:
    """2,000 null tables on the Monte Carlo path (six models × 4 attempts and one × 700, one pass chance)."""
    rng = np.random.default_rng(8)
    n = np.tile([*SMALL, 700], (2000, 1))
    x = rng.binomial(n, 0.5)
    assert set(p_value_methods(x, n)) == {"monte-carlo"}
    p = homogeneity_p_values(x, n, seed=9)
    for alpha in (0.01, 0.05, 0.1):
        assert (p <= alpha).mean() <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / len(p)), alpha
    assert (p <= 0.1).mean() >= 0.05
