"""Benchmark: `engine validate` on a generated 10,000-test suite.

Prints the time of each stage and the ratio to a baseline measured in the same run: a bare
`yaml.load(CSafeLoader)` of the same file (the least any YAML-based validator must pay).
The target from issue #2 is "well under 2 s" for the whole validate, golden check included.

Run: .venv/bin/python bench/bench_validate.py [--tests 10000]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=10_000)
    args = parser.parse_args()
    import yaml

    from engine._gc import tuned_gc
    from engine.suite import load_suites

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        count = write_suite(path, args.tests)
        size_kb = path.stat().st_size / 1024
        text = path.read_text(encoding="utf-8")
        baseline = timed(lambda: yaml.load(text, Loader=yaml.CSafeLoader))
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
        print(f"baseline yaml.load (libyaml):      {baseline:6.3f} s")
        print(f"load_suites (no golden check):     {no_golden:6.3f} s  ({no_golden / baseline:4.1f}x baseline)")
        print(f"load_suites (with golden check):   {with_golden:6.3f} s  ({with_golden / baseline:4.1f}x baseline)")
        print(f"engine validate (new process):     {cli:6.3f} s  exit {proc.returncode}")


if __name__ == "__main__":
    main()
