"""Benchmark: `engine run --until-decided A,B`: error rate, power, calls saved.

1. Simulation (default; numpy only, seeded): suites drawn from the model of tests/analysis/simulate.py (test effect
   u ~ N(0, 1.5²); an attempt of model m passes with chance sigmoid(ability_m + u)); each run draws its own suite
   and order. Under the null (equal abilities, and two hard mean-zero shapes) the share of runs with a "better"
   verdict at any stopping time, with its 95% Clopper-Pearson interval; under alternatives the share decided
   right, the tests used, the calls saved against the full suite, and the agreement with the fixed-sample
   verdict `engine analyze` gives on the full suite (interval and McNemar). The predictable plug-in bets of
   Waudby-Smith & Ramdas are run beside the shipped aGRAPA bets, on the same draws.
2. `--real`: a real run folder with the embedded model (needs the [local] extra): tests/fixtures/until_decided/,
   100 one-digit additions,
   gemma-3-270m few-shot on /completions (A) against the same model asked in chat (B).
   `engine run --until-decided A,B` (calls counted in the folder), then `--resume` completes it and
   `engine analyze` gives the full run's verdict; then the decision is replayed offline over `--orders` other
   seeded orders of the completed folder's rows (what other seeds would have saved; no calls).
3. `--replay RUN_DIR --a A --b B`: that replay on any completed run folder.

    python bench/bench_until_decided.py [--runs 10000] [--real [--skip-simulation]] [--replay RUN_DIR --a A --b B]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "analysis"))

from simulate import chances, frame  # noqa: E402

from engine.base.sequential import DEFAULT_ALPHA, simulate_stops  # noqa: E402


def clopper_pearson(hits: int, runs: int, level: float = 0.95) -> tuple[float, float]:
    from scipy.stats import beta

    tail = (1 - level) / 2
    lo = 0.0 if hits == 0 else float(beta.ppf(tail, hits, runs - hits + 1))
    hi = 1.0 if hits == runs else float(beta.ppf(1 - tail, hits + 1, runs - hits))
    return lo, hi


def rate(hits: int, runs: int) -> str:
    lo, hi = clopper_pearson(hits, runs)
    return f"{hits / runs:6.2%} [{lo:.2%}, {hi:.2%}]"


def prpl_stops(differences: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The same hedged test with the predictable plug-in bets (the alternative the module docstring names)."""
    d = np.clip(differences, -1, 1)
    runs, n = d.shape
    y = (d + 1) / 2
    t = np.arange(1, n + 1.0)
    mu = (0.5 + np.cumsum(y, 1)) / (t + 1)
    sq = np.cumsum((y - mu) ** 2, 1)
    s2 = np.concatenate([np.full((runs, 1), 0.25), (0.25 + sq[:, :-1]) / t[1:]], 1)
    bet = np.minimum(np.sqrt(2 * math.log(2 / alpha) / (s2 * t * np.log1p(t))), 1.5)
    lp = np.cumsum(np.log1p(bet * (y - 0.5)), 1)
    lm = np.cumsum(np.log1p(-bet * (y - 0.5)), 1)
    crossed = np.logaddexp(lp, lm) - math.log(2) >= math.log(1 / alpha)
    decided = crossed.any(1)
    first = np.where(decided, crossed.argmax(1), n - 1)
    sign = np.where(lp[np.arange(runs), first] > lm[np.arange(runs), first], 1, -1)
    return np.where(decided, sign, 0), first + 1


def draw(rng: np.random.Generator, abilities: tuple[float, float], runs: int, tests: int,
         repeats: int) -> tuple[np.ndarray, np.ndarray]:
    p = chances(rng, abilities, tests, 1, sd_test=1.5, sd_case=0.0, runs=runs)
    passed = rng.random(p.shape + (repeats,)) < p[..., None]
    means = passed.mean(axis=-1)[:, 0, :].reshape(tests, runs, 2)
    return (means[..., 0] - means[..., 1]).T, passed


def full_run_verdicts(passed: np.ndarray, runs: int) -> np.ndarray:
    """+1 / −1 / 0: the verdict `engine analyze` gives each simulated run on its whole suite."""
    from engine.analysis import build_cells, compare

    names = [f"r{r:05d}m{j}" for r in range(runs) for j in range(2)]
    cells = build_cells(frame(passed, names))
    out = np.zeros(runs, dtype=int)
    for r in range(runs):
        better = compare(None, names[2 * r], names[2 * r + 1], cells=cells).better
        out[r] = 1 if better == names[2 * r] else -1 if better == names[2 * r + 1] else 0
    return out


