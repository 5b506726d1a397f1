"""The `python` evaluator's scorer file is opened as input files are: a FIFO in its place is refused, never waited on.

Each call runs in a daemon thread whose join timeout is only a hang guard (a blocked open would never return).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from engine.evaluators import score
from engine.model.answer import Answer
from engine.model.test import Test
from engine.suite import load_suites


def _within_guard(work: Any) -> Any:
    found: list[Any] = []
    thread = threading.Thread(target=lambda: found.append(work()), daemon=True)
    thread.start()
    thread.join(60)
    assert found, "the call never returned: the FIFO was waited on"
    return found[0]


def test_a_scorer_file_that_is_a_fifo_is_an_error_verdict(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "scorers.py")
    test = Test(suite="s", id="t", file=str(tmp_path / "s.yaml"), line=1, messages=(), prompt="",
                eval={"python": {"file": "scorers.py"}}, suite_dir=str(tmp_path))
    verdict = _within_guard(lambda: score(test, Answer(text="Paris")))
    assert verdict.error
    assert verdict.reason == (f"python: the scorer file {tmp_path / 'scorers.py'}: not a regular file (it is a FIFO "
                              "(named pipe)); a scorer is a regular .py file beside the suite")


def test_a_missing_or_undecodable_scorer_file_is_named(tmp_path: Path) -> None:
    test = Test(suite="s", id="t", file=str(tmp_path / "s.yaml"), line=1, messages=(), prompt="",
                eval={"python": {"file": "scorers.py"}}, suite_dir=str(tmp_path))
    assert score(test, Answer(text="x")).reason == (
        f"python: the scorer file {tmp_path / 'scorers.py'}: does not exist; put it beside the suite")
    (tmp_path / "scorers.py").write_bytes(b"def score(answer, **_):\n    return '\xff'\n")
    assert "is not UTF-8 text (invalid start byte at byte" in score(test, Answer(text="x")).reason


def test_loading_a_suite_whose_scorer_file_is_a_fifo_reports_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "scorers.py")
    (tmp_path / "s.yaml").write_text("suite: s\ntests:\n  - id: t\n    prompt: hi\n"
                                     "    eval: {python: {file: scorers.py}}\n")
    _, diagnostics = _within_guard(lambda: load_suites([tmp_path / "s.yaml"]))
    assert [d.message for d in diagnostics] == [
        f"the scorer file {tmp_path / 'scorers.py'}: not a regular file (it is a FIFO (named pipe)); a scorer is a "
        "regular .py file beside the suite"]
