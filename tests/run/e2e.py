"""Helpers for end-to-end `engine run` tests: a suite folder and a models file on disk."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SUITE = """\
suite: capitals
tags: [geo]
defaults:
  max_tokens: 16
tests:
  - id: france
    prompt: "What is the capital of France?"
    eval: {contains: Paris}
  - id: "country-{{ name }}"
    prompt: "What is the capital of {{ name }}?"
    cases:
      - {name: Italy, capital: Rome}
      - {name: Spain, capital: Madrid}
    eval: {contains: "{{ capital }}"}
"""

MODELS = """\
models:
  fast:
    base_url: {base_url}
    model: fast-1
    api_key_env: ENGINE_TEST_KEY
    concurrency: {concurrency}
    timeout_s: 5
    price: {{input: 1.0, output: 2.0}}
  other:
    base_url: {base_url}
    model: other-1
    concurrency: 2
    timeout_s: 5
"""


def write_project(folder: Path, base_url: str, *, tests: int = 0, concurrency: int = 4) -> tuple[Path, Path]:
    """Write suites/ (capitals + an optional `bulk` suite of `tests` table-driven tests) and models.yaml."""
    suites = folder / "suites"
    suites.mkdir(parents=True)
    (suites / "capitals.yaml").write_text(SUITE)
    if tests:
        rows = "\n".join(f"      - {{n: {i}}}" for i in range(tests))
        (suites / "bulk.yaml").write_text(
            "suite: bulk\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"question {{ n }}\"\n"
            f"    eval: {{contains: ok}}\n    cases:\n{rows}\n")
    models = folder / "models.yaml"
    models.write_text(MODELS.format(base_url=base_url, concurrency=concurrency))
    return suites, models


def engine(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
           **kwargs) -> subprocess.CompletedProcess[str]:
    """Run `python -m engine ARGS` (forked from the test fork server, tests/engine_proc.py)."""
    from tests.engine_proc import run_engine

    return run_engine(*args, env=dict(os.environ, **(env or {})), cwd=cwd, **kwargs)


def start_engine(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.Popen[str]:
    """Start `python -m engine ARGS` without waiting."""
    from tests.engine_proc import checkout_env

    return subprocess.Popen([sys.executable, "-m", "engine", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=checkout_env(dict(os.environ, **env)), cwd=cwd)


def committed_rows(out: Path) -> int:
    """Rows committed so far to the journal of the (one) run under `out`, read as another process would."""
    for journal in out.glob("*/_journal.sqlite"):
        with sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=1) as db:
            try:
                return int(db.execute("SELECT count(*) FROM rows").fetchone()[0])
            except sqlite3.OperationalError:
                return 0
    return 0
