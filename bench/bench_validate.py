"""Benchmark: `engine validate` on a generated 10,000-test suite.

Prints the time of each stage and the ratio to a baseline measured in the same run: a bare load of the same
file with ruamel.yaml's C safe loader (the least any YAML-based validator must pay). The target is `engine
validate` of 10,000 tests within 2 s, golden check included.

Run: .venv/bin/python bench/bench_validate.py [--tests 10000]

Paired: `--against DIR` also runs the tree exported in DIR (e.g. `git archive f4a67ce | tar -x -C DIR`),
interleaved with this one for `--rounds` rounds: each round, in alternating order, one new process per tree
times its first `load_suites(golden_check=True)` (what `engine validate` pays: caches cold, imports excluded)
and one whole `python -m engine validate` process. Medians are printed, CPU and wall: on a machine other work
is loading, the CPU seconds are the steadier figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEADER = """\
suite: bench
description: Generated for bench/bench_validate.py.
tags: [bench]
defaults:
  system: Answer with one word.
  max_tokens: 32
tools:
  get_weather:
    description: Current weather for a city.
    parameters:
      type: object
      properties:
        city: {type: string}
      required: [city]
evaluators:
  one_word:
    all:
      - regex: '^\\W*\\w+\\W*$'
      - equals: "{{ golden }}"
        weight: 3
tests:
"""

# Four shapes in rotation; the table-driven one yields 4 tests per entry.
SHAPES = [
    """  - id: capital-{n}
    prompt: What is the capital of country number {n}?
    golden: City{n}
    eval: {{contains: "{{{{ golden }}}}"}}
""",
    """  - id: named-{n}
    prompt: Name item {n} in one word.
    golden: Item{n}
    eval: {{use: one_word}}
""",
    """  - id: weather-{n}
    prompt: What's the weather in town {n}?
    tools: [get_weather]
    golden: {{tool_calls: [{{name: get_weather, arguments: {{city: Town{n}}}}}], content: ""}}
    eval:
      tool_call: {{name: get_weather, args: {{city: [Town{n}]}}}}
""",
    """  - id: add-{n}-{{{{ a }}}}-{{{{ b }}}}
    prompt: What is {{{{ a }}}} + {{{{ b }}}}?
    cases:
      - {{a: {n}, b: 1, golden: {n1}}}
      - {{a: {n}, b: 2, golden: {n2}}}
      - {{a: {n}, b: 3, golden: {n3}}}
      - {{a: {n}, b: 4, golden: {n4}}}
    eval: {{numeric: "{{{{ golden }}}}"}}
""",
]


def write_suite(path: Path, tests: int) -> int:
    """Write a suite with about `tests` expanded tests; return the exact count."""
    parts, count, n = [HEADER], 0, 0
    while count < tests:
        shape = SHAPES[n % len(SHAPES)]
        parts.append(shape.format(n=n, n1=n + 1, n2=n + 2, n3=n + 3, n4=n + 4))
        count += 4 if "cases" in shape else 1
        n += 1
    path.write_text("".join(parts), encoding="utf-8")
    return count


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


# Run in a new process with the tree under test first on the path: the first load, as `engine validate` runs it.
_FIRST_LOAD = """
import json, sys, time
from pathlib import Path
from engine._gc import tuned_gc
from engine.suite import load_suites
with tuned_gc(collect=False):
    cpu, wall = time.process_time(), time.perf_counter()
    suites, diagnostics = load_suites([Path(sys.argv[1])], golden_check=True)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
