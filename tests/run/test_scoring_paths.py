"""The runner scores each tree where it belongs: inline, in a worker thread (exec), or awaited (async scorers)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.evaluators import KINDS, Kind, ScoringContext
from engine.evaluators.base import verdict
from engine.model import Answer, Verdict
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.helpers import make_model, make_test, run_jobs


def _read(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir).sort_values("test_id")


async def test_an_async_scorer_is_awaited_on_the_run_loop(tmp_path: Path, fake_openai: FakeOpenAI,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bool, str]] = []

    def build(value: Any, options: Any) -> Any:
        async def judge(answer: Answer, ctx: ScoringContext) -> Verdict:
            running = asyncio.get_running_loop() is not None
            seen.append((running, threading.current_thread().name))
            await asyncio.sleep(0)
            return verdict(1.0 if value in answer.text else 0.0, f"judged {value!r}", "judge")

        return judge

    monkeypatch.setitem(KINDS, "judge", Kind("an async test judge", {"type": "string"}, build=build))
    fake_openai.responder = lambda body: Reply(content="Paris")
    tests = [make_test(0, eval={"judge": "Paris"}), make_test(1, eval={"all": [{"judge": "Lyon"}, {"contains": "P"}]})]
    stats = await run_jobs(tmp_path, [make_model(fake_openai.base_url)], tests)
    df = _read(tmp_path)
    assert stats.done == 2 and list(df["passed"]) == [True, False]
    assert list(df["error_kind"].isna()) == [True, True]
    assert seen == [(True, "MainThread")] * 2   # awaited on the loop, never pushed to a thread
