"""`make run 2>&1 | python3 bench/timestamp_lines.py`: each line of the output with the seconds since the start and
since the line before, then the longest silences (bench/README.md, "make run, line by line").

A line ends at `\\n` or `\\r` (a progress bar redrawn in place counts as output). Stdlib only: it measures a fresh
clone before anything is installed.
"""

from __future__ import annotations

import os
import re
import sys
import time

_END = re.compile(rb"\r\n|\r|\n")


def main() -> int:
    """Copy stdin to stdout, each line prefixed, and end with the four longest silences."""
    start = last = time.monotonic()
    pending = b""
    gaps: list[tuple[float, str]] = []

    def emit(raw: bytes, now: float) -> None:
        nonlocal last
        text = raw.decode("utf-8", "replace")
        gaps.append((now - last, text[:60]))
        sys.stdout.write(f"{now - start:7.1f} +{now - last:5.1f} | {text}\n")
        sys.stdout.flush()
        last = now

    while chunk := os.read(0, 65536):
        *lines, pending = _END.split(pending + chunk)
        now = time.monotonic()
        for line in lines:
            if line.strip():
                emit(line, now)
    now = time.monotonic()
    if pending.strip():
        emit(pending, now)
    longest = sorted(gaps, reverse=True)[:4]
    sys.stdout.write(f"total {now - start:.1f} s; longest silences: "
                     + ", ".join(f"{gap:.1f} s before {text!r}" for gap, text in longest) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
