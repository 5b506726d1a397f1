"""Benchmark: `engine analyze` past memory — 100M synthetic rows in 200 run folders, pandas path vs DuckDB path.

Each run folder is one sweep slice: 5 of 50 models × 20,000 tests × 5 repeats = 500,000 rows, so 200 folders
give 100M rows and every (test, model) cell gathers 50 attempts from 10 runs — a quarter's sweeps. Every
measurement is a fresh process (`engine analyze --format json --engine E`), timed from outside, its peak
memory read from the kernel (ru_maxrss of the child). Baselines in the same run: the pandas path on the
slice it can hold, and a bare DuckDB scan (one `avg(score) GROUP BY model` over the same files: the least
any out-of-core analysis must do).

    python bench/bench_analyze_large.py [--folders 200] [--pandas-folders 20] [--keep DIR]
    python bench/bench_analyze_large.py --paired BASE_TREE --folders 40 [--tests 20000] [--repeat 3] [--keep DIR]

`--paired BASE_TREE` measures this tree against another checkout of the project (e.g.
`git archive f4a67ce | tar -x -C /tmp/base`): the two run interleaved (base, this, base, this, ...) on the same
files, each a fresh process with `PYTHONPATH` set to its tree, and every figure is wall seconds, CPU seconds
(user + system of the child) and peak RSS. `--tests` sets the tests per run folder (20,000 by default; 2,000
gives the 20M-row layout's per-test shape, 50 models × 20 attempts, in a tenth of the rows).

The pandas path is not run at 100M rows: at the measured bytes per row it would need far more memory than
this 24 GiB machine has (the bench prints the estimate instead of taking the machine down).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MODELS, TESTS, REPEATS, MODELS_PER_RUN = 50, 20_000, 5, 5


def write_folder(folder: Path, index: int, tests: int = TESTS) -> int:
    """One run folder: 5 models (cycling over 50) × TESTS × REPEATS rows, the analysis columns only."""
    rng = np.random.default_rng(index)
    first = (index * MODELS_PER_RUN) % MODELS
    models = np.arange(first, first + MODELS_PER_RUN)
    n = MODELS_PER_RUN * tests * REPEATS
    model = np.repeat(models, tests * REPEATS)
    test = np.tile(np.repeat(np.arange(tests), REPEATS), MODELS_PER_RUN)
    ability = np.random.default_rng(99).normal(0, 1, MODELS)[model]
    difficulty = np.random.default_rng(98).normal(0, 1.5, tests)[test]
    passed = rng.random(n) < 1 / (1 + np.exp(-(ability - difficulty)))
    score = passed.astype("float64")
    error = rng.random(n) < 0.01
    score[error] = np.nan
    model_names = pa.array([f"model-{m:02d}" for m in range(MODELS)])
    test_names = pa.array([f"test-{t:05d}" for t in range(tests)])
    table = pa.table({
        "run_id": pa.array([f"run-{index:03d}"]).take(pa.array(np.zeros(n, "int32"))),
        "model": model_names.take(pa.array(model)), "fallback": pa.array(np.zeros(n, bool)),
        "suite": pa.array(["bench"]).take(pa.array(np.zeros(n, "int32"))),
        "test_id": test_names.take(pa.array(test)), "test_hash": test_names.take(pa.array(test)),
        "case_index": pa.nulls(n, pa.int64()), "attempt": pa.array(np.tile(np.arange(REPEATS), n // REPEATS)),
        "prompt_tokens": pa.array(rng.integers(20, 400, n)), "completion_tokens": pa.array(rng.integers(1, 200, n)),
        "latency_s": pa.array(rng.gamma(2, 0.5, n)), "ttft_visible_s": pa.array(rng.gamma(2, 0.05, n)),
        "truncated": pa.array(rng.random(n) < 0.02), "cost": pa.array(rng.random(n) / 1000),
        "score": pa.array(score, from_pandas=True),
        "passed": pa.array(passed, mask=error), "threshold": pa.array(np.ones(n)),
        "error_kind": pa.array(np.where(error, "timeout", None)),
        "temperature": pa.array(np.zeros(n)),
    })
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "part-00000.parquet", row_group_size=250_000)
    return n


def child(engine: str, folders: list[str]) -> None:
    """Run one analysis in this process and print its time and peak memory (the measured side)."""
    from typer.testing import CliRunner

    from engine.cli import app

    start = time.perf_counter()
    result = CliRunner().invoke(app, ["analyze", *folders, "--format", "json", "--engine", engine])
    seconds = time.perf_counter() - start
    if result.exit_code != 0:
        raise SystemExit(f"analyze failed: {result.output[-2000:]}")
    models = json.loads(result.stdout)["models"]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"seconds": seconds, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024,
                      "rows": int(sum(m["rows"] for m in models))}))


def bare_duckdb(folders: list[str]) -> None:
    """The baseline: one grouped mean over the same files, nothing else."""
    import duckdb

    start = time.perf_counter()
    files = [str(Path(f) / "part-00000.parquet") for f in folders]
    duckdb.sql(f"SELECT model, avg(score) FROM read_parquet({files!r}) GROUP BY model").fetchall()
    print(json.dumps({"seconds": time.perf_counter() - start,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def measure(args: list[str], tree: Path | None = None) -> dict:
    """One fresh child process; `tree` (a project checkout) goes first on its PYTHONPATH."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:] or out.stdout[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folders", type=int, default=200)
    parser.add_argument("--pandas-folders", type=int, default=20)
    parser.add_argument("--keep", type=Path, help="Write (or reuse) the run folders here instead of a temp dir.")
    parser.add_argument("--tests", type=int, default=TESTS, help="Tests per run folder.")
    parser.add_argument("--paired", type=Path, help="Another checkout to measure against, interleaved.")
    parser.add_argument("--repeat", type=int, default=3, help="Rounds of the paired measurement.")
    parser.add_argument("--engines", default="pandas,duckdb", help="Paths measured by --paired.")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--bare", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1:])
        return 0
    if args.bare:
        bare_duckdb(args.bare)
        return 0

    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-large-"))
    start = time.perf_counter()
    folders, rows = [], 0
    for i in range(args.folders):
        folder = base / f"run-{i:03d}"
        part = folder / "part-00000.parquet"
        rows += pq.ParquetFile(part).metadata.num_rows if part.exists() else write_folder(folder, i, args.tests)
        folders.append(str(folder))
    size = sum(os.path.getsize(Path(f) / "part-00000.parquet") for f in folders)
    print(f"data: {rows:,} rows in {len(folders)} run folders, {size / 1e9:.2f} GB of Parquet "
          f"(written or found in {time.perf_counter() - start:.0f} s) under {base}")
    if args.paired:
        return paired(args.paired, folders, rows, args.engines.split(","), args.repeat)
    small = folders[: args.pandas_folders]
    small_rows = rows * len(small) // len(folders)
    print(f"\n{'path':<34} {'rows':>12} {'seconds':>9} {'peak MB':>9}")
    results = {}
    for name, cmd, n in [
        ("bare DuckDB scan (baseline)", ["--bare", *small], small_rows),
        ("pandas path", ["--child", "pandas", *small], small_rows),
        ("DuckDB path", ["--child", "duckdb", *small], small_rows),
        ("bare DuckDB scan (baseline)", ["--bare", *folders], rows),
        ("DuckDB path", ["--child", "duckdb", *folders], rows),
    ]:
        got = measure(cmd)
        results[(name, n)] = got
        print(f"{name:<34} {n:>12,} {got['seconds']:>9.1f} {got['peak_mb']:>9.0f}", flush=True)
    pandas = results[("pandas path", small_rows)]
    per_row = pandas["peak_mb"] * 1e6 / small_rows
    print(f"\npandas path: {per_row:.0f} bytes of peak memory per row; {rows:,} rows would need about "
          f"{per_row * rows / 1e9:.0f} GB (not run)")
    duck = results[("DuckDB path", rows)]
    bare = results[("bare DuckDB scan (baseline)", rows)]
    print(f"DuckDB path at {rows:,} rows: {duck['seconds'] / bare['seconds']:.1f}x the bare scan, "
          f"{duck['peak_mb']:.0f} MB peak")
    return 0


