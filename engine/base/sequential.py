"""An anytime-valid paired test by betting: may A be called better than B after any number of tests?

`engine run --until-decided A,B` (engine/run/until_decided.py) feeds one number per test cluster, the paired
difference D = (A's mean score − B's mean score) on that test, in [−1, 1], in a seeded random order, and stops
dispatching once this test decides. Pure math, no I/O: the run layer and the analysis layer both import it, so it
lives in `engine.base`.

The statistic is the hedged capital process of Waudby-Smith & Ramdas (2023, "Estimating means of bounded random
variables by betting", JRSS-B 86(1)), on Y = (D + 1) / 2 ∈ [0, 1]. For a candidate mean m of Y:

    K⁺_t(m) = Π_{i ≤ t} (1 + λ⁺_i(m) (Y_i − m))      a gambler betting that the mean is above m
    K⁻_t(m) = Π_{i ≤ t} (1 − λ⁻_i(m) (Y_i − m))      one betting that it is below
    K_t(m)  = ½ K⁺_t(m) + ½ K⁻_t(m)                  the hedged wealth (two-sided)

with the approximate growth-rate adaptive bets ("aGRAPA", their section 5.1), split by sign and truncated as
in their hedged process (section 4.2):

    g_t(m) = (μ̂_{t−1} − m) / (σ̂²_{t−1} + (μ̂_{t−1} − m)²),   λ⁺_t(m) = clip(g_t(m), 0, c/m),
    λ⁻_t(m) = clip(−g_t(m), 0, c/(1−m)),   μ̂_t = (½ + Σ_{i≤t} Y_i) / (t + 1),
    σ̂²_t = (¼ + Σ_{i≤t} (Y_i − μ̂_i)²) / (t + 1),   c = ¾.

(Their predictable plug-in bets λ̇_t = sqrt(2 log(2/α) / (σ̂² t log(1 + t))) are tuned for a narrow interval at
one time; as a test they decided less often at moderate differences - 76% of 2,000 simulated runs against
aGRAPA's 85% at +0.17 in pass rate over 200 tests - and a little sooner at large ones (median 26 tests against
30 at +0.31): bench/README.md.)

λ_t uses only Y_1..Y_{t−1}, so at the true mean K_t is a nonnegative martingale with K_0 = 1 and Ville's
inequality gives P(∃ t: K_t(m*) ≥ 1/α) ≤ α: the test may be looked at after every test and stopped at any
time (a data-dependent one included) and its error stays ≤ α. The null H0: E[D] = 0 is m = ½.

Decision: reject H0 at the first t with K_t(½) ≥ 1/α; the verdict is "A better" when K⁺_t(½) > K⁻_t(½), else
"B better". A false "A better" needs K⁺(½) ≥ 1/α (since ½K⁺ + ½K⁻ ≥ 1/α and K⁺ > K⁻), and whenever E[D] ≤ 0,
K⁺(½) is a nonnegative supermartingale (λ⁺ ≥ 0): so P(false "A better") ≤ α for every E[D] ≤ 0, not only at
the null, and the same for B. The confidence sequence {m: K_t(m) < 1/α}, computed on a grid and mapped back
to D = 2m − 1, is valid uniformly over t; its running intersection is reported (also valid). tests/base/
test_sequential.py and bench/bench_until_decided.py check the ≤ α error by simulation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_ALPHA = 0.05
# The hedged truncation c of Waudby-Smith & Ramdas (they suggest ½ or ¾): at m = ½ the bet is at most 2c = 1.5,
# so a test where A wins outright multiplies K⁺ by 1.75 and the fewest tests that can decide at α = 0.05 is 8
# (with c = ½, a factor 1.5: 10).
TRUNCATION = 0.75
GRID_POINTS = 1001   # candidate means m of Y on [0, 1] (ends dropped): 0.002 steps of D


def _growth_bet(mean_before: np.ndarray | float, sigma2_before: np.ndarray | float,
                m: np.ndarray | float) -> np.ndarray:
    """g_t(m) of the module docstring, before its sign split and truncation."""
    gap = np.asarray(mean_before, dtype="float64") - m
    return np.asarray(gap / (sigma2_before + gap * gap))


@dataclass(frozen=True)
class Decision:
    """Where the paired test stands after some tests.

    Args:
        tests: Observations (test clusters with a paired difference) used.
        mean: Their mean difference (A − B).
        sign: +1 "A better", −1 "B better", 0 not decided.
        wealth: The hedged wealth K_t(½) (an e-value: 1/α decides).
        wealth_a: K⁺_t(½), the gambler on "A better".
        wealth_b: K⁻_t(½), the gambler on "B better".
        lo: Lower bound of the confidence sequence for E[D] (running intersection), −1 before any test.
        hi: Upper bound.
        alpha: The error rate.
    """

    tests: int
    mean: float
    sign: int
    wealth: float
    wealth_a: float
    wealth_b: float
    lo: float
    hi: float
    alpha: float


class PairedBettingTest:
    """The test of the module docstring, one paired difference at a time (vectorised over the grid of m).

    Args:
        alpha: The error rate (0 < α < 1).
        grid_points: Candidate means of Y for the confidence sequence (odd, so m = ½ is on it).
    """

    def __init__(self, alpha: float = DEFAULT_ALPHA, *, grid_points: int = GRID_POINTS) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha {alpha}: give a rate between 0 and 1 (0.05 is the usual)")
        if grid_points % 2 == 0 or grid_points < 5:
            raise ValueError("grid_points: an odd number ≥ 5, so that m = 1/2 is on the grid")
        self.alpha = alpha
        self._m = np.linspace(0.0, 1.0, grid_points)[1:-1]
        self._step = 1.0 / (grid_points - 1)
        self._half = grid_points // 2 - 1           # index of m = ½ in self._m
        self._log_plus = np.zeros_like(self._m)     # log K⁺_t(m)
        self._log_minus = np.zeros_like(self._m)
        self._threshold = math.log(1.0 / alpha)
        self._n = 0
        self._sum = 0.0                             # Σ Y_i
        self._sum_d = 0.0                           # Σ D_i
        self._sq = 0.0                              # Σ (Y_i − μ̂_i)²
        self._lo, self._hi = -1.0, 1.0
        self._sign = 0

    def update(self, difference: float) -> Decision:
        """Add one test's paired difference D ∈ [−1, 1] (clipped) and return where the test stands.

        Once decided the verdict stays (the rejection happened); later updates still narrow the interval.
        """
        d = min(1.0, max(-1.0, float(difference)))
        y = (d + 1.0) / 2.0
        t = self._n + 1
        m = self._m
        bet = _growth_bet((0.5 + self._sum) / t, (0.25 + self._sq) / t, m)   # from Y_1..Y_{t−1} only
        self._log_plus += np.log1p(np.clip(bet, 0.0, TRUNCATION / m) * (y - m))
        self._log_minus += np.log1p(-np.clip(-bet, 0.0, TRUNCATION / (1.0 - m)) * (y - m))
        self._n = t
        self._sum += y
        self._sum_d += d
        self._sq += (y - (0.5 + self._sum) / (t + 1)) ** 2
        log_wealth = np.logaddexp(self._log_plus, self._log_minus) - math.log(2.0)
        kept = m[log_wealth < self._threshold]
        if kept.size:   # the hull, widened by one grid step: the true edge lies between two grid points
            # (none kept, every grid point rejected at once, cannot hold the true mean: keep the last interval)
            self._lo = max(self._lo, 2.0 * max(0.0, float(kept[0]) - self._step) - 1.0)
            self._hi = min(self._hi, 2.0 * min(1.0, float(kept[-1]) + self._step) - 1.0)
        if self._sign == 0 and log_wealth[self._half] >= self._threshold:
            self._sign = 1 if self._log_plus[self._half] > self._log_minus[self._half] else -1
        return self.state()

    def state(self) -> Decision:
        """Where the test stands now."""
        half = self._half
        log_wealth = float(np.logaddexp(self._log_plus[half], self._log_minus[half]) - math.log(2.0))
        return Decision(tests=self._n, mean=self._sum_d / self._n if self._n else float("nan"), sign=self._sign,
                        wealth=math.exp(min(log_wealth, 700.0)), wealth_a=math.exp(min(self._log_plus[half], 700.0)),
                        wealth_b=math.exp(min(self._log_minus[half], 700.0)), lo=self._lo, hi=self._hi,
                        alpha=self.alpha)


def simulate_stops(differences: np.ndarray, alpha: float = DEFAULT_ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """The decision of `PairedBettingTest` at m = ½ for many runs at once (for simulations).

    Args:
        differences: (runs, tests) paired differences in [−1, 1], each row in the order the run would use.

    Returns:
        (sign per run: +1 A better, −1 B better, 0 undecided after every test; tests used per run: the first
        index at which it decided, 1-based, or the number of tests when undecided).
    """
    d = np.clip(np.asarray(differences, dtype="float64"), -1.0, 1.0)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha {alpha}: give a rate between 0 and 1")
    runs, n = d.shape
    y = (d + 1.0) / 2.0
    t = np.arange(1, n + 1, dtype="float64")
    total = np.cumsum(y, axis=1)
    mu = (0.5 + total) / (t + 1.0)                                  # μ̂_t, Y_t included
    sq = np.cumsum((y - mu) ** 2, axis=1)
    mean_before = np.concatenate([np.full((runs, 1), 0.5), (0.5 + total[:, :-1]) / t[1:]], axis=1)
    sigma2_before = np.concatenate([np.full((runs, 1), 0.25), (0.25 + sq[:, :-1]) / t[1:]], axis=1)
    bet = _growth_bet(mean_before, sigma2_before, 0.5)
    cap = 2.0 * TRUNCATION   # c/m = c/(1 − m) = 2c at m = ½
    log_plus = np.cumsum(np.log1p(np.clip(bet, 0.0, cap) * (y - 0.5)), axis=1)
    log_minus = np.cumsum(np.log1p(-np.clip(-bet, 0.0, cap) * (y - 0.5)), axis=1)
    crossed = np.logaddexp(log_plus, log_minus) - math.log(2.0) >= math.log(1.0 / alpha)
    decided = crossed.any(axis=1)
    first = np.where(decided, crossed.argmax(axis=1), n - 1)
    rows = np.arange(runs)
    sign = np.where(log_plus[rows, first] > log_minus[rows, first], 1, -1)
    return np.where(decided, sign, 0), first + 1


def describe(summary: dict[str, Any]) -> str:
    """One sentence for a stopping decision as `engine run --until-decided` records it (its manifest entry).

    The run prints it when it stops and `engine analyze` prints it again (engine/analysis/sequential_section.py).
    """
    a, b, alpha = summary["model_a"], summary["model_b"], summary["alpha"]
    used, suite = summary["tests_used"], summary["tests_in_suite"]
    if summary["better"]:
        head = (f"until-decided: {summary['verdict']} ({a} vs {b}): e-value {summary['e_value']:.3g} ≥ 1/α = "
                f"{1 / alpha:g} after {used} paired test(s) of {suite}")
    else:
        head = (f"until-decided: undecided between {a} and {b} ({summary['reason']}): e-value "
                f"{summary['e_value']:.3g} < 1/α = {1 / alpha:g} after {used} paired test(s) of {suite}")
    mean = summary["mean_diff"]
    shown = "-" if mean is None else f"{mean:+.3f}"
    full, made = summary["jobs_full_run"], summary["jobs_made"]
    saved = f"{summary['jobs_saved'] / full:.0%}" if full else "-"
    return (f"{head}; mean difference {a} − {b} {shown}, {1 - alpha:.0%} confidence sequence "
            f"[{summary['cs_lo']:+.3f}, {summary['cs_hi']:+.3f}]; {made} of {full} calls made, "
            f"{summary['jobs_saved']} saved ({saved})"
            + (f"; {summary['tests_excluded']} test(s) left out of the statistic (no scored attempt for one model)"
               if summary["tests_excluded"] else ""))
