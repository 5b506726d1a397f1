"""Sandbox overhead and HumanEval throughput.

1. Overhead per sandboxed Python run (`sandbox.run` of `pass`, with the detected isolation) against a bare
   `subprocess.run([python, "-c", "pass"])` with the same interpreter, measured in this script.
2. Throughput of the 164 HumanEval canonical solutions through the exec evaluator, with a thread pool
   of os.cpu_count() workers (as the runner does).

Run: .venv/bin/python bench/bench_sandbox.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.evaluators.base import EvalContext  # noqa: E402
from engine.evaluators.exec import exec_  # noqa: E402
from engine.harness import sandbox  # noqa: E402
from engine.model import Answer, Test  # noqa: E402

RUNS = 40


def median_ms(fn) -> float:  # type: ignore[no-untyped-def]
    fn()  # warm up
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def overhead() -> None:
    python = sandbox.resolve_program("python")
    assert python is not None
    bare = median_ms(lambda: subprocess.run([python[0], "-c", "pass"], check=True))
    boxed = median_ms(lambda: sandbox.run(["python", "main.py"], {"main.py": "pass\n"}))
    print(f"isolation: {sandbox.isolation()}  interpreter: {python[0]}")
    print(f"bare subprocess.run([python, -c, pass]): {bare:.1f} ms (median of {RUNS})")
    print(f"sandbox.run(python main.py):             {boxed:.1f} ms (median of {RUNS})")
    print(f"overhead: {boxed - bare:+.1f} ms per run ({boxed / bare:.2f}x)")


def humaneval() -> None:
    data = ROOT.parent / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz"
    if not data.exists():
        print(f"HumanEval: skipped ({data} not found)")
        return
    from ruamel.yaml import YAML

    from engine.importers.humaneval import import_humaneval

    with tempfile.TemporaryDirectory() as tmp:
        path = import_humaneval(data, Path(tmp) / "humaneval.yaml")
        tests = YAML(typ="safe").load(path.read_text())["tests"]

        def one(test: dict) -> bool:  # type: ignore[type-arg]
            ctx = EvalContext(test=Test(suite="humaneval", id=test["id"], file=str(path), line=1, messages=(),
                                        prompt=test["prompt"], eval=test["eval"], suite_dir=tmp))
            return exec_(test["eval"]["exec"], {}, Answer.from_golden(test["golden"]), ctx).passed

        workers = os.cpu_count() or 2
        start = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            passed = sum(pool.map(one, tests))
        elapsed = time.perf_counter() - start
    print(f"HumanEval: {passed}/{len(tests)} canonical solutions passed in {elapsed:.2f} s "
          f"with {workers} workers = {len(tests) / elapsed:.0f} checks/s")


if __name__ == "__main__":
    overhead()
    humaneval()
