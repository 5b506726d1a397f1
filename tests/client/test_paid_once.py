"""`engine run` against a real loopback server that counts what it receives: a reply that started is sent once.

A stream cut mid-way, a stream still producing tokens when `timeout_s` runs out and a 200 whose body is
broken are each served once, although the model allows three retries: the row is an error that keeps the
partial answer and names `--retry-errors`, which then sends the call again. A reply that never started (a
connection dropped before any byte) is still retried.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from tests.engine_proc import run_engine
from tests.fake_openai import FakeOpenAI, Reply

SUITE = "suite: s\ntests:\n  - id: q\n    prompt: \"capital of France?\"\n    eval: {contains: Paris}\n"
ANSWER = "Paris is the capital of France, and has been for a long time."


def _engine(*args: str) -> tuple[int, str]:
    done = run_engine(*args, "--quiet", env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    return done.returncode, done.stdout + done.stderr


def _run(tmp_path: Path, server: FakeOpenAI, *, stream: bool = True, timeout_s: float = 30) -> tuple[Path, pd.Series]:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "s.yaml").write_text(SUITE)
    (tmp_path / "models.yaml").write_text(
        f"models:\n  m:\n    base_url: {server.base_url}\n    model: m-1\n    max_retries: 3\n"
        f"    timeout_s: {timeout_s}\n    stream: {str(stream).lower()}\n")
    _engine("run", str(tmp_path / "suites"), "--models", str(tmp_path / "models.yaml"), "--out",
            str(tmp_path / "out"), "--no-cache")
    (run_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir() and p.name != "latest"]
    (row,) = [r for _, r in pd.read_parquet(run_dir).iterrows()]
    return run_dir, row


def _retry_errors(run_dir: Path) -> pd.Series:
    _engine("run", "--resume", str(run_dir), "--retry-errors", "--no-cache")
    (row,) = [r for _, r in pd.read_parquet(run_dir).iterrows()]
    return row


@pytest.mark.parametrize(("reply", "stream", "timeout_s", "kind"), [
    (Reply(fault="reset", content=ANSWER), True, 30, "connection"),            # the stream cut mid-way
    (Reply(fault="trickle", content=ANSWER, stall_s=0.2), True, 1, "timeout"),  # still streaming at timeout_s
], ids=["stream-cut", "stream-outlives-timeout"])
def test_a_stream_that_started_is_sent_once_and_keeps_its_partial_answer(
        tmp_path: Path, fake_openai: FakeOpenAI, reply: Reply, stream: bool, timeout_s: float, kind: str) -> None:
    fake_openai.script(reply)
    run_dir, row = _run(tmp_path, fake_openai, stream=stream, timeout_s=timeout_s)
    assert len(fake_openai.requests) == 1   # three retries allowed, none taken
    assert row["error_kind"] == kind and row["retries"] == 0 and row["truncated"]
    assert row["answer"] and ANSWER.startswith(row["answer"]) and row["answer"] != ANSWER
    assert f"cut after {len(row['answer'])} characters" in row["error_message"]
    assert "--retry-errors` re-sends it" in row["error_message"]
    fake_openai.script(Reply(content=ANSWER))
    again = _retry_errors(run_dir)
    assert len(fake_openai.requests) == 2 and pd.isna(again["error_kind"]) and again["answer"] == ANSWER
    assert again["passed"]


@pytest.mark.parametrize("reply", [Reply(raw=b'{"choices": [{"message": {"content": "Par'),
                                   Reply(fault="cut_body", content=ANSWER)], ids=["broken-json", "body-cut"])
def test_a_200_with_a_broken_body_is_sent_once(tmp_path: Path, fake_openai: FakeOpenAI, reply: Reply) -> None:
    fake_openai.script(reply)
    run_dir, row = _run(tmp_path, fake_openai, stream=False)
    assert len(fake_openai.requests) == 1
    assert row["error_kind"] in ("stream", "connection") and row["retries"] == 0
    assert "not sent again" in row["error_message"] and "--retry-errors` re-sends it" in row["error_message"]
    fake_openai.script(Reply(content=ANSWER))
    again = _retry_errors(run_dir)
    assert len(fake_openai.requests) == 2 and pd.isna(again["error_kind"]) and again["passed"]


def test_a_reply_that_never_started_is_retried(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(fault="drop"), Reply(fault="drop"), Reply(content=ANSWER))
    _, row = _run(tmp_path, fake_openai)
    assert len(fake_openai.requests) == 3 and row["retries"] == 2 and pd.isna(row["error_kind"]) and row["passed"]