assert not [d for d in diagnostics if d.severity == "error"], diagnostics[:3]
print(json.dumps({"cpu": cpu, "wall": wall, "tests": sum(len(s.tests) for s in suites)}))
"""


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _one_round(tree: Path, path: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", _FIRST_LOAD, str(path)], capture_output=True, text=True,
                         check=True, env=env, cwd=tree)
    load = json.loads(out.stdout)
    cpu, wall = _child_cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "engine", "validate", str(path)], capture_output=True, text=True,
                          check=False, env=env, cwd=tree)
    if proc.returncode != 0:
        raise SystemExit(f"engine validate from {tree} exited {proc.returncode}: {proc.stderr[-500:]}")
    return {"load_cpu": load["cpu"], "load_wall": load["wall"], "cli_cpu": _child_cpu() - cpu,
            "cli_wall": time.perf_counter() - wall, "tests": load["tests"]}


def paired(path: Path, baseline: Path, rounds: int) -> None:
    """Interleave the baseline tree and this one; print the medians and the ratios of the medians."""
    here = Path(__file__).resolve().parents[1]
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this tree": []}
    for i in range(rounds):
        order = [("baseline", baseline), ("this tree", here)]
        for name, tree in order if i % 2 == 0 else order[::-1]:
            runs[name].append(_one_round(tree, path))
    assert runs["baseline"][0]["tests"] == runs["this tree"][0]["tests"]
    print(f"paired, {rounds} rounds (load average {os.getloadavg()[0]:.1f} at the end); medians in seconds")
    print(f"{'':12s} {'load CPU':>9s} {'load wall':>10s} {'validate CPU':>13s} {'validate wall':>14s}")
    medians = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in runs.items()}
    for name, m in medians.items():
        print(f"{name:12s} {m['load_cpu']:9.3f} {m['load_wall']:10.3f} {m['cli_cpu']:13.3f} {m['cli_wall']:14.3f}")
    base, new = medians["baseline"], medians["this tree"]
    print(f"{'ratio':12s} " + " ".join(f"{new[k] / base[k]:{w}.2f}x" for k, w in
                                        (("load_cpu", 8), ("load_wall", 9), ("cli_cpu", 12), ("cli_wall", 13))))
    # Ranges: each tree's fastest and slowest round, and the ratio of each round's pair (this tree / baseline).
    for key in ("load_cpu", "load_wall", "cli_cpu", "cli_wall"):
        pairs = [b[key] and n[key] / b[key] for b, n in zip(runs["baseline"], runs["this tree"], strict=True)]
        ranges = "  ".join(f"{name} {min(r[key] for r in rs):.3f}-{max(r[key] for r in rs):.3f}"
                           for name, rs in runs.items())
        print(f"{key:10s} range: {ranges}  per-round ratio {min(pairs):.2f}-{max(pairs):.2f}x "
              f"(median {statistics.median(pairs):.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=10_000)
    parser.add_argument("--against", type=Path, help="a baseline tree (an export of an older commit) to pair with")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    if args.against is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.yaml"
            write_suite(path, args.tests)
            paired(path, args.against.resolve(), args.rounds)
        return
    from ruamel.yaml.cyaml import CSafeLoader

    from engine._gc import tuned_gc
    from engine.suite import load_suites

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        count = write_suite(path, args.tests)
        size_kb = path.stat().st_size / 1024
        text = path.read_text(encoding="utf-8")
        baseline = timed(lambda: CSafeLoader(text).get_single_data())
        with tuned_gc(collect=False):   # the collector setting `engine validate` runs under (the CLI enters it)
            no_golden = timed(lambda: load_suites([path]))
            with_golden = timed(lambda: load_suites([path], golden_check=True))
        suites, diagnostics = load_suites([path], golden_check=True)
        assert not [d for d in diagnostics if d.severity == "error"], diagnostics[:5]
        assert sum(len(s.tests) for s in suites) == count
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "engine", "validate", str(path)],
                              capture_output=True, text=True, check=False)
        cli = time.perf_counter() - start
        print(f"suite: {count} tests, {size_kb:.0f} KB")
        print(f"baseline ruamel C safe load:       {baseline:6.3f} s")
        print(f"load_suites (no golden check):     {no_golden:6.3f} s  ({no_golden / baseline:4.1f}x baseline)")
        print(f"load_suites (with golden check):   {with_golden:6.3f} s  ({with_golden / baseline:4.1f}x baseline)")
        print(f"engine validate (new process):     {cli:6.3f} s  exit {proc.returncode}")


if __name__ == "__main__":
    main()
