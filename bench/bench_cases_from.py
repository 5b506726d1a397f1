"""Benchmark: `cases_from` on a generated 1M-row CSV — load time and peak memory, against pandas.read_csv.

Each measurement runs in its own process (so one's memory does not hide the next's), under the collector
setting of `engine validate` (engine/_gc.py, `tuned_gc(collect=False)`), and reports its wall time and its peak
resident memory above the process's own after the imports (the peak is reset there through
/proc/self/clear_refs, then VmHWM - VmRSS from /proc/self/status):

    csv.reader        the least any CSV reader pays: the csv module's records, counted, nothing kept
    stream            cases_from's rows (engine/suite/cases_from.py) streamed and counted, nothing kept —
                      what the expander's checking pass costs
    rows list         cases_from's rows kept in a list (every row held once, as dicts)
    pandas            pandas.read_csv of the same file (a DataFrame: the whole file held once, in columns)
    pandas+records    pandas.read_csv then .to_dict("records") (rows as dicts: held twice while converting)
    suite load        load_suites on a suite whose test reads --suite-rows rows of the file (Tests built)

Run: .venv/bin/python bench/bench_cases_from.py [--rows 1000000] [--suite-rows 100000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("csv.reader", "stream", "rows list", "pandas", "pandas+records", "suite load")


def _status(key: str) -> int:
    """A field of /proc/self/status, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def write_csv(path: Path, rows: int) -> None:
    """id, question (some quoted, with commas and a line break now and then), level, golden."""
    rng = random.Random(0)
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write("id,question,level,golden\n")
        for i in range(rows):
            a, b = rng.randrange(1000), rng.randrange(1000)
            question = f'"What is {a} + {b}, ""exactly""?"' if i % 10 == 0 else f"What is {a} + {b}?"
            if i % 1000 == 0:
                question = f'"What is {a} + {b}?\nAnswer with digits."'
            handle.write(f"q{i},{question},{'hard' if i % 3 == 0 else 'easy'},{a + b}\n")


def child(mode: str, file: Path, suite_rows: int) -> dict[str, Any]:
    import pandas  # noqa: F401 - imported before the start line, like the engine's modules

    import engine.suite  # noqa: F401
    from engine._gc import tuned_gc

    Path("/proc/self/clear_refs").write_text("5")   # reset VmHWM (the peak) to the current RSS
    start_rss = _status("VmRSS")
    with tuned_gc(collect=False):
        return _measure(mode, file, suite_rows, start_rss)


def _measure(mode: str, file: Path, suite_rows: int, start_rss: int) -> dict[str, Any]:
    import csv

    import pandas as pd

    from engine.base.yaml import Positions
    from engine.suite import load_suites
    from engine.suite.cases_from import open_cases
    from engine.suite.checks import Report

    began = time.perf_counter()
    count = 0
    if mode == "csv.reader":
        with file.open(newline="", encoding="utf-8") as handle:
            for _ in csv.reader(handle):
                count += 1
        count -= 1
    elif mode in ("stream", "rows list"):
        report = Report(str(file.parent / "bench.yaml"), Positions())
        source = open_cases(file.name, ("tests", 0, "cases_from"), report, file.parent)
        assert source is not None and not report.diagnostics
        if mode == "stream":
            for _ in source:
                count += 1
        else:
            rows = list(source)
            count = len(rows)
    elif mode == "pandas":
        frame = pd.read_csv(file, dtype=str, keep_default_na=False)
        count = len(frame)
    elif mode == "pandas+records":
        records = pd.read_csv(file, dtype=str, keep_default_na=False).to_dict("records")
        count = len(records)
    else:
        suite = file.parent / "bench.yaml"
        suite.write_text(f"suite: bench\ntests:\n  - id: '{{{{ id }}}}'\n    prompt: '{{{{ question }}}}'\n"
                         f"    eval: {{equals: '{{{{ golden }}}}'}}\n"
                         f"    cases_from: {{file: {file.name}, limit: {suite_rows}}}\n", encoding="utf-8")
        suites, diagnostics = load_suites([suite])
        assert not diagnostics, diagnostics[:3]
        count = len(suites[0].tests)
    seconds = time.perf_counter() - began
    return {"mode": mode, "rows": count, "seconds": seconds, "peak_mib": (_status("VmHWM") - start_rss) / 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--suite-rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each mode; the fastest is shown")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]), args.suite_rows)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "cases.csv"
        write_csv(file, args.rows)
        print(f"{args.rows:,} rows, {file.stat().st_size / 2**20:.1f} MiB of CSV")
        results: dict[str, dict[str, Any]] = {}
        for _ in range(args.repeat):
            for mode in MODES:
                done = subprocess.run([sys.executable, __file__, "--suite-rows", str(args.suite_rows), "--child",
                                       mode, str(file)], capture_output=True, text=True, check=True)
                result = json.loads(done.stdout)
                if mode not in results or result["seconds"] < results[mode]["seconds"]:
                    results[mode] = result
    base = results["pandas"]
    print(f"{'mode':<16} {'rows':>10} {'seconds':>8} {'x pandas':>9} {'peak MiB':>9} {'x pandas':>9}")
    for mode in MODES:
        r = results[mode]
        print(f"{mode:<16} {r['rows']:>10,} {r['seconds']:>8.2f} {r['seconds'] / base['seconds']:>9.2f} "
              f"{r['peak_mib']:>9.1f} {r['peak_mib'] / max(base['peak_mib'], 1e-9):>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
