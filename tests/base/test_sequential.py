"""The anytime-valid paired test of `engine run --until-decided` (engine/base/sequential.py), by simulation.

Suites are drawn from the model of tests/analysis/simulate.py (test effect u ~ N(0, 1.5²); an attempt of model m
passes with chance sigmoid(ability_m + u)); each run draws its own suite and its own order. Seeds are fixed.
bench/bench_until_decided.py runs the same checks at 10,000 runs and more scenarios.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from engine.base.sequential import PairedBettingTest, simulate_stops

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
from simulate import chances, frame, true_pass_rate

ALPHA = 0.05


def clopper_pearson(hits: int, runs: int, level: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of a simulated rate."""
    # scipy is imported in the test, not at collection: ~1 CPU-s per pytest-xdist worker otherwise.
    from scipy.stats import beta

    tail = (1 - level) / 2
    lo = 0.0 if hits == 0 else float(beta.ppf(tail, hits, runs - hits + 1))
    hi = 1.0 if hits == runs else float(beta.ppf(1 - tail, hits + 1, runs - hits))
    return lo, hi


def paired_differences(rng: np.random.Generator, abilities: tuple[float, float], runs: int, tests: int,
                       repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """(runs × tests) per-test differences of mean scores A − B, and the pass outcomes (tests, 1, runs·2, repeats)."""
    p = chances(rng, abilities, tests, 1, sd_test=1.5, sd_case=0.0, runs=runs)       # (tests, 1, runs·2)
    passed = rng.random(p.shape + (repeats,)) < p[..., None]
    means = passed.mean(axis=-1)[:, 0, :].reshape(tests, runs, 2)
    return (means[..., 0] - means[..., 1]).T, passed


def report(name: str, hits: int, runs: int) -> tuple[float, float]:
    lo, hi = clopper_pearson(hits, runs)
    print(f"{name}: {hits}/{runs} = {hits / runs:.2%} (95% Clopper-Pearson {lo:.2%} to {hi:.2%})")
    return lo, hi


@pytest.mark.parametrize("repeats", [1, 3])
def test_false_better_rate_under_the_null_stays_below_alpha(repeats: int) -> None:
    """2,000 runs of 200 tests, A and B equally able: a "better" verdict at any stopping time in ≤ 5% of runs;
    the whole binomial interval of the rate lies below 5%."""
    runs = 2000
    d, _ = paired_differences(np.random.default_rng(20261203 + repeats), (0.0, 0.0), runs, 200, repeats)
    sign, _ = simulate_stops(d, ALPHA)
    _, hi = report(f"false 'better' under the null, {repeats} attempt(s)", int((sign != 0).sum()), runs)
    assert hi < ALPHA
    assert abs(int((sign > 0).sum()) - int((sign < 0).sum())) < 40   # neither direction favoured


@pytest.mark.parametrize("shape", ["coin", "mostly_ties"])
def test_false_better_rate_on_hard_nulls(shape: str) -> None:
    """Mean-zero differences of the worst shapes: every test a ±1 coin flip, or 95% ties and rare ±1."""
    rng = np.random.default_rng(7 if shape == "coin" else 8)
    runs, tests = 4000, 300
    if shape == "coin":
        d = rng.choice([-1.0, 1.0], size=(runs, tests))
    else:
        d = rng.choice([-1.0, 0.0, 1.0], p=[0.025, 0.95, 0.025], size=(runs, tests))
    sign, _ = simulate_stops(d, ALPHA)
    _, hi = report(f"false 'better', null of shape {shape}", int((sign != 0).sum()), runs)
    assert hi < ALPHA


def test_wrong_direction_is_rare_when_b_is_slightly_better() -> None:
    """E[D] < 0: 'A better' is a false verdict too, and stays ≤ α (the one-sided gambler is a supermartingale)."""
    runs = 2000
    d, _ = paired_differences(np.random.default_rng(11), (0.0, 0.15), runs, 200, 1)
    sign, _ = simulate_stops(d, ALPHA)
    _, hi = report("false 'A better' when B is better", int((sign > 0).sum()), runs)
    assert hi < ALPHA


def test_power_stops_early_with_the_full_runs_verdict() -> None:
    """A clearly better (ability +1.5 on the logit scale, about +0.25 in pass rate): the sequential test decides
    "A better" in nearly every run, after a fraction of the suite, and agrees with the fixed-sample verdict of
    `engine analyze` on the whole suite."""
    from engine.analysis import build_cells, compare

    runs, tests = 300, 200
    d, passed = paired_differences(np.random.default_rng(5), (1.5, 0.0), runs, tests, 1)
    sign, used = simulate_stops(d, ALPHA)
    names = [f"r{r:04d}m{j}" for r in range(runs) for j in range(2)]
    cells = build_cells(frame(passed, names))
    full = np.array([{f"r{r:04d}m0": 1, f"r{r:04d}m1": -1, None: 0}[
        compare(None, f"r{r:04d}m0", f"r{r:04d}m1", cells=cells).better] for r in range(runs)])
    report("decided 'A better'", int((sign > 0).sum()), runs)
    print(f"tests used when decided: median {np.median(used[sign != 0]):.0f} of {tests}; calls saved "
          f"{1 - used.sum() / (runs * tests):.0%}; full-run verdict 'A better' in {(full > 0).mean():.1%}")
    assert (sign > 0).mean() >= 0.95 and not (sign < 0).any()
    assert np.median(used[sign > 0]) < tests / 2
    both = (sign != 0) & (full != 0)
    assert both.mean() >= 0.95 and (sign[both] == full[both]).all()


def test_one_at_a_time_matches_the_vectorised_decision() -> None:
    rng = np.random.default_rng(3)
    d, _ = paired_differences(rng, (0.7, 0.0), 40, 120, 2)
    sign, used = simulate_stops(d, ALPHA)
    for run in range(40):
        test = PairedBettingTest(ALPHA, grid_points=201)
        stop = None
        for i, value in enumerate(d[run]):
            state = test.update(value)
            if state.sign and stop is None:
                stop = (state.sign, i + 1)
        assert (stop or (0, 120)) == (sign[run], used[run])


def test_confidence_sequence_covers_the_true_difference_at_every_time() -> None:
    """300 runs of 100 tests: the running-intersection interval excludes the true mean difference at some
    time in at most α of runs (checked after every test)."""
    runs, tests = 300, 100
    d, _ = paired_differences(np.random.default_rng(9), (0.5, 0.0), runs, tests, 1)
    truth = true_pass_rate(0.5, 1.5, 0.0) - true_pass_rate(0.0, 1.5, 0.0)
    missed = 0
    for run in range(runs):
        test = PairedBettingTest(ALPHA, grid_points=201)
        for value in d[run]:
            state = test.update(value)
            if not state.lo <= truth <= state.hi:
                missed += 1
                break
        assert -1.0 <= state.lo <= state.mean <= state.hi <= 1.0
    lo, _ = report("confidence sequence ever missed the truth", missed, runs)
    assert missed / runs <= ALPHA and lo < ALPHA


def test_bad_alpha_and_grid_are_refused() -> None:
    with pytest.raises(ValueError, match="alpha"):
        PairedBettingTest(0.0)
    with pytest.raises(ValueError, match="odd"):
        PairedBettingTest(grid_points=100)
