"""Benchmark: `engine analyze` and `engine view` on run folders of 1,000,000 rows, in the two shapes runs take.

- `attempts`: few tests, many attempts: 100 tests × 5 models × 2,000 attempts (a sampling study);
- `tests`: many tests, one attempt: 200,000 tests × 5 models (a large benchmark: four suites, one of them
  templated with five cases a test);
- `tests-250k` (only when asked for): the `tests` shape at a quarter, 250,000 rows: the smallest run whose end
  writes the viewer's snapshot, so its first open without one is the slowest a finished run's can be.

Each is a real run folder as `engine run` leaves it: the whole results schema in `part-NNNNN.parquet` files of
5,000 rows (the results writer's part size, zstd), rows in the order a run commits them, and `_manifest.json`.
Every figure is a fresh process of the tree measured (`python -m engine ...` with the tree first on PYTHONPATH):

- `engine analyze RUN`: wall seconds and peak RSS of the whole process;
- the run's end: what `engine run` (and `engine rescore`) does once its rows are written to a run this large,
  `engine.cli.view_cmd.prepare_snapshot` (the viewer's snapshot, engine/view/cache.py): wall, CPU and peak RSS;
- `engine view RUN`: the page's first requests as the browser makes them (the runs list, then the run's
  summary and its first grid page together), a filtered grid page, and `/api/summary` again; each the wall
  time of its HTTP request. Three times per tree: the first open of the run as its end left it, the first open
  of a run without a snapshot (a run killed before its end, or written by an older engine), and a second
  `engine view` over the same folder (whatever the one before left beside the run).

Baseline in the same rounds: a bare pyarrow read of the analysis columns of the same files (the least any
analysis must read). `--against DIR` measures another checkout (e.g. `git archive main | tar -x -C DIR`) in
turns with this one, on the same files.

    python bench/bench_large_runs.py [--shapes attempts,tests] [--rounds 1] [--against DIR] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.results.schema import EVALUATOR_NODE, SCHEMA  # noqa: E402

PART_ROWS = 5_000            # engine.results.writer.ResultsWriter's rows_per_part
MODELS = ("atlas-large", "atlas-small", "birch-2", "cedar-mini", "dune-7b")
ABILITY = (1.2, 0.4, 0.9, -0.3, 0.1)
SHAPES = {
    # name: (suites with (test ids, cases per test), attempts, temperature)
    "attempts": ((("sampling", 50, 0), ("reasoning", 50, 0)), 2_000, 0.7),
    "tests": ((("arith", 50_000, 0), ("code", 50_000, 0), ("qa", 50_000, 0), ("templated", 10_000, 5)), 1, 0.0),
    # The `tests` shape at a quarter: 250,000 rows, the smallest run whose end writes the viewer's snapshot.
    "tests-250k": ((("arith", 12_500, 0), ("code", 12_500, 0), ("qa", 12_500, 0), ("templated", 2_500, 5)), 1,
                   0.0),
}
ANALYSIS_READ = ("run_id", "model", "fallback", "suite", "test_id", "test_hash", "case_index", "attempt", "tags",
                 "prompt_tokens", "completion_tokens", "latency_s", "ttft_visible_s", "truncated", "cost", "score",
                 "passed", "threshold", "error_kind", "temperature", "variant", "cached")


def _items(shape: str) -> tuple[list[str], list[str], np.ndarray, list[list[str]]]:
    """The shape's tests in run order: suite, test id, case index (-1: none), tags."""
    suites, ids, cases, tags = [], [], [], []
    for suite, count, per in SHAPES[shape][0]:
        for t in range(count):
            for c in range(max(per, 1)):
                suites.append(suite)
                ids.append(f"{suite}-{t:05d}")
                cases.append(c if per else -1)
                tags.append([suite] + (["hard"] if t % 10 == 0 else []))
    return suites, ids, np.array(cases), tags


