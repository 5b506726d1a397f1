"""The runner scores each tree where it belongs: inline, in a worker thread (exec), awaited (async scorers), or in a
scoring process under each check's time limit."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.evaluators import KINDS, Kind
from engine.evaluators.base import verdict
from engine.evaluators.scoring_pool import STOPPED
from engine.model.answer import Answer
from engine.model.scoring import ScoringContext
from engine.model.verdict import Verdict
from engine.results.journal import Journal
from engine.results.writer import ResultsWriter
from engine.run.jobs import iter_jobs
from engine.run.runner import RunConfig, Runner
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


def _spinning(value: Any, options: Any) -> Any:
    """A check that never ends: pure Python, or (value "deaf") with the timer signal blocked, as C code that does
    not look at signals; any other value is a file it creates first, to say it began."""
    def spin(answer: Answer, ctx: ScoringContext) -> Verdict:
        if value == "deaf":
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        elif value != "python":
            Path(value).touch()
        while True:
            pass
    return spin


async def test_a_check_past_its_time_limit_is_an_error_naming_it_and_every_other_row_is_scored(
        tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, "spin", Kind("a check that never ends", {"type": "string"}, build=_spinning))
    fake_openai.responder = lambda body: Reply(content="ok")
    tests = [make_test(0, eval={"spin": "python", "timeout_s": 0.2}),
             make_test(1, eval={"spin": "deaf", "timeout_s": 0.2}),
             make_test(2, eval={"all": [{"spin": "python", "timeout_s": 0.2}, {"contains": "ok"}]}),
             *(make_test(i, eval={"ifeval": {"id": "punctuation:no_comma"}}) for i in range(3, 7))]
    stats = await run_jobs(tmp_path, [make_model(fake_openai.base_url)], tests, concurrency=7)
    df = _read(tmp_path).set_index("test_id")
    assert stats.done == 7
    assert df.loc["t0", "error_message"] == ("spin took longer than 0.2 s on an answer of 2 characters (its "
                                             "`timeout_s` sets the limit)")
    # deaf to the timer: ended with its process once its budget (its limit and a grace) was spent
    assert df.loc["t1", "error_message"].startswith("spin took longer than 0.2 s on an answer of 2 characters")
    children = df.loc["t2", "evaluators"]
    assert [(c["kind"], c["passed"]) for c in children[1:]] == [("spin", False), ("contains", True)]
    assert df.loc[[f"t{i}" for i in range(3, 7)], "passed"].tolist() == [True] * 4   # the processes went on


def _hog(value: Any, options: Any) -> Any:
    """A check that allocates 4 GiB at once (as a parser handed a hostile answer may), or ("abort") one whose C
    code ends its process when an allocation fails."""
    def hog(answer: Answer, ctx: ScoringContext) -> Verdict:
        if value == "abort":
            os.abort()
        held = bytearray(4 << 30)
        return verdict(1.0, f"held {len(held)} bytes", "hog")
    return hog


async def test_a_check_past_its_memory_limit_is_an_error_naming_it_and_every_other_row_is_scored(
        tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, "hog", Kind("a check that allocates 4 GiB", {"type": "string"}, build=_hog))
    big = "[" + "0.5," * 3_000_000 + "0.5]"   # 12 MB of JSON: 3 million floats, some 100 MiB once parsed
    fake_openai.responder = lambda body: (Reply(content=big, chunk_chars=1 << 20)
                                          if body["messages"][0]["content"] == "big" else Reply(content="ok"))
    tests = [make_test(0, eval={"hog": "gib"}),
             make_test(1, eval={"all": [{"hog": "gib"}, {"contains": "ok"}]}),
             make_test(2, eval={"hog": "abort"}),
             *(make_test(i, eval={"is_json": True, "timeout_s": 3600, **limit}, prompt="big",
                         messages=({"role": "user", "content": "big"},))
               for i, limit in ((3, {"memory_mb": 16}), (4, {}))),   # no time limit to reach on a loaded machine
             *(make_test(i, eval={"ifeval": {"id": "punctuation:no_comma"}}) for i in range(5, 9))]
    stats = await run_jobs(tmp_path, [make_model(fake_openai.base_url)], tests, concurrency=9)
    df = _read(tmp_path).set_index("test_id")
    assert stats.done == 9
    assert df.loc["t0", "error_message"] == ("hog used more than 1024 MiB of memory on an answer of 2 characters "
                                             "(its `memory_mb` sets the limit)")
    children = df.loc["t1", "evaluators"]
    assert [(c["kind"], c["passed"], c["error"]) for c in children[1:]] == [("hog", False, True),
                                                                             ("contains", True, False)]
    assert df.loc["t2", "error_message"] == (
        "the scoring process was ended by SIGABRT while hog scored an answer of 2 characters; a check that runs "
        "past its memory limit (1024 MiB; its `memory_mb` sets it) can end so")
    # a real check, its limit set by the suite: the same answer fails at 16 MiB and passes at the default
    assert df.loc["t3", "error_message"] == ("is_json used more than 16 MiB of memory on an answer of 12.0 MB "
                                             "(its `memory_mb` sets the limit)")
    assert df.loc["t4", "passed"] and pd.isna(df.loc["t4", "error_message"])
    assert df.loc[[f"t{i}" for i in range(5, 9)], "passed"].tolist() == [True] * 4   # fresh processes went on


async def test_a_cancelled_run_keeps_an_answer_whose_scoring_it_cut(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, fake_openai: FakeOpenAI,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, "spin", Kind("a check that never ends", {"type": "string"}, build=_spinning))
    fake_openai.responder = lambda body: Reply(content="paid for")
    journal = Journal(tmp_path / "_journal.sqlite")
    runner = Runner(RunConfig(run_id="run-1", concurrency=2), journal, ResultsWriter(tmp_path, journal))
    model = make_model(fake_openai.base_url)
    began = tmp_path_factory.mktemp("spin") / "began"   # beside the run folder, whose files are its Parquet
    tests = [make_test(0, eval={"spin": str(began), "timeout_s": 600})]
    run = asyncio.create_task(runner.run({"m": (model, iter_jobs(model, tests, None))}, 1, {"m": None}))
    async with asyncio.timeout(60):   # a hang guard: the answer arrives and its check begins to spin
        while not began.exists():
            await asyncio.sleep(0.01)
    runner.cancel()
    await asyncio.wait_for(run, 60)   # a hang guard
    journal.close()
    df = _read(tmp_path)
    assert df["answer"].tolist() == ["paid for"]
    assert df["error_message"].tolist() == [STOPPED]
