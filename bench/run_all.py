"""Run every benchmark in bench/ (bench_*.py), one after another, each in its own process.

Benchmarks report ratios against a baseline measured in the same script; figures go in bench/README.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    failed = []
    for script in sorted(here.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)], cwd=here.parent, check=False).returncode != 0:
            failed.append(script.name)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
