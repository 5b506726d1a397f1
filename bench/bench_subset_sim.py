"""Benchmark: `engine analyze --subset 20%` on simulated runs with known truth.

For each scenario and seed, the leave-one-model-out figures of `engine.analysis.subset.choose_subset`
(mean absolute error of the held-out models' estimated pass rates, Spearman of estimate against full suite),
beside two variants and random subsets of the same size scored by their plain mean (20 seeds each):

- shipped: tests chosen and models estimated with each test's slope shrunk by its reliability;
- fitted a: the same with the fit's own slopes (the winner's curse: the chosen slopes are the lucky ones);
- common a: every slope set to the suite's mean (choice by difficulty only).

Scenarios: `simulate_2pl` (theta, b ~ N(0, 1), log a ~ N(0, 0.5²)) at 30 models × 200 tests × 3 attempts and
15 × 100 × 1; the statistics simulation `simulate` (one slope, test effect sd 1.5, 3 correlated cases, 25
models); and a 2PL with 30 of 200 tests broken (a = 0.02: pass or fail regardless of ability).

    python bench/bench_subset_sim.py [--seeds 4]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "analysis"))

from simulate import frame, simulate, simulate_2pl

from engine.analysis import subset
from engine.analysis.cells import Cells, build_cells


def broken(seed: int, models: int = 25, tests: int = 200, repeats: int = 3) -> Cells:
    rng = np.random.default_rng(seed)
    theta, b = rng.normal(0, 1, models), rng.normal(0, 1, tests)
    a = np.exp(rng.normal(0, 0.5, tests))
    a[:30] = 0.02
    p = 1 / (1 + np.exp(-a[:, None] * (theta[None, :] - b[:, None])))
    return build_cells(frame((rng.random(p.shape + (repeats,)) < p[..., None])[:, None],
                             [f"m{j}" for j in range(models)]))


def scenarios(seed: int) -> Iterator[tuple[str, Cells]]:
    yield "2PL 30 models x 200 tests x 3", build_cells(simulate_2pl(np.random.default_rng(seed), 30, 200, 3)[0])
    yield "2PL 15 models x 100 tests x 1", build_cells(simulate_2pl(np.random.default_rng(seed), 15, 100, 1)[0])
    rng = np.random.default_rng(100 + seed)
    yield "suite sim 25 models x 240 cases x 3", build_cells(simulate(rng, rng.normal(0, 1, 25), 80, 3, 3)[0])
    yield "2PL, 30 of 200 tests broken, 25 x 3", broken(seed)


def variant(shrink: Callable | None) -> Callable:
    shipped = subset._shrunk_log_slopes

    def run(cells: Cells, size: int) -> subset.HoldOut:
        subset._shrunk_log_slopes = shrink or shipped
        try:
            holdout = subset.choose_subset(cells, size).holdout
        finally:
            subset._shrunk_log_slopes = shipped
        assert holdout is not None
        return holdout

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    methods = {"shipped": variant(None), "fitted a": variant(lambda log_a, eta, n: log_a),
               "common a": variant(lambda log_a, eta, n: np.full_like(log_a, log_a.mean()))}
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
    started = time.perf_counter()
    for seed in range(args.seeds):
        for name, cells in scenarios(seed):
            size = subset.parse_size("20%", int((cells.n_scored.sum(axis=1) > 0).sum()))
            for method, run in methods.items():
                h = run(cells, size)
                figures.setdefault((name, method), []).append((h.mae, h.spearman))
            figures.setdefault((name, "random"), []).append((h.random_mae, h.random_spearman))
    print(f"| scenario ({args.seeds} seeds) | method | held-out MAE (mean, worst) | Spearman (mean, worst) |")
    print("|---|---|---|---|")
    for (name, method), values in figures.items():
        v = np.array(values)
        print(f"| {name} | {method} | {v[:, 0].mean():.4f}, {v[:, 0].max():.4f} | "
              f"{v[:, 1].mean():.3f}, {v[:, 1].min():.3f} |")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
