"""Benchmark: the statistics of `engine analyze` on simulated runs with known truth.

Scenarios (tests/analysis/simulate.py: test effect u ~ N(0, 1.5²), case effect v ~ N(0, 0.5²), an attempt of
model m passes with chance sigmoid(ability_m + u + v)):

1. coverage of the per-model 95% interval of the pass rate: 20 tests × 5 cases × 3 repeats (cases correlated
   through their test), and 5..100 tests × 1 case; the shipped cluster-robust t-interval by (suite, test_id)
   against the same by case, and against percentile bootstraps (the previous method);
2. false "better" verdicts between two equally able models at every test count 1..100 (1 case, 3 repeats),
   with the rates of the interval alone and McNemar alone beside the shipped rule (both must agree);
   and the power of the rule when the models differ;
3. tests classed from evidence: 20 flat + 20 discriminating tests (4 models, 5 attempts), and 40 flat tests,
   with Benjamini-Hochberg (the default) and Holm;
4. the same classes in the large-count regime (50 models × 20 attempts, rare passes: the
   exact-minority path) against the 4,000 fixed permutations it replaced, and the time of each.

Independent runs are stacked as model columns of one frame, so each figure is a handful of public API calls.

    python bench/bench_stats_sim.py [--runs 400] [--large-runs 20] [--only large]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "analysis"))

from simulate import frame, large_count_frame, old_rule, simulate, true_pass_rate

from engine.analysis import build_cells, compare, items, per_model, per_test
from engine.analysis.stats import cluster_bootstrap_means, percentile_ci


def covered(lo: np.ndarray, hi: np.ndarray, truth: float) -> float:
    return float(np.mean((lo <= truth) & (truth <= hi)))


def bootstrap_coverage(df, cells, truth: float, cluster_by: str, resamples: int = 1000) -> float:
    """The previous method: percentile bootstrap of the mean, resampling clusters (per model column)."""
    rate = np.where(cells.has_data, cells.pass_rate, np.nan)
    hits = []
    for m in range(rate.shape[1]):
        col = rate[:, m]
        if cluster_by == "test":
            keep = ~np.isnan(col)
            sums = np.bincount(cells.cluster[keep], weights=col[keep])
            sizes = np.bincount(cells.cluster[keep]).astype("float64")
            # resample clusters; the mean over items is Σ sums / Σ sizes of the drawn clusters
            draws_num = cluster_bootstrap_means(np.column_stack([sums, sizes]), resamples=resamples, seed=m)
            draws = draws_num[:, 0] / draws_num[:, 1]
        else:
            draws = cluster_bootstrap_means(col, resamples=resamples, seed=m)[:, 0]
        lo, hi = percentile_ci(draws[:, None])
        hits.append(lo[0] <= truth <= hi[0])
    return float(np.mean(hits))


def coverage(runs: int) -> list[str]:
    out = ["## 1. Coverage of the per-model 95% interval (pass rate)", "",
           "| scenario | t by (suite, test_id) (shipped) | t by case | bootstrap by test | bootstrap by case "
           "(previous) |", "|---|---|---|---|---|"]
    rng = np.random.default_rng(14)
    for tests, cases in [(20, 5), (5, 1), (10, 1), (20, 1), (50, 1), (100, 1)]:
        ability = 0.5
        df, _ = simulate(rng, [ability], tests=tests, cases=cases, repeats=3, runs=runs)
        truth = true_pass_rate(ability, 1.5, 0.5)
        by_test = per_model(df)
        by_case = per_model(df, cluster_by="case")
        cells = build_cells(df)
        row = [f"{tests} tests × {cases} case{'s' if cases > 1 else ''} × 3 repeats",
               f"{covered(by_test['pass_lo'], by_test['pass_hi'], truth):.3f}",
               f"{covered(by_case['pass_lo'], by_case['pass_hi'], truth):.3f}",
               f"{bootstrap_coverage(df, cells, truth, 'test'):.3f}",
               f"{bootstrap_coverage(df, cells, truth, 'case'):.3f}"]
        out.append("| " + " | ".join(row) + " |")
        print(out[-1], flush=True)
    return out


def false_better(runs: int) -> tuple[list[str], float]:
    out = ["## 2. False \"better\" verdicts, two equally able models (1 case, 3 repeats)", "",
           "| tests | shipped verdict | interval alone | McNemar alone | too few tests |", "|---|---|---|---|---|"]
    rng = np.random.default_rng(1414)
    worst, worst_at = 0.0, 0
    for tests in range(1, 101):
        df, _ = simulate(rng, [0.3, 0.3], tests=tests, cases=1, repeats=3, runs=runs)
        cells = build_cells(df)
        results = [compare(df, f"r{r:04d}m0", f"r{r:04d}m1", cells=cells) for r in range(runs)]
        shipped = np.mean([c.better is not None for c in results])
        interval = np.mean([(c.diff_lo > 0 or c.diff_hi < 0) for c in results])
        mcnemar = np.mean([c.mcnemar_p < 0.05 for c in results])
        too_few = np.mean([c.verdict.startswith("too few tests") for c in results])
        if shipped > worst:
            worst, worst_at = float(shipped), tests
        if tests <= 12 or tests % 10 == 0:
            out.append(f"| {tests} | {shipped:.3f} | {interval:.3f} | {mcnemar:.3f} | {too_few:.2f} |")
            print(out[-1], flush=True)
    out += ["", f"Highest false \"better\" rate over every test count 1..100: **{worst:.3f}** at {worst_at} tests "
                f"({runs} runs each; Monte Carlo standard error at 0.05: ±{np.sqrt(0.05 * 0.95 / runs):.3f})."]
    out += ["", "| tests | power (ability 0.8 vs 0.0) | power (1.5 vs −0.5) |", "|---|---|---|"]
    for tests in (5, 10, 20, 50, 100):
        cells_row = [str(tests)]
        for gap in ((0.8, 0.0), (1.5, -0.5)):
            df, _ = simulate(rng, list(gap), tests=tests, cases=1, repeats=3, runs=min(runs, 200))
            cells = build_cells(df)
            n = min(runs, 200)
            cells_row.append(f"{np.mean([compare(df, f'r{r:04d}m0', f'r{r:04d}m1', cells=cells).better == f'r{r:04d}m0' for r in range(n)]):.3f}")  # noqa: E501
        out.append("| " + " | ".join(cells_row) + " |")
        print(out[-1], flush=True)
    return out, worst


def classes(runs: int, correction: str = "bh") -> list[str]:
    rng = np.random.default_rng(4141)
    flat_called = disc_called = calls = any_mixed = 0
    flat_total = disc_total = 0
    spread_flat = 0
    for _ in range(runs):
        chance = np.concatenate([np.repeat(rng.uniform(0.2, 0.8, (20, 1)), 4, axis=1),
                                 np.tile([0.9, 0.9, 0.1, 0.1], (20, 1))])[:, None, :]
        passed = rng.random(chance.shape + (5,)) < chance[..., None]
        tests = per_test(frame(passed, ["a", "b", "c", "d"]), correction=correction)
        flat = (tests["test_id"].str[1:].astype(int) < 20).to_numpy()
        called = tests["discriminating"].to_numpy()
        flat_called += int((called & flat).sum())
        disc_called += int((called & ~flat).sum())
        calls += int(called.sum())
        any_mixed += int((called & flat).any())
        flat_total += int(flat.sum())
        disc_total += int((~flat).sum())
        spread_flat += int((tests.loc[flat, "spread"] > 0.05).sum())
    null_runs_with_call = flat_alone_called = 0
    for _ in range(runs):
        chance = np.repeat(rng.uniform(0.2, 0.8, (40, 1)), 4, axis=1)[:, None, :]
        passed = rng.random(chance.shape + (5,)) < chance[..., None]
        called = per_test(frame(passed, ["a", "b", "c", "d"]), correction=correction)["discriminating"].to_numpy()
        null_runs_with_call += int(called.any())
        flat_alone_called += int(called.sum())
    name = "Benjamini-Hochberg (default)" if correction == "bh" else "Holm"
    return [
        f"## 3. Tests classed from evidence (4 models × 5 attempts; {name} at 5%)", "",
        "| figure | value |", "|---|---|",
        f"| mixed runs: flat tests called discriminating | {flat_called} of {flat_total} "
        f"({flat_called / flat_total:.2%}) |",
        f"| mixed runs: runs with any flat test called | {any_mixed} of {runs} |",
        f"| mixed runs: false share among the calls | {flat_called / max(calls, 1):.2%} |",
        f"| mixed runs: discriminating tests found (power) | {disc_called / disc_total:.1%} |",
        f"| mixed runs: flat tests the old spread > 0.05 rule called discriminating | "
        f"{spread_flat / flat_total:.1%} |",
        f"| flat-only runs (40 flat tests): flat tests called | {flat_alone_called} of {40 * runs} |",
        f"| flat-only runs: runs with any call (bound 5%) | {null_runs_with_call} of {runs} |",
    ]


def large_count_classes(runs: int) -> list[str]:
    """Classes with the shipped paths and with the fixed-count rule it replaced on the same runs."""
    rng = np.random.default_rng(2222)
    shipped = items.homogeneity_p_values
    changed = tests_total = 0
    figures = {"new": [0, 0, 0, 0.0], "old": [0, 0, 0, 0.0]}  # flat called, weak found, clear found, seconds
    for _ in range(runs):
        df = large_count_frame(rng)
        statuses = {}
        group = None
        for name, rule in (("new", shipped), ("old", old_rule)):
            items.homogeneity_p_values = rule  # type: ignore[assignment]
            try:
                started = time.perf_counter()
                tests = per_test(df)
                figures[name][3] += time.perf_counter() - started
            finally:
                items.homogeneity_p_values = shipped  # type: ignore[assignment]
            group = (tests["test_id"].str[1:].astype(int) // 40).to_numpy()  # rows sort by test_id as text
            called = (tests["status"] == "discriminating").to_numpy()
            for g in range(3):
                figures[name][g] += int((called & (group == g)).sum())
            statuses[name] = tests["status"].to_numpy()
        changed += int((statuses["new"] != statuses["old"]).sum())
        tests_total += len(statuses["new"])
    per = 40 * runs
    out = ["## 4. Classes in the large-count regime (50 models × 20 attempts, rare passes; BH 5%)", "",
           "| figure | exact-minority path (shipped) | 4,000 fixed permutations (before) |", "|---|---|---|"]
    out += [f"| flat tests called discriminating | {figures['new'][0]} of {per} | {figures['old'][0]} of {per} |",
            f"| weakly discriminating tests found | {figures['new'][1]} of {per} | {figures['old'][1]} of {per} |",
            f"| clearly discriminating tests found | {figures['new'][2]} of {per} | {figures['old'][2]} of {per} |",
            f"| per_test seconds ({runs} runs of 120 tests) | {figures['new'][3]:.1f} | {figures['old'][3]:.1f} |",
            "", f"Tests whose class differs between the two: {changed} of {tests_total}."]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--large-runs", type=int, default=20)
    parser.add_argument("--only", choices=["large"], help="Run section 4 alone.")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.only == "large":
        print("\n".join(large_count_classes(args.large_runs)))
        print(f"\n{time.perf_counter() - started:.0f} s")
        return 0
    lines = coverage(args.runs)
    more, worst = false_better(args.runs)
    lines += [""] + more + [""] + classes(args.runs) + [""] + classes(args.runs, "holm")
    lines += [""] + large_count_classes(args.large_runs)
    print("\n".join(lines))
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
