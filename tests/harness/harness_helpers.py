"""Helpers for the harness tests: run the exec evaluator for real and look at the process table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine.evaluators import score
from engine.model.answer import Answer
from engine.model.test import Test
from engine.model.verdict import Verdict
from tests.factories import make_test as build_test


def make_test(suite_dir: Path | str = ".", prompt: str = "write the code", spec: dict[str, Any] | None = None) -> Test:
    return build_test(suite="harness-tests", file=str(Path(suite_dir) / "suite.yaml"), messages=(), prompt=prompt,
                      eval=None if spec is None else {"exec": spec}, suite_dir=str(suite_dir))


def run_exec(spec: dict[str, Any], answer: str, suite_dir: Path | str = ".", prompt: str = "p") -> Verdict:
    """Score `answer` with `{exec: spec}`, compiled and scored as the run does."""
    return score(make_test(suite_dir, prompt, spec), Answer(text=answer))


def live_processes(token: str | None = None, uid: int | None = None) -> list[str]:
    """Processes (not zombies) whose command line holds `token` or that run as `uid`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            state = stat[stat.rindex(")") + 2]
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            owner = os.stat(entry.path).st_uid
        except (OSError, ValueError):
            continue
        if state in "ZX":
            continue
        if (token and token in cmdline) or (uid is not None and owner == uid):
            found.append(f"{entry.name} uid={owner} {state} {cmdline}")
    return found
