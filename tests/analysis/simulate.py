"""Simulated runs with known truth, for the statistics tests and bench/bench_stats_sim.py.

The model: test t has an effect u_t ~ N(0, sd_test), its case c an extra v_tc ~ N(0, sd_case) (cases of one
templated test share u_t: they are correlated), and an attempt of model m passes with chance
sigmoid(ability_m + u_t + v_tc), independently across attempts. A model's true pass rate is the expectation
of that chance over the population of tests and cases, computed by Gauss-Hermite quadrature.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from engine.analysis.load import ANALYSIS_COLUMNS


def true_pass_rate(ability: float, sd_test: float, sd_case: float) -> float:
    """E[sigmoid(ability + u + v)] with u ~ N(0, sd_test²), v ~ N(0, sd_case²) (u + v is normal)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    sd = float(np.hypot(sd_test, sd_case))
    return float((weights * (1 / (1 + np.exp(-(ability + sd * nodes))))).sum() / weights.sum())


def chances(rng: np.random.Generator, abilities: Sequence[float], tests: int, cases: int, *, sd_test: float,
            sd_case: float, runs: int = 1) -> np.ndarray:
    """(tests × cases × (runs · models)) pass chances; each run draws its own test and case effects.

    Stacking independent runs as more model columns of one frame lets one `per_model` or `build_cells` call
    stand for many simulated runs: every per-model interval and paired comparison uses its own columns only.
    """
    u = rng.normal(0, sd_test, (tests, 1, runs, 1))
    v = rng.normal(0, sd_case, (tests, cases, runs, 1))
    eta = np.asarray(abilities, dtype="float64")[None, None, None, :] + u + v
    return (1 / (1 + np.exp(-eta))).reshape(tests, cases, runs * len(abilities))


def frame(passed: np.ndarray, models: Sequence[str], *, temperature: float = 0.7) -> pd.DataFrame:
    """Results rows (the analysis columns) from (tests × cases × models × repeats) pass outcomes."""
    tests, cases, n_models, repeats = passed.shape
    t, c, m, r = (a.ravel() for a in np.meshgrid(np.arange(tests), np.arange(cases), np.arange(n_models),
                                                   np.arange(repeats), indexing="ij"))
    ok = passed.ravel().astype(bool)
    n = ok.size
    data = {
        "run_id": ["sim"] * n, "model": np.asarray(models, dtype=object)[m], "fallback": np.zeros(n, bool),
        "suite": ["sim"] * n, "test_id": np.char.add("t", t.astype(str)).astype(object),
        "test_hash": np.char.add("h", t.astype(str)).astype(object),
        "case_index": c if cases > 1 else np.full(n, np.nan), "attempt": r, "tags": [()] * n,
        "prompt_tokens": np.full(n, 10.0), "completion_tokens": np.full(n, 5.0), "latency_s": np.full(n, 0.1),
        "ttft_visible_s": np.full(n, 0.05), "truncated": np.zeros(n, bool), "cost": np.full(n, np.nan),
        "score": ok.astype("float64"), "passed": ok, "threshold": np.ones(n), "error_kind": [None] * n,
        "temperature": np.full(n, temperature),
    }
    return pd.DataFrame(data, columns=list(ANALYSIS_COLUMNS))


def simulate(rng: np.random.Generator, abilities: Sequence[float], tests: int, cases: int, repeats: int, *,
             sd_test: float = 1.5, sd_case: float = 0.5, runs: int = 1) -> tuple[pd.DataFrame, np.ndarray]:
    """Simulated runs: (rows, the (tests × cases × models) pass chances).

    Models are named m<j> for one run, r<run>m<j> for several stacked runs (see `chances`).
    """
    p = chances(rng, abilities, tests, cases, sd_test=sd_test, sd_case=sd_case, runs=runs)
    passed = rng.random(p.shape + (repeats,)) < p[..., None]
    names = [f"m{j}" for j in range(len(abilities))] if runs == 1 else \
        [f"r{r:04d}m{j}" for r in range(runs) for j in range(len(abilities))]
    return frame(passed, names), p


