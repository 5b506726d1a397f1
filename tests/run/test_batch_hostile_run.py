"""`engine run --batch` against a hostile batch server: a batch object of the wrong shape gives each of its rows a
`batch_failed` error naming the place, and a batch that never ends is waited on until the run is stopped, which
then ends (keeping the batch for `--resume`)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests import fake_openai
from tests.fake_batches import OpenAIBatchServer, Plan
from tests.fake_openai import FakeOpenAI
from tests.run.e2e import engine, start_engine

KEY = "sk-batch-hostile-SECRET-0123456789abcdef"
ENV = {"BATCH_TEST_KEY": KEY, "ENGINE_BATCH_POLL_S": "0.05"}
SUITE = """\
suite: sums
tests:
  - id: sum
    prompt: "What is {{ n }} plus {{ n }}?"
    eval: {numeric: "{{ (n | int) * 2 }}"}
    cases: [{n: 1}, {n: 2}, {n: 3}]
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[OpenAIBatchServer]:
    live = FakeOpenAI()
    batches = OpenAIBatchServer(live)
    live.start()
    live.responder = lambda body: fake_openai.Reply(content="4")
    (tmp_path / "sums.yaml").write_text(SUITE, encoding="utf-8")
    (tmp_path / "models.yaml").write_text(
        f"models:\n  m:\n    base_url: {live.base_url}\n    model: chat-model\n    api_key_env: BATCH_TEST_KEY\n"
        "    batch: {size: 3, max_wait_s: 30}\n", encoding="utf-8")
    yield batches
    live.stop()


def _run_dir(out: Path) -> Path:
    return next(p for p in out.iterdir() if p.is_dir() and not p.is_symlink())


def test_a_batch_status_of_the_wrong_shape_gives_each_row_a_batch_failed_error_naming_it(
        served: OpenAIBatchServer, tmp_path: Path) -> None:
    served.plan = Plan(patch=lambda batch: batch.update(request_counts=["many"]))
    out = tmp_path / "out"
    done = engine("run", str(tmp_path / "sums.yaml"), "--models", str(tmp_path / "models.yaml"), "--out", str(out),
                  "--no-cache", "--quiet", env=ENV)
    assert done.returncode in (0, 1), done.stderr
    rows = pd.read_parquet(_run_dir(out))
    assert len(rows) == 3 and set(rows["error_kind"]) == {"batch_failed"}
    assert all("`batch.request_counts` is a list" in message for message in rows["error_message"])


def test_a_batch_that_never_ends_is_waited_on_until_the_run_is_stopped_which_then_ends(
        served: OpenAIBatchServer, tmp_path: Path) -> None:
    served.plan = Plan(polls=10**9)   # in progress for ever
    out = tmp_path / "out"
    running = start_engine("run", str(tmp_path / "sums.yaml"), "--models", str(tmp_path / "models.yaml"),
                           "--out", str(out), "--no-cache", "--quiet", env=ENV)
    try:
        deadline = time.monotonic() + 60   # a start-up bound on a loaded machine, not a speed check
        while sum(line.startswith("GET /v1/batches/") for line in served.log) < 3:
            assert running.poll() is None, running.communicate()
            assert time.monotonic() < deadline, served.log
            time.sleep(0.02)
        assert running.poll() is None   # polled again and again, still waiting
        running.send_signal(signal.SIGINT)
        _, err = running.communicate(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
    assert running.returncode == 1, err
    assert "1 batch(es) holding 3 rows are still with the provider" in err
    assert len(served.submitted) == 3 and not any("cancel" in line for line in served.log)
