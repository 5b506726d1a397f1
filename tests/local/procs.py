"""Process-table checks the local-model tests share."""

from __future__ import annotations


def pid_gone(pid: int) -> bool:
    """True when pid no longer runs (a zombie awaiting its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
