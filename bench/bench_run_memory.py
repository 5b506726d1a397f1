"""Benchmark: peak memory of a whole `engine run` against the suite's size, at 20,000 and 200,000 tests.

What a user feels: whether a benchmark of 200,000 questions runs on the laptop that runs 20,000. Each measure is a
whole `python -m engine run` process (its peak RSS and CPU, user + system, read by wait4 as bench_run.py reads them)
against bench/mock_server.py (its own process, canned answers, no work to speak of), with `engine run`'s defaults:
64 calls in flight, streamed, the response cache on (a new, empty file each run).

The suites: single-turn tests, one `contains` check each, in one of two shapes:

- `csv` (default): one test definition whose case rows come from a CSV file (`cases_from:`), the form a large
  benchmark takes; the file is read a row at a time;
- `inline`: the same rows written into the suite file (`cases:`); the YAML, with the position of every value,
  is held while the file is checked, so this shape's peak grows with the file (~1.7 KB a row).

Run: `.venv/bin/python bench/bench_run_memory.py [--tests 20000,200000] [--shape csv|inline|both]
[--against TREE] [--rounds N]`. `--against TREE` (an export of another commit, `git archive <commit> | tar -x -C
TREE`) measures TREE too, the two trees taking turns going first. One JSON line per run, then a table.

Target: the peak at 200,000 tests (csv) within 50 MB of the peak at 20,000. Figures go to bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_run import whole_process  # this folder is the script's first import path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TARGET_MB = 50.0


def write_suite(folder: Path, tests: int, shape: str, base_url: str) -> Path:
    """The suite (and its CSV, and a models file) for `tests` single-turn tests; returns the suite file."""
    head = "suite: bench\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"say ok {{ n }}\"\n    eval: {contains: ok}\n"
    suite = folder / "bench.yaml"
    if shape == "csv":
        (folder / "rows.csv").write_text("n\n" + "".join(f"{i}\n" for i in range(tests)))
        suite.write_text(head + "    cases_from: rows.csv\n")
    else:
        suite.write_text(head + "    cases:\n" + "".join(f"      - {{n: {i}}}\n" for i in range(tests)))
    (folder / "models.yaml").write_text(f"models:\n  bench:\n    base_url: {base_url}\n    model: bench-model\n"
                                        "    concurrency: 64\n")
    return suite


def measure(tree: Path, tests: int, shape: str, base_url: str) -> dict:
    """One whole `python -m engine run` of `tree` (bench_run.whole_process: wall and CPU seconds, peak RSS)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        suite = write_suite(folder, tests, shape, base_url)
        env = dict(os.environ, PYTHONPATH=str(tree), ENGINE_RESPONSE_CACHE=str(folder / "cache.sqlite"),
                   ENGINE_MAX_SUITE_MB="100")   # the inline suite of 200,000 rows is 4.4 MB; older trees ignore it
        result = whole_process([sys.executable, "-m", "engine", "run", str(suite), "--models",
                                str(folder / "models.yaml"), "--out", str(folder / "results"), "--quiet"],
                               env=env, cwd=tree)
    return {"shape": shape, "tests": tests, **{k: round(v, 2) for k, v in result.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", default="20000,200000", help="comma-separated test counts")
    parser.add_argument("--shape", default="csv", choices=["csv", "inline", "both"])
    parser.add_argument("--against", type=Path, help="another tree to measure in the same rounds")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    counts = [int(n) for n in args.tests.split(",")]
    shapes = ["csv", "inline"] if args.shape == "both" else [args.shape]
    trees = {"this tree": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    server = subprocess.Popen([sys.executable, str(HERE / "mock_server.py")], stdout=subprocess.PIPE, text=True)
    series: dict[tuple[str, str, int], list[dict]] = {}
    try:
        assert server.stdout is not None
        base_url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
        for n in range(args.rounds):
            for shape in shapes:
                for tests in counts:
                    order = list(trees) if n % 2 == 0 else list(reversed(trees))
                    for name in order:
                        result = measure(trees[name], tests, shape, base_url)
                        result["round"], result["tree"] = n, name
                        print(json.dumps(result), flush=True)
                        series.setdefault((name, shape, tests), []).append(result)
    finally:
        server.terminate()
        server.wait(5)
    print(f"\n{args.rounds} round(s), medians; load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'tree':<10} {'shape':<7} {'tests':>8} {'peak MB':>8} {'CPU s':>7} {'wall s':>7}")
    for (name, shape, tests), runs in series.items():
        peak, cpu, wall = (statistics.median(r[k] for r in runs) for k in ("peak_rss_mb", "cpu_s", "wall_s"))
        print(f"{name:<10} {shape:<7} {tests:>8,} {peak:>8.1f} {cpu:>7.2f} {wall:>7.1f}")
    met = True
    for name in trees:
        for shape in shapes:
            peaks = [statistics.median(r["peak_rss_mb"] for r in series[(name, shape, t)]) for t in counts]
            growth = peaks[-1] - peaks[0]
            print(f"{name}, {shape}: peak at {counts[-1]:,} tests - peak at {counts[0]:,} = {growth:+.1f} MB"
                  + (f" (target < {TARGET_MB:g} MB)" if name == "this tree" and shape == "csv" else ""))
            if name == "this tree" and shape == "csv":
                met = met and growth < TARGET_MB
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