def paired(base: Path, folders: list[str], rows: int, engines: list[str], rounds: int) -> int:
    """Base tree and this tree interleaved on the same files: wall, CPU and peak RSS per run, then medians."""
    this = Path(__file__).resolve().parents[1]
    print(f"load average before: {os.getloadavg()[0]:.1f}; base {base}, this {this}")
    print(f"\n{'engine':<7} {'tree':<5} {'round':>5} {'wall s':>8} {'CPU s':>8} {'peak MB':>8} {'load':>5}")
    got: dict[tuple[str, str], list[dict]] = {}
    for r in range(rounds):
        for engine in engines:
            for name, tree in (("base", base), ("this", this)):
                m = measure(["--child", engine, *folders], tree)
                if m["rows"] != rows:
                    raise SystemExit(f"{engine} on the {name} tree analysed {m['rows']:,} rows, not {rows:,}")
                got.setdefault((engine, name), []).append(m)
                print(f"{engine:<7} {name:<5} {r:>5} {m['seconds']:>8.1f} {m['cpu_s']:>8.1f} {m['peak_mb']:>8.0f} "
                      f"{os.getloadavg()[0]:>5.1f}", flush=True)
    if not rounds:
        return 0  # `--repeat 0`: write (or check) the data only
    print(f"\nmedians over {rounds} rounds, {rows:,} rows:")
    for engine in engines:
        b, t = got[(engine, "base")], got[(engine, "this")]
        med = {k: (float(np.median([m[k] for m in b])), float(np.median([m[k] for m in t])))
               for k in ("seconds", "cpu_s", "peak_mb")}
        ratio = float(np.median([x["seconds"] / y["seconds"] for x, y in zip(b, t, strict=True)]))
        print(f"{engine}: wall {med['seconds'][0]:.1f} -> {med['seconds'][1]:.1f} s (paired ratio {ratio:.1f}x), "
              f"CPU {med['cpu_s'][0]:.1f} -> {med['cpu_s'][1]:.1f} s, peak {med['peak_mb'][0]:.0f} -> "
              f"{med['peak_mb'][1]:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
