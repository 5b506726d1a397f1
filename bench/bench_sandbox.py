"""Sandbox overhead and HumanEval throughput.

1. Overhead per sandboxed Python run (`oneshot.run` of `pass`, with the detected isolation, and with the
   unshare fallback when the detected level is bubblewrap's) against a bare
   `subprocess.run([python, "-c", "pass"])` with the same interpreter, measured in this script, interleaved.
2. Throughput of the 164 HumanEval canonical solutions through the exec evaluator, with a thread pool
   of os.cpu_count() workers (as the runner does).

Run: .venv/bin/python bench/bench_sandbox.py
"""

from __future__ import annotations

import dataclasses
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

from engine.evaluators import score  # noqa: E402
from engine.harness import isolation, oneshot  # noqa: E402
from engine.model.answer import Answer  # noqa: E402
from engine.suite import load_suites  # noqa: E402

RUNS = 40


def medians_ms(fns: dict) -> dict:  # type: ignore[type-arg]
    """Median ms of each function, the runs interleaved so a busy machine weighs on all of them alike."""
    for fn in fns.values():
        fn()  # warm up
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(RUNS):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


# Today's path without bubblewrap, measured in the same run for the price of the private mounts.
FALLBACK = {"bwrap+pidns+netns+uid": "pidns+netns+uid", "bwrap+pidns+netns": "pidns+netns"}


def overhead() -> None:
    python = isolation.resolve_program("python")
    assert python is not None
    level = isolation.isolation()
    detected = isolation.isolation_report()  # the bench swaps the detected isolation to time the fallback level

    def boxed_at(chosen: str):  # type: ignore[no-untyped-def]
        def run() -> None:
            isolation._detected = dataclasses.replace(detected, level=chosen)
            oneshot.run(["python", "main.py"], {"main.py": "pass\n"})
        return run

    fns = {"bare": lambda: subprocess.run([python[0], "-c", "pass"], check=True), level: boxed_at(level)}
    if level in FALLBACK:
        fns[FALLBACK[level]] = boxed_at(FALLBACK[level])
    found = medians_ms(fns)
    isolation._detected = detected
    bare = found.pop("bare")
    print(f"isolation: {level}  interpreter: {python[0]}")
    print(f"bare subprocess.run([python, -c, pass]): {bare:.1f} ms (median of {RUNS}, interleaved)")
    for name, boxed in found.items():
        print(f"oneshot.run(python main.py) at {name}: {boxed:.1f} ms; overhead {boxed - bare:+.1f} ms per run "
              f"({boxed / bare:.2f}x)")


def humaneval() -> None:
    data = ROOT.parent / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz"
    if not data.exists():
        print(f"HumanEval: skipped ({data} not found)")
        return
    from engine.importers.humaneval import import_humaneval

    with tempfile.TemporaryDirectory() as tmp:
        path = import_humaneval(data, Path(tmp) / "humaneval.yaml")
        suites, _ = load_suites([path])
        tests = [test for suite in suites for test in suite.tests]

        def one(test: object) -> bool:
            return score(test, Answer.from_golden(test.golden)).passed  # type: ignore[attr-defined,arg-type]

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