def sparse_grid(rng: np.random.Generator, tests: int, spread: float, base: tuple[float, float],
                models: int = 50, attempts: int = 20, error: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    """(passes, attempts) of `tests` tests × `models` models: pass chance sigmoid(logit(b) + spread·a_m) with
    b ~ U(base) per test and a_m ~ N(0, 1) per model; each attempt an error row (not scored) with `error`."""
    logit = np.log(np.array(base) / (1 - np.array(base)))
    eta = rng.uniform(*logit, (tests, 1)) + spread * rng.normal(0, 1, (1, models))
    n = rng.binomial(attempts, 1 - error, (tests, models))
    return rng.binomial(n, 1 / (1 + np.exp(-eta))), n


def large_count_frame(rng: np.random.Generator, per_group: int = 40) -> pd.DataFrame:
    """A suite of 3·per_group tests × 50 models × 20 attempts, rows as `engine run` writes them: flat tests (one
    pass chance for every model, 3-12%), weakly and clearly discriminating ones, all with rare passes, so that
    every test takes a large-count path of the homogeneity test; 2% error rows."""
    groups = [sparse_grid(rng, per_group, s, (0.03, 0.12), error=0.0) for s in (0.0, 0.35, 1.0)]
    n_passed = np.concatenate([g[0] for g in groups])
    tests = len(n_passed)
    outcome = np.arange(20)[None, None, None, :] < n_passed[:, None, :, None]
    outcome = rng.permuted(np.broadcast_to(outcome, (tests, 1, 50, 20)).copy(), axis=3)
    df = frame(outcome, [f"m{j:02d}" for j in range(50)])
    df.loc[rng.random(len(df)) < 0.02, "score"] = np.nan
    return df


def fixed_count(x: np.ndarray, n: np.ndarray, seed: int) -> np.ndarray:
    """The fixed-count Monte Carlo test the sequential one replaced: (1 + #{T* ≥ T}) / (1 + 4,000) for every table (the
    sequential code with more exceedances than its cap never stops early)."""
    from engine.analysis.homogeneity import DEFAULT_PERMUTATIONS, _monte_carlo

    return _monte_carlo(x, n, DEFAULT_PERMUTATIONS, seed, exceedances=DEFAULT_PERMUTATIONS + 1)


def old_rule(passes: np.ndarray, attempts: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """`homogeneity_p_values` with the fixed-count rule: 4,000 fixed permutations wherever a large test is sparse."""
    from engine.analysis.homogeneity import homogeneity_p_values, p_value_methods

    big = np.isin(p_value_methods(passes, attempts), ["exact-minority", "monte-carlo"])
    out = np.full(len(big), np.nan)
    # The other methods ("exact", "chi-square") are deterministic and table by table, so computing them on the
    # small tables alone gives the same values without the new path's work on the big ones (1.4 s here).
    out[~big] = homogeneity_p_values(passes[~big], attempts[~big], seed=seed)
    x = np.rint(np.nan_to_num(passes)).astype("int64")
    n = np.rint(np.nan_to_num(attempts)).astype("int64")
    out[big] = _fixed_count_once(x[big], n[big], seed)
    return out


_FIXED: dict[tuple[bytes, bytes, tuple[int, ...], int], np.ndarray] = {}


def _fixed_count_once(x: np.ndarray, n: np.ndarray, seed: int) -> np.ndarray:
    """`fixed_count`, remembered for this process: the test's bh and holm cases share one reference (5 s)."""
    key = (x.tobytes(), n.tobytes(), x.shape, seed)
    if key not in _FIXED:
        _FIXED[key] = fixed_count(x, n, seed)
    return _FIXED[key].copy()


def simulate_2pl(rng: np.random.Generator, models: int, tests: int, repeats: int, *, sd_theta: float = 1.0,
                 sd_b: float = 1.0, sd_log_a: float = 0.5) -> tuple[pd.DataFrame, np.ndarray]:
    """Rows drawn from a 2PL model (varying discrimination): (rows, the (tests × models) pass chances).

    theta ~ N(0, sd_theta²) per model, b ~ N(0, sd_b²) and log a ~ N(0, sd_log_a²) per test; an attempt of
    model m passes test t with chance sigmoid(a_t (theta_m − b_t)). Models are named m<j>, tests t<i>.
    """
    theta = rng.normal(0, sd_theta, models)
    b = rng.normal(0, sd_b, tests)
    a = np.exp(rng.normal(0, sd_log_a, tests))
    p = 1 / (1 + np.exp(-a[:, None] * (theta[None, :] - b[:, None])))
    passed = rng.random(p.shape + (repeats,)) < p[..., None]
    return frame(passed[:, None], [f"m{j}" for j in range(models)]), p