def simulation(runs: int, alpha: float) -> None:
    tests = 200
    print(f"## Simulation: {runs} runs of {tests} tests each, α = {alpha}, seeds fixed")
    print("\n### Under the null: share of runs with a 'better' verdict at any stopping time [95% CI]\n")
    print("| null | attempts | aGRAPA (shipped) | predictable plug-in |")
    print("|---|---|---|---|")
    rng = np.random.default_rng(20261203)
    for repeats in (1, 3):
        d, _ = draw(rng, (0.0, 0.0), runs, tests, repeats)
        print(f"| equal abilities | {repeats} | {rate(int((simulate_stops(d, alpha)[0] != 0).sum()), runs)} | "
              f"{rate(int((prpl_stops(d, alpha)[0] != 0).sum()), runs)} |")
    for name, values, probs in (("±1 coin per test", [-1.0, 1.0], [0.5, 0.5]),
                                ("95% ties, rare ±1", [-1.0, 0.0, 1.0], [0.025, 0.95, 0.025])):
        d = rng.choice(values, p=probs, size=(runs, tests))
        print(f"| {name} | - | {rate(int((simulate_stops(d, alpha)[0] != 0).sum()), runs)} | "
              f"{rate(int((prpl_stops(d, alpha)[0] != 0).sum()), runs)} |")
    print("\n### Alternatives (A better by the logit ability gap; 1 attempt): decided right, tests used, calls saved,"
          " agreement with the full-run verdict\n")
    print("| ability gap | true Δ pass rate | bets | A better | B better | median tests used when decided | calls "
          "saved | full run says A better | same verdict (both decided) |")
    print("|---|---|---|---|---|---|---|---|---|")
    from simulate import true_pass_rate

    verdict_runs = min(runs, 2000)   # the full-run verdicts cost one comparison per run
    for gap in (0.25, 0.5, 1.0, 1.5, 2.0):
        d, passed = draw(np.random.default_rng(int(gap * 100)), (gap, 0.0), verdict_runs, tests, 1)
        full = full_run_verdicts(passed, verdict_runs)
        delta = true_pass_rate(gap, 1.5, 0.0) - true_pass_rate(0.0, 1.5, 0.0)
        for label, stops in (("aGRAPA", simulate_stops), ("plug-in", prpl_stops)):
            sign, used = stops(d, alpha)
            both = (sign != 0) & (full != 0)
            agree = f"{(sign[both] == full[both]).mean():.1%} of {both.sum()}" if both.any() else "-"
            median = f"{np.median(used[sign != 0]):.0f}" if (sign != 0).any() else "-"
            print(f"| {gap} | {delta:+.3f} | {label} | {(sign > 0).mean():.1%} | {(sign < 0).mean():.1%} | {median} | "
                  f"{1 - used.sum() / used.size / tests:.0%} | {(full > 0).mean():.1%} | {agree} |")


# --- a real run folder ---------------------------------------------------------------------------------------

FIXTURES = ROOT / "tests" / "fixtures" / "until_decided"   # the suite and models, shared with tests/local


def engine(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, env=env,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"engine {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done


def real(orders: int, alpha: float) -> None:
    work = Path(tempfile.mkdtemp(prefix="until-decided-"))
    out = work / "results"
    started = time.monotonic()
    seq = engine("run", str(FIXTURES / "suites"), "--models", str(FIXTURES / "models.yaml"), "--until-decided",
                 "gemma-fewshot,gemma-chat", "--seed", "1", "--no-cache", "--out", str(out), "--run-id", "seq",
                 "--quiet")
    seq_s = time.monotonic() - started
    run_dir = out / "seq"
    decision = json.loads((run_dir / "_manifest.json").read_text())["until_decided"]
    print(f"## A real run folder: {run_dir}\n")
    print(seq.stdout.strip().splitlines()[-2] if "until-decided" in seq.stdout else seq.stdout)
    started = time.monotonic()
    engine("run", "--resume", str(run_dir), "--no-cache", "--quiet")
    rest_s = time.monotonic() - started
    report = json.loads(engine("analyze", str(run_dir), "--format", "json").stdout)
    (comparison,) = report["comparisons"]
    print(f"\nuntil-decided: {decision['verdict']} after {decision['tests_used']} of {decision['tests_in_suite']} "
          f"tests; {decision['jobs_made']} of {decision['jobs_full_run']} calls ({decision['jobs_saved']} saved, "
          f"{decision['jobs_saved'] / decision['jobs_full_run']:.0%}); {seq_s:.0f} s, the rest by --resume "
          f"{rest_s:.0f} s")
    print(f"full run (engine analyze on the completed folder): {comparison['verdict']}")
    replay(run_dir, decision["model_a"], decision["model_b"], orders, alpha)


def replay(run_dir: Path, a: str, b: str, orders: int, alpha: float) -> None:
    """The decision over `orders` seeded random orders of a completed folder's per-test differences (no calls)."""
    import pandas as pd

    df = pd.read_parquet(run_dir, columns=["model", "suite", "test_id", "case_index", "score", "error_kind"])
    df = df[df["model"].isin([a, b]) & df["error_kind"].isna() & df["score"].notna()]
    df["case_index"] = df["case_index"].fillna(-1)
    cells = df.groupby(["suite", "test_id", "case_index", "model"])["score"].mean().unstack("model").dropna()
    per_test = (cells[a] - cells[b]).groupby(level=["suite", "test_id"]).mean().to_numpy()
    rng = np.random.default_rng(0)
    d = np.stack([rng.permutation(per_test) for _ in range(orders)])
    sign, used = simulate_stops(d, alpha)
    verdict = {1: f"{a} better", -1: f"{b} better", 0: "undecided"}
    counts = {verdict[s]: int((sign == s).sum()) for s in (1, -1, 0) if (sign == s).any()}
    print(f"\nreplayed over {orders} seeded orders of the {len(per_test)} paired tests (mean difference "
          f"{per_test.mean():+.3f}): verdicts {counts}; tests used median {np.median(used):.0f}, "
          f"10-90% {np.percentile(used, 10):.0f}-{np.percentile(used, 90):.0f}; calls saved (A and B) "
          f"{1 - used.mean() / len(per_test):.0%} on average")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    parser.add_argument("--real", action="store_true", help="also the real run folder (needs the [local] extra)")
    parser.add_argument("--skip-simulation", action="store_true")
    parser.add_argument("--orders", type=int, default=1000)
    parser.add_argument("--replay", type=Path, help="replay the decision on this completed run folder")
    parser.add_argument("--a")
    parser.add_argument("--b")
    args = parser.parse_args()
    if args.replay is not None:
        replay(args.replay, args.a, args.b, args.orders, args.alpha)
        return
    if not args.skip_simulation:
        started = time.monotonic()
        simulation(args.runs, args.alpha)
        print(f"\n(simulation {time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.1f})\n")
    if args.real:
        real(args.orders, args.alpha)


if __name__ == "__main__":
    main()
