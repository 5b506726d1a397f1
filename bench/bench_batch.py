"""Benchmark: CPU and memory of `engine run --batch` while its batches are with the provider.

What a user feels: a batch run waits for hours (up to a day) on the provider; the machine running it must not
spin, and its memory must not creep while it waits. One whole `python -m engine run --batch` process sends
`--calls` single-turn chat calls (one `contains` check each, cases from a CSV) to the loopback OpenAI Batch API of
tests/fake_batches.py, served from a thread of this process, whose batches end `--delay` seconds after their
creation; the engine polls each batch every `--poll` seconds (`ENGINE_BATCH_POLL_S`; 0: its own plan). This
script samples the engine's CPU (user + system, /proc/PID/stat) and RSS (/proc/PID/status) every `--every`
seconds, and reads the server's log for when the last batch was created and the first ended: the wait is the time
between, less a second at each end. Baseline, measured in the same round: a bare `python -c` process that imports
the engine and sleeps in asyncio for as long as the wait (what a process doing nothing costs here).

Run: `flock /work/bench.lock .venv/bin/python bench/bench_batch.py [--calls 10000] [--delay 60] [--poll 1]
[--tree TREE]`. One JSON line, then a table. Target: while it waits, the engine's CPU within 1% of a core above
the baseline's, its RSS moving < 2 MB between the wait's first and last quarter, no request submitted twice and
every call a row. Figures go to bench/README.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from tests.fake_batches import OpenAIBatchServer, Plan  # noqa: E402 - after the repository is on the path
from tests.fake_openai import FakeOpenAI, Reply  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def sample(pid: int) -> tuple[float, float] | None:
    """(CPU seconds, RSS MB) of a running process; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    rss = [int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmRSS:")]
    if not rss:   # exited, not yet reaped
        return None
    return (int(fields[11]) + int(fields[12])) / TICK, rss[0]


def watch(proc: subprocess.Popen[bytes], every: float) -> list[tuple[float, float, float]]:
    """(monotonic time, CPU s, RSS MB) of `proc` every `every` seconds until it exits."""
    out = []
    while proc.poll() is None:
        got = sample(proc.pid)
        if got is not None:
            out.append((time.monotonic(), *got))
        time.sleep(every)
    return out


def write_suite(folder: Path, calls: int, base_url: str) -> None:
    (folder / "rows.csv").write_text("n\n" + "".join(f"{i}\n" for i in range(calls)))
    (folder / "bench.yaml").write_text("suite: bench\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"say ok {{ n }}\"\n"
                                       "    eval: {contains: ok}\n    cases_from: rows.csv\n")
    (folder / "models.yaml").write_text(f"models:\n  bench:\n    base_url: {base_url}\n    model: bench-model\n"
                                        "    batch: true\n")


def window(samples: list[tuple[float, float, float]], start: float, end: float) -> dict[str, Any]:
    """CPU per second and RSS over the samples within [start, end]."""
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 8:
        raise SystemExit(f"only {len(inside)} samples while waiting: use a longer --delay")
    quarter = max(1, len(inside) // 4)
    first, last = inside[:quarter], inside[-quarter:]
    span = inside[-1][0] - inside[0][0]
    edges = [inside[len(inside) * i // 4] for i in range(4)] + [inside[-1]]
    by_quarter = [round(1000 * (b[1] - a[1]) / (b[0] - a[0]), 2) for a, b in itertools.pairwise(edges)]
    return {"wait_s": span, "cpu_ms_per_s": 1000 * (inside[-1][1] - inside[0][1]) / span,
            "cpu_ms_per_s_by_quarter": by_quarter,
            "rss_first_quarter_mb": sum(s[2] for s in first) / len(first),
            "rss_last_quarter_mb": sum(s[2] for s in last) / len(last),
            "rss_max_mb": max(s[2] for s in inside)}


def baseline(tree: Path, seconds: float, every: float) -> float:
    """CPU ms per second of a bare process that imports the engine and sleeps in asyncio (the same sampling)."""
    code = f"import asyncio, engine.run.session; print('ready', flush=True); asyncio.run(asyncio.sleep({seconds}))"
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(tree)), cwd=tree,
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()   # past its imports
    samples = watch(proc, every)
    samples = [s for s in samples if s[0] <= samples[0][0] + seconds - 1.0]   # not its exit's teardown
    return 1000 * (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--delay", type=float, default=60.0, help="seconds from a batch's creation to its end")
    parser.add_argument("--poll", type=float, default=1.0,
                        help="seconds between two polls of a batch (0: the engine's own plan, 10 s growing to 600 s)")
    parser.add_argument("--every", type=float, default=0.25, help="seconds between two samples")
    parser.add_argument("--tree", type=Path, default=ROOT)
    args = parser.parse_args()
    tree = args.tree.resolve()
    server = FakeOpenAI()
    batches = OpenAIBatchServer(server)
    server.responder = lambda body: Reply(content="ok")
    batches.plan = Plan(delay_s=args.delay)
    server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            write_suite(folder, args.calls, server.base_url)
            env = dict(os.environ, PYTHONPATH=str(tree), ENGINE_RESPONSE_CACHE=str(folder / "cache.sqlite"),
                       OPENAI_API_KEY="sk-bench")
            if args.poll > 0:
                env["ENGINE_BATCH_POLL_S"] = f"{args.poll:g}"
            started = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", "engine", "run", str(folder / "bench.yaml"), "--models",
                                     str(folder / "models.yaml"), "--out", str(folder / "results"), "--quiet",
                                     "--batch"], env=env, cwd=tree, stderr=subprocess.PIPE)
            samples = watch(proc, args.every)   # its stderr is a few lines: the pipe never fills
            wall = time.monotonic() - started
            assert proc.stderr is not None
            err = proc.stderr.read().decode(errors="replace")
            if proc.returncode != 0:
                raise SystemExit(f"engine run failed ({proc.returncode}):\n{err[-3000:]}")
            rows = sum(1 for _ in (folder / "results").rglob("*.parquet"))
            jobs = list(batches.jobs.jobs.values())
            last_created = max(job.created for job in jobs)
            first_end = min(job.created for job in jobs) + args.delay
            waiting = window(samples, last_created + 1.0, first_end - 1.0)
            counts = _rows(folder / "results")
        base = baseline(tree, waiting["wait_s"], args.every)
    finally:
        server.stop()
    submitted = batches.submitted
    out = {"calls": args.calls, "batches": len(jobs), "submitted": len(submitted),
           "submitted_twice": len(submitted) - len(set(submitted)),
           "polls": sum(1 for entry in batches.log if entry.startswith("GET /v1/batches/")),
           "rows": counts, "parquet_files": rows, "wall_s": round(wall, 1),
           "peak_rss_mb": max(s[2] for s in samples), "cpu_s": samples[-1][1],
           **{k: round(v, 2) if isinstance(v, float) else v for k, v in waiting.items()},
           "baseline_cpu_ms_per_s": round(base, 2)}
    print(json.dumps(out))
    print("\n| calls | batches | wait (s) | CPU while waiting (ms/s) | baseline (ms/s) | RSS first / last quarter "
          "(MB) | peak RSS (MB) | whole run CPU (s) | submitted twice | rows |\n"
          "|---|---|---|---|---|---|---|---|---|---|\n"
          f"| {args.calls} | {len(jobs)} | {waiting['wait_s']:.0f} | {waiting['cpu_ms_per_s']:.2f} "
          f"({' / '.join(f'{q:.1f}' for q in waiting['cpu_ms_per_s_by_quarter'])}) | {base:.2f} | "
          f"{waiting['rss_first_quarter_mb']:.1f} / {waiting['rss_last_quarter_mb']:.1f} | "
          f"{out['peak_rss_mb']:.1f} | {out['cpu_s']:.1f} | {out['submitted_twice']} | {counts} |")
    return 0


def _rows(results: Path) -> int:
    """Rows written in the run's Parquet files."""
    import pyarrow.parquet as pq
    return sum(pq.ParquetFile(path).metadata.num_rows for path in results.rglob("*.parquet"))


if __name__ == "__main__":
    raise SystemExit(main())
