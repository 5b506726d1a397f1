"""Seeded simulations with known truth (small enough for `make test`; the large ones are bench/bench_stats_sim.py).

Independent runs are stacked as separate model columns of one frame (see simulate.chances), so one call of the
public API stands for hundreds of runs; each model's interval and each pair's comparison uses its own columns.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from simulate import frame, simulate, true_pass_rate

from engine.analysis import MIN_PAIRED_TESTS, build_cells, compare, per_model, per_test


def monte_carlo_slack(rate: float, runs: int) -> float:
    """Three standard errors of a simulated rate: the tolerance of an assertion on it."""
    return 3 * math.sqrt(rate * (1 - rate) / runs)


def test_model_interval_covers_with_correlated_cases() -> None:
    """20 tests × 5 cases × 3 repeats, cases sharing their test's effect: the interval clustered by
    (suite, test_id) covers the true pass rate at about 95%; treating cases as independent does not."""
    runs, ability = 300, 0.5
    df, _ = simulate(np.random.default_rng(20261202), [ability], tests=20, cases=5, repeats=3, runs=runs)
    truth = true_pass_rate(ability, 1.5, 0.5)
    by_test = per_model(df)
    covered = ((by_test["pass_lo"] <= truth) & (truth <= by_test["pass_hi"])).mean()
    assert covered >= 0.95 - monte_carlo_slack(0.95, runs), covered
    assert (by_test["clusters"] == 20).all() and (by_test["tests"] == 100).all()
    by_case = per_model(df, cluster_by="case")
    naive = ((by_case["pass_lo"] <= truth) & (truth <= by_case["pass_hi"])).mean()
    assert naive < covered - 0.1, (naive, covered)


@pytest.mark.parametrize("tests", [10, 12])
def test_model_interval_holds_down_to_ten_tests(tests: int) -> None:
    runs, ability = 300, 1.0
    df, _ = simulate(np.random.default_rng(tests), [ability], tests=tests, cases=1, repeats=3, runs=runs)
    truth = true_pass_rate(ability, 1.5, 0.5)
    models = per_model(df)
    covered = ((models["pass_lo"] <= truth) & (truth <= models["pass_hi"])).mean()
    assert covered >= 0.95 - monte_carlo_slack(0.95, runs), covered


@pytest.mark.parametrize("tests", [1, 2, 3, 5, 8, 12, 20])
def test_no_false_better_verdicts_under_the_null_with_few_tests(tests: int) -> None:
    """Two equally able models: a verdict naming a better one must come at most 5% of the time."""
    runs = 200
    df, _ = simulate(np.random.default_rng(100 + tests), [0.3, 0.3], tests=tests, cases=1, repeats=3, runs=runs)
    cells = build_cells(df)
    results = [compare(df, f"r{r:04d}m0", f"r{r:04d}m1", cells=cells) for r in range(runs)]
    false_better = np.mean([c.better is not None for c in results])
    assert false_better <= 0.05 + monte_carlo_slack(0.05, runs), false_better
    if tests < MIN_PAIRED_TESTS:
        assert all(c.verdict.startswith(f"too few tests to compare ({tests})") for c in results)
        assert all(c.better is None for c in results)


def test_a_real_difference_is_still_found() -> None:
    """The guard is not a verdict that never fires: a clear gap over 30 tests is called in most runs."""
    runs = 100
    df, _ = simulate(np.random.default_rng(7), [1.5, -0.5], tests=30, cases=1, repeats=3, runs=runs)
    cells = build_cells(df)
    found = [compare(df, f"r{r:04d}m0", f"r{r:04d}m1", cells=cells) for r in range(runs)]
    assert np.mean([c.better == f"r{r:04d}m0" for r, c in enumerate(found)]) >= 0.8
    assert not any(c.better == f"r{r:04d}m1" for r, c in enumerate(found))
    assert "McNemar p" in found[0].verdict and "CI" in found[0].verdict


def flat_and_discriminating(rng: np.random.Generator, flat: int, disc: int, attempts: int = 5) -> tuple:
    """One run of 4 models: `flat` tests where every model shares one pass chance (drawn per test in
    0.2..0.8) then `disc` tests where two models pass at 0.9 and two at 0.1; attempts at temperature 0.7."""
    chance = np.concatenate([np.repeat(rng.uniform(0.2, 0.8, (flat, 1)), 4, axis=1),
                             np.tile([0.9, 0.9, 0.1, 0.1], (disc, 1))])[:, None, :]
    passed = rng.random(chance.shape + (attempts,)) < chance[..., None]
    tests = per_test(frame(passed, ["a", "b", "c", "d"]))
    return tests, (tests["test_id"].str[1:].astype(int) < flat).to_numpy()


def test_discriminating_and_flat_tests_are_told_apart() -> None:
    """Mixed runs (20 flat + 20 discriminating tests): most discriminating tests are called, and the
    share of false calls among the calls stays within the 5% false-discovery rate; sampling noise is never
    'flaky'. The old rule (spread of model means above 0.05) would have called most flat tests discriminating."""
    rng = np.random.default_rng(42)
    false_calls = calls = found = flat_spread = 0
    runs = 10
    for _ in range(runs):
        tests, is_flat = flat_and_discriminating(rng, 20, 20)
        called = tests["discriminating"].to_numpy()
        false_calls += int((called & is_flat).sum())
        calls += int(called.sum())
        found += int((called & ~is_flat).sum())
        flat_spread += int((tests.loc[is_flat, "spread"] > 0.05).sum())
        assert not tests["flaky"].any()
        assert set(tests.loc[~called, "status"]) <= {"uninformative", "saturated", "floor"}
    assert found >= 0.75 * 20 * runs  # power of one test with 5 attempts per model (bench: ~84%)
    assert false_calls / calls <= 0.05 + monte_carlo_slack(0.05, calls), (false_calls, calls)
    assert flat_spread > 0.8 * 20 * runs


def test_flat_tests_alone_are_not_called_discriminating() -> None:
    """Only flat tests (no call is right: every model truly passes about half the time): under this global null
    Benjamini-Hochberg bounds the chance of any call in a run by 5%."""
    rng = np.random.default_rng(5)
    runs = 40
    any_call = sum(bool(flat_and_discriminating(rng, 40, 0)[0]["discriminating"].any()) for _ in range(runs))
    assert any_call / runs <= 0.05 + monte_carlo_slack(0.05, runs)


def test_disagreeing_attempts_are_flaky_only_at_temperature_zero() -> None:
    rng = np.random.default_rng(1)
    passed = rng.random((10, 1, 2, 4)) < 0.5
    sampled = per_test(frame(passed, ["a", "b"], temperature=0.7))
    greedy = per_test(frame(passed, ["a", "b"], temperature=0.0))
    mixed = sampled["mixed_models"] != ""
    assert mixed.any() and not sampled["flaky"].any()
    assert (greedy["flaky"] == mixed).all()
