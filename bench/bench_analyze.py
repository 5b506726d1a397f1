"""Benchmark: `engine analyze` tables over 1,000,000 synthetic rows (20 models × 5,000 tests × 10 repeats).

Target: per-test (with the exact model × outcome test) and per-model tables in ≤ 5 s. Reports each step and,
as the baseline measured in the same script, a plain pandas groupby mean per (model, test) - the least
any analysis must do - so the ratio says what the statistics cost on top of it.

    python bench/bench_analyze.py [--rows-scale 1.0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def synthetic_table(n_models: int, n_tests: int, repeats: int, seed: int = 0) -> pa.Table:
    """Analysis columns of a realistic run: model ability × test difficulty, noisy attempts, some errors."""
    rng = np.random.default_rng(seed)
    n = n_models * n_tests * repeats
    model = np.repeat(np.arange(n_models), n_tests * repeats)
    test = np.tile(np.repeat(np.arange(n_tests), repeats), n_models)
    attempt = np.tile(np.arange(repeats), n_models * n_tests)
    ability = rng.normal(0, 1, n_models)[model]
    difficulty = rng.normal(0, 1.5, n_tests)[test]
    p = 1 / (1 + np.exp(-(ability - difficulty)))
    passed = rng.random(n) < p
    score = passed.astype("float64")
    error = rng.random(n) < 0.01
    score[error] = np.nan
    return pa.table({
        "run_id": pa.array(["bench"] * n), "model": pa.array([f"model-{m:02d}" for m in range(n_models)])
        .take(pa.array(model)), "fallback": pa.array(np.zeros(n, bool)), "suite": pa.array(["bench"] * n),
        "test_id": pa.array([f"test-{t:05d}" for t in range(n_tests)]).take(pa.array(test)),
        "test_hash": pa.array([f"h{t}" for t in range(n_tests)]).take(pa.array(test)),
        "case_index": pa.nulls(n, pa.int32()), "attempt": pa.array(attempt.astype("int32")),
        "tags": pa.array([["bench"]] * n, pa.list_(pa.string())),
        "prompt_tokens": pa.array(rng.integers(20, 400, n)), "completion_tokens": pa.array(rng.integers(1, 200, n)),
        "latency_s": pa.array(rng.gamma(2, 0.5, n)), "ttft_visible_s": pa.array(rng.gamma(2, 0.05, n)),
        "truncated": pa.array(rng.random(n) < 0.02), "cost": pa.nulls(n, pa.float64()),
        "score": pa.array(score, from_pandas=True), "passed": pa.array(np.where(error, None, passed).tolist()),
        "threshold": pa.array(np.ones(n)), "error_kind": pa.array(np.where(error, "timeout", None).tolist()),
    })


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--tests", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    from engine.analysis import ANALYSIS_COLUMNS, build_cells, load, per_model, per_test

    table = synthetic_table(args.models, args.tests, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        run.mkdir()
        pq.write_table(table, run / "part-00000.parquet")
        t0 = time.perf_counter()
        df = load(run, columns=ANALYSIS_COLUMNS)
        t_load = time.perf_counter() - t0
    rows = len(df)
    t0 = time.perf_counter()
    df.groupby(["model", "suite", "test_id"], observed=True)["score"].mean()
    t_baseline = time.perf_counter() - t0
    t0 = time.perf_counter()
    cells = build_cells(df)
    t_cells = time.perf_counter() - t0
    t0 = time.perf_counter()
    models = per_model(df, cells=cells)
    t_models = time.perf_counter() - t0
    t0 = time.perf_counter()
    tests = per_test(df, cells=cells)
    t_tests = time.perf_counter() - t0
    tables = t_cells + t_models + t_tests
    from engine.analysis import analyze

    t0 = time.perf_counter()
    analyze(df)
    t_all = time.perf_counter() - t0
    print(f"rows                         {rows:,}  ({args.models} models × {args.tests} tests × {args.repeats})")
    print(f"load (analysis columns)      {t_load:6.2f} s")
    print(f"baseline groupby mean        {t_baseline:6.2f} s")
    print(f"grid (test × model cells)    {t_cells:6.2f} s")
    print(f"per_model (t-intervals)      {t_models:6.2f} s")
    print(f"per_test                     {t_tests:6.2f} s")
    print(f"tables total                 {tables:6.2f} s  = {tables / t_baseline:.1f}× the baseline groupby")
    print(f"analyze() everything         {t_all:6.2f} s  (tables + suite health + best vs each of the others)")
    print(f"target ≤ 5 s for the tables: {'met' if tables <= 5 else 'MISSED'}")
    assert len(models) == args.models and len(tests) == args.tests
    return 0 if tables <= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