def write_run(folder: Path, shape: str, seed: int = 0) -> int:
    """One run folder of the shape; returns its rows."""
    rng = np.random.default_rng(seed)
    suites, ids, cases, tags = _items(shape)
    attempts, temperature = SHAPES[shape][1], SHAPES[shape][2]
    n_items, n_models = len(ids), len(MODELS)
    n = n_items * n_models * attempts
    # Run order: test by test, each test's attempts, every model's call of one attempt together.
    item = np.repeat(np.arange(n_items), n_models * attempts)
    attempt = np.tile(np.repeat(np.arange(attempts), n_models), n_items)
    model = np.tile(np.arange(n_models), n_items * attempts)
    difficulty = rng.normal(0.0, 1.5, n_items)
    chance = 1.0 / (1.0 + np.exp(-(np.asarray(ABILITY)[model] - difficulty[item])))
    passed = rng.random(n) < chance
    error = rng.random(n) < 0.01
    truncated = rng.random(n) < 0.02
    folder.mkdir(parents=True, exist_ok=True)
    item_tables = {
        "suite": pa.array(suites), "test_id": pa.array(ids),
        "test_hash": pa.array([f"{(k * 2654435761) % 2**64:016x}" for k in range(n_items)]),
        "case_index": pa.array(np.where(cases < 0, 0, cases).astype("int32"), mask=cases < 0),
        "tags": pa.array(tags, pa.list_(pa.string())),
        "prompt": pa.array([json.dumps([{"role": "user", "content": f"Question {i} of {s}: what is {k} + {k}?"}])
                            for k, (s, i) in enumerate(zip(suites, ids, strict=True))]),
    }
    answers = pa.array([f"The answer is {k}." for k in range(1000)] + ["I found the needle: 42."])
    nodes = pa.array([[{"path": "contains", "kind": "contains", "score": 0.0, "weight": 1.0, "passed": False,
                        "error": False, "reason": "expected text not found"}],
                      [{"path": "contains", "kind": "contains", "score": 1.0, "weight": 1.0, "passed": True,
                        "error": False, "reason": "found"}], None], pa.list_(EVALUATOR_NODE))
    start = np.datetime64("2026-12-01T10:00:00", "us")
    for part, first in enumerate(range(0, n, PART_ROWS)):
        rows = slice(first, min(n, first + PART_ROWS))
        m, it, ok, err = model[rows], item[rows], passed[rows], error[rows]
        size = len(m)
        local = np.random.default_rng((seed, part))
        prompt_tokens = local.integers(20, 400, size)
        completion_tokens = local.integers(1, 200, size)
        began = start + (first + np.arange(size)) * np.timedelta64(20, "ms")
        latency = local.gamma(2.0, 0.5, size)
        answer = np.where(it % 1000 == 7, 1000, local.integers(0, 1000, size))
        columns: dict[str, pa.Array] = {
            "schema_version": pa.array(np.ones(size, "int16")),
            "run_id": pa.array(np.full(size, f"2026-12-01T100000Z-{shape}")),
            "model": pa.array(np.asarray(MODELS, dtype=object)[m]),
            "model_id": pa.array(np.asarray(MODELS, dtype=object)[m]),
            "served_model": pa.array(np.asarray(MODELS, dtype=object)[m]),
            "fallback": pa.array(np.zeros(size, bool)), "api": pa.array(np.full(size, "chat")),
            "attempt": pa.array(attempt[rows].astype("int32")),
            "temperature": pa.array(np.full(size, temperature)), "max_tokens": pa.array(np.full(size, 256, "int32")),
            "answer": answers.take(pa.array(answer)).cast(pa.string()),
            "finish_reason": pa.array(np.where(truncated[rows], "length", "stop")),
            "prompt_tokens": pa.array(prompt_tokens), "completion_tokens": pa.array(completion_tokens),
            "latency_s": pa.array(latency), "ttft_provider_s": pa.array(latency * 0.1),
            "ttft_visible_s": pa.array(latency * 0.12), "retries": pa.array(np.zeros(size, "int32")),
            "truncated": pa.array(truncated[rows]),
            "cost": pa.array((prompt_tokens * 1.0 + completion_tokens * 2.0) / 1e6),
            "score": pa.array(ok.astype("float64"), mask=err), "passed": pa.array(ok, mask=err),
            "threshold": pa.array(np.ones(size)),
            "error_kind": pa.array(np.where(err, "timeout", None)),
            "error_message": pa.array(np.where(err, "the model did not answer within 60 s", None)),
            "evaluators": nodes.take(pa.array(np.where(err, 2, ok.astype("int64")))),
            "started_at": pa.array(began), "ended_at": pa.array(began + (latency * 1e6).astype("timedelta64[us]")),
            "cached": pa.array(np.zeros(size, bool)),
        }
        taken = pa.array(it)
        for name, values in item_tables.items():
            columns[name] = values.take(taken)
        arrays = [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(size, f.type) for f in SCHEMA]
        pq.write_table(pa.Table.from_arrays(arrays, schema=SCHEMA), folder / f"part-{part:05d}.parquet",
                       compression="zstd")
    manifest = {
        "run_id": f"2026-12-01T100000Z-{shape}", "schema_version": 1, "engine_version": "bench",
        "started_at": "2026-12-01T10:00:00Z", "ended_at": "2026-12-01T16:00:00Z", "interrupted": False,
        "stopped": None, "complete": True,
        "models": [{"name": name} for name in MODELS],
        "counts": {"rows": n, "errors": int(error.sum()), "parts": (n + PART_ROWS - 1) // PART_ROWS},
    }
    (folder / "_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return n


def ensure_run(base: Path, shape: str) -> Path:
    """The shape's run folder under `base`, written unless a complete one is there."""
    folder = base / shape / f"2026-12-01T100000Z-{shape}"
    if not (folder / "_manifest.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        start = time.perf_counter()
        rows = write_run(folder, shape)
        print(f"wrote {folder} ({rows:,} rows) in {time.perf_counter() - start:.0f} s", flush=True)
    return folder


def _env(tree: Path) -> dict[str, str]:
    """The tree first on the path; bytecode cached as a user's installation has it."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system, all its threads), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def _peak_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def measure_analyze(tree: Path, run: Path, timeout: float) -> dict[str, Any]:
    """`engine analyze RUN` in a fresh process: wall seconds and peak RSS (the child's own rusage); stopped at
    `timeout` (its wall is then None)."""
    with tempfile.TemporaryDirectory() as cwd:   # `python -m` puts the working folder first on sys.path
        out, err = Path(cwd) / "stdout", Path(cwd) / "stderr"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            start = time.perf_counter()
            child = subprocess.Popen([sys.executable, "-m", "engine", "analyze", str(run)], cwd=cwd,
                                     env=_env(tree), stdout=stdout, stderr=stderr)
            timer = threading.Timer(timeout, child.kill)
            timer.start()
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.perf_counter() - start
            timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        cpu = usage.ru_utime + usage.ru_stime
        if wall >= timeout:
            return {"wall_s": None, "cpu_s": None, "peak_mb": usage.ru_maxrss / 1024, "chars": 0}
        if child.returncode != 0:
            raise SystemExit(f"engine analyze failed in {tree}: {err.read_text()[-2000:]}")
        return {"wall_s": wall, "cpu_s": cpu, "peak_mb": usage.ru_maxrss / 1024, "chars": out.stat().st_size}


def measure_run_end(tree: Path, run: Path, rows: int, timeout: float) -> dict[str, Any] | None:
    """The run's end in a fresh process: the viewer's snapshot prepared as `engine run` prepares it (None: the
    tree has no such step)."""
    code = ("import sys; from pathlib import Path; from engine.cli.view_cmd import prepare_snapshot; "
            "prepare_snapshot(Path(sys.argv[1]), int(sys.argv[2]))")
    with tempfile.TemporaryDirectory() as cwd:
        probe = subprocess.run([sys.executable, "-c", "import engine.cli.view_cmd as m; print(hasattr(m, "
                                "'prepare_snapshot'))"], cwd=cwd, env=_env(tree), capture_output=True, text=True,
                               check=False)
        if probe.stdout.strip() != "True":
            return None
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", code, str(run), str(rows)], cwd=cwd, env=_env(tree),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        timer = threading.Timer(timeout, child.kill)
        timer.start()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        timer.cancel()
    if os.waitstatus_to_exitcode(status) != 0 or wall >= timeout:
        raise SystemExit(f"the run's end failed or took over {timeout:.0f} s in {tree}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def _get(base: str, path: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    query = "&".join(f"{k}={urllib.request.quote(str(v))}" for k, v in params.items())
    with urllib.request.urlopen(f"{base}/api/{path}?{query}", timeout=timeout) as reply:
        return json.loads(reply.read())


def _together(timeout: float, *calls: tuple[str, str, dict[str, Any]]) -> tuple[float | None, list[Any]]:
    """Requests made at once (as the page makes them): the time until the last is answered (None: not within
    `timeout`), and their JSON."""
    results: list[Any] = [None] * len(calls)

    def one(i: int, call: tuple[str, str, dict[str, Any]]) -> None:
        try:
            results[i] = _get(*call, timeout)
        except Exception as exc:   # noqa: BLE001 - a timeout or an error answer: reported by the caller
            results[i] = exc

    start = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    failed = [r for r in results if isinstance(r, Exception)]
    if failed and not isinstance(failed[0], (TimeoutError, OSError)):
        raise failed[0]
    return (None if failed else seconds), results


def measure_view(tree: Path, run: Path, filtered: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One `engine view RUN` process, requests as the browser makes them: the runs page (`/api/runs`), the run's
    page (`/api/summary` and the first `/api/grid` page together), a filtered grid page, `/api/summary` again.
    A request not answered within `timeout` is None, and the ones after it are not made."""
    out: dict[str, Any] = {"ready_s": None, "runs_s": None, "run_page_s": None, "filtered_s": None,
                           "summary_again_s": None, "peak_mb": None, "cpu_s": None, "tests": None,
                           "filtered_total": None}
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "engine", "view", str(run), "--port", "0"], cwd=cwd,
                                 env=_env(tree), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            found = re.search(r"(http://\S+)", line)
            if not found:
                raise SystemExit(f"engine view printed no URL: {line!r} {child.stderr.read() if child.stderr else ''}")
            base = found.group(1).split("?")[0].rstrip("/")
            out["ready_s"] = time.perf_counter() - start
            out["runs_s"], (runs,) = _together(timeout, (base, "runs", {}))
            if out["runs_s"] is not None:
                name = runs[0]["run"]
                out["run_page_s"], (_, page) = _together(timeout, (base, "summary", {"run": name}),
                                                         (base, "grid", {"run": name, "limit": 50}))
            if out["run_page_s"] is not None:
                out["tests"] = page["total"]
                out["filtered_s"], (chosen,) = _together(timeout, (base, "grid", {"run": name, "limit": 50,
                                                                                  **filtered}))
                out["filtered_total"] = chosen["total"] if out["filtered_s"] is not None else None
                out["summary_again_s"], _ = _together(timeout, (base, "summary", {"run": name}))
            out["peak_mb"], out["cpu_s"] = _peak_mb(child.pid), _cpu_s(child.pid)
        finally:
            child.terminate()
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    return out


def bare_read(run: Path) -> float:
    """The baseline: a pyarrow read of the analysis columns of every part (the least an analysis reads)."""
    start = time.perf_counter()
    files = sorted(str(p) for p in run.glob("part-*.parquet"))
    import pyarrow.dataset as ds

    ds.dataset(files, format="parquet").to_table(columns=list(ANALYSIS_READ))
    return time.perf_counter() - start


VIEW_CACHES = ("_view",)   # what a viewer may leave beside the run (removed before a first open)


def clear_caches(run: Path) -> None:
    for name in VIEW_CACHES:
        target = run / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


# The filtered grid page of each shape: a suite, a class, failures, a tag, the second page.
FILTERS = {"attempts": {"suite": "reasoning", "class": "discriminating", "failed": "1", "offset": 10, "limit": 10},
           "tests": {"suite": "code", "class": "uninformative", "failed": "1", "tag": "hard", "offset": 50}}
FILTERS["tests-250k"] = FILTERS["tests"]


def _s(value: float | None) -> str:
    return "  stopped" if value is None else f"{value:8.2f}"


MEASURES = (("analyze", "wall_s", "engine analyze, wall s"), ("analyze", "cpu_s", "engine analyze, CPU s"),
            ("analyze", "peak_mb", "engine analyze, peak MB"),
            ("run end", "wall_s", "run's end: snapshot, wall s"), ("run end", "cpu_s", "run's end: snapshot, CPU s"),
            ("run end", "peak_mb", "run's end: snapshot, peak MB"),
            ("first open", "ready_s", "view first open: URL printed s"),
            ("first open", "runs_s", "view first open: runs page s"),
            ("first open", "run_page_s", "view first open: run page s"),
            ("first open", "filtered_s", "view first open: filtered page s"),
            ("first open", "summary_again_s", "view first open: /api/summary again s"),
            ("first open", "peak_mb", "view first open: peak MB"),
            ("first open", "cpu_s", "view first open: server CPU s"),
            ("unprepared open", "runs_s", "view first open, no snapshot: runs page s"),
            ("unprepared open", "run_page_s", "view first open, no snapshot: run page s"),
            ("unprepared open", "filtered_s", "view first open, no snapshot: filtered s"),
            ("unprepared open", "peak_mb", "view first open, no snapshot: peak MB"),
            ("unprepared open", "cpu_s", "view first open, no snapshot: CPU s"),
            ("second open", "ready_s", "view second open: URL printed s"),
            ("second open", "runs_s", "view second open: runs page s"),
            ("second open", "run_page_s", "view second open: run page s"),
            ("second open", "filtered_s", "view second open: filtered page s"),
            ("second open", "peak_mb", "view second open: peak MB"),
            ("second open", "cpu_s", "view second open: server CPU s"))


def report(results: list[dict[str, Any]], trees: list[str]) -> None:
    """Medians (min-max) per shape, measure and tree; "stopped" where every round passed the time limit."""
    for shape in dict.fromkeys(r["shape"] for r in results):
        print(f"\n{shape}: median (min-max) over rounds")
        print(f"  {'measure':<42}" + "".join(f"{t:>28}" for t in trees))
        for part, key, label in MEASURES:
            cells = []
            for tree in trees:
                values = [r[part][key] for r in results if r["shape"] == shape and r["tree"] == tree and part in r]
                done = [v for v in values if v is not None]
                if not values:
                    cells.append("")
                elif not done:
                    cells.append("stopped")
                else:
                    stopped = f", {len(values) - len(done)} stopped" if len(done) < len(values) else ""
                    cells.append(f"{statistics.median(done):.2f} ({min(done):.2f}-{max(done):.2f}){stopped}")
            print(f"  {label:<42}" + "".join(f"{c:>28}" for c in cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="attempts,tests")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--against", type=Path, help="Another checkout measured in turns with this one.")
    parser.add_argument("--keep", type=Path, help="Write (or reuse) the run folders here instead of a temp dir.")
    parser.add_argument("--only", default="analyze,view", help="What to measure: analyze, view or both.")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="Stop an `engine analyze` or a view request after this many seconds.")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-large-runs-"))
    trees = [("this", ROOT)] + ([("against", args.against.resolve())] if args.against else [])
    results: list[dict[str, Any]] = []
    try:
        for shape in args.shapes.split(","):
            run = ensure_run(base, shape)
            rows = len(_items(shape)[0]) * len(MODELS) * SHAPES[shape][1]
            for r in range(args.rounds):
                print(f"\n{shape}, round {r + 1}: bare read of the analysis columns {bare_read(run):.2f} s; "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
                for name, tree in (trees if r % 2 == 0 else trees[::-1]):
                    record: dict[str, Any] = {"shape": shape, "round": r, "tree": name}
                    if "analyze" in args.only:
                        a = record["analyze"] = measure_analyze(tree, run, args.timeout)
                        print(f"  {name:<8} engine analyze: {_s(a['wall_s'])} s, CPU {_s(a['cpu_s'])} s, "
                              f"{a['peak_mb']:6.0f} MB", flush=True)
                    if "view" in args.only:
                        clear_caches(run)
                        end = measure_run_end(tree, run, rows, args.timeout)
                        if end is not None:
                            record["run end"] = end
                            print(f"  {name:<8} the run's end (snapshot): {_s(end['wall_s'])} s, CPU "
                                  f"{_s(end['cpu_s'])} s, {end['peak_mb']:6.0f} MB", flush=True)
                        opens = ("first open", "unprepared open", "second open") if end is not None else \
                            ("unprepared open", "second open")
                        for open_ in opens:
                            if open_ == "unprepared open":
                                clear_caches(run)
                            v = record[open_] = measure_view(tree, run, FILTERS[shape], args.timeout)
                            print(f"  {name:<8} engine view, {open_}: ready {_s(v['ready_s'])}, runs page "
                                  f"{_s(v['runs_s'])}, run page {_s(v['run_page_s'])}, filtered page "
                                  f"{_s(v['filtered_s'])}, summary again {_s(v['summary_again_s'])} s; peak "
                                  f"{v['peak_mb'] or 0:.0f} MB ({v['tests']} tests, {v['filtered_total']} filtered)",
                                  flush=True)
                        clear_caches(run)
                    print(f"    load {os.getloadavg()[0]:.1f}", flush=True)
                    results.append(record)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    report(results, [name for name, _ in trees])
    print("\n" + "\n".join(json.dumps(r) for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
