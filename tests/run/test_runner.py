"""The runner against the fake server: caps, repeats, faults as rows, budget, retry-errors."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pandas as pd

from engine.results.journal import Journal
from engine.results.writer import ResultsWriter
from engine.run.jobs import iter_jobs, select_tests
from engine.run.runner import RunConfig, Runner
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.helpers import make_model, make_test, run_jobs


def read(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir)


async def test_every_job_becomes_one_row(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="ok" if "1" in body["messages"][0]["content"] else "no")
    tests = [make_test(i) for i in range(10)]
    stats = await run_jobs(tmp_path, [make_model(fake_openai.base_url)], tests, repeat=3, rows_per_part=7)
    df = read(tmp_path)
    assert len(df) == 30 and stats.done == 30
    assert not df.duplicated(["test_id", "attempt"]).any()
    assert sorted(df["attempt"].unique()) == [0, 1, 2]
    assert set(df[df.passed]["test_id"]) == {"t1"}
    assert df["error_kind"].isna().all()


async def test_caps_hold_globally_and_per_model(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(delay_s=0.02)
    models = [make_model(fake_openai.base_url, "a", concurrency=2),
              make_model(fake_openai.base_url, "b", concurrency=8),
              make_model(fake_openai.base_url, "c", concurrency=8)]
    await run_jobs(tmp_path, models, [make_test(i) for i in range(30)], concurrency=10)
    assert fake_openai.max_in_flight <= 10
    assert fake_openai.max_in_flight >= 8   # the caps are used, not just respected
    assert fake_openai.max_in_flight_by_model["a-id"] <= 2
    assert fake_openai.max_in_flight_by_model["b-id"] <= 8
    assert len(read(tmp_path)) == 90


async def test_every_fault_ends_in_one_classified_row(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    faults = {
        "t0": [Reply(fault="http_429", retry_after="0.01"), Reply()],
        "t1": [Reply(fault="http_500", retry_after_ms="5"), Reply()],
        "t2": [Reply(fault="reset", content="x" * 40)] * 3,
        "t3": [Reply(fault="stall", stall_s=20), Reply()],
        "t4": [Reply(fault="malformed")],
        "t5": [Reply(fault="huge_line")],
        "t6": [Reply(fault="no_done")],
        "t7": [Reply(model="something-else")],
        "t8": [Reply(fault="http_400")],
    }
    queues = {k: list(v) for k, v in faults.items()}

    def respond(body: dict) -> Reply:
        test_id = "t" + body["messages"][0]["content"].split()[-1]
        queue = queues[test_id]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    fake_openai.responder = respond
    model = make_model(fake_openai.base_url, timeout_s=2.5, max_retries=2)  # > two backoffs (<= 1.5 s)
    tests = [make_test(i, expect="x" if i == 5 else "ok") for i in range(9)]
    await run_jobs(tmp_path, [model], tests)
    df = read(tmp_path).set_index("test_id")
    assert len(df) == 9
    # t2 and t3: a reply that started is never sent again (paid once); t3 stalls after its first chunk.
    expected = {"t0": (None, 1), "t1": (None, 1), "t2": ("connection", 0), "t3": ("timeout", 0),
                "t4": ("stream", 0), "t5": (None, 0), "t6": ("stream", 0), "t7": (None, 0), "t8": ("http_400", 0)}
    for test_id, (kind, retries) in expected.items():
        row = df.loc[test_id]
        assert (row["error_kind"] if isinstance(row["error_kind"], str) else None) == kind, test_id
        assert row["retries"] == retries, test_id
    assert df.loc["t0", "rate_limit_wait_s"] > 0
    assert str(df.loc["t2", "answer"]).startswith("x") and bool(df.loc["t2", "truncated"])   # the partial answer
    assert bool(df.loc["t6", "truncated"]) and pd.isna(df.loc["t6", "score"])
    assert bool(df.loc["t7", "fallback"]) and df.loc["t7", "served_model"] == "something-else"
    assert not df.loc["t0", "fallback"]
    assert len(df.loc["t5", "answer"]) == 5 * 1024 * 1024 and bool(df.loc["t5", "passed"])


async def test_row_carries_the_evaluator_breakdown(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="Paris, France", usage={
        "prompt_tokens": 1000, "completion_tokens": 500})
    test = make_test(0, eval={"all": [{"contains": "Paris"}, {"contains": "Lyon", "weight": 0}]})
    model = make_model(fake_openai.base_url, price_in=1.0, price_out=2.0)
    await run_jobs(tmp_path, [model], [test])
    row = read(tmp_path).iloc[0]
    nodes = pd.DataFrame(list(row["evaluators"]))
    assert list(nodes["path"]) == ["all", "all/0.contains", "all/1.contains"]
    assert list(nodes["passed"]) == [True, True, False]
    assert row["cost"] == (1000 * 1.0 + 500 * 2.0) / 1e6
    assert row["passed"] and row["score"] == 1.0 and list(row["tags"]) == ["smoke"]


async def test_crashing_evaluator_is_an_error_row(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch) -> None:
    from engine.evaluators import scoring_pool

    def boom(test, answer, ctx=None):  # stands in for a bug in scoring (score() promises never to raise)
        raise RuntimeError("kaboom")

    monkeypatch.setattr(scoring_pool, "score", boom)

    tests = [make_test(0), make_test(1)]
    from engine.results.journal import Journal
    from engine.results.writer import ResultsWriter

    journal = Journal(tmp_path / "_journal.sqlite")
    writer = ResultsWriter(tmp_path, journal)
    model = make_model(fake_openai.base_url)
    runner = Runner(RunConfig(run_id="r"), journal, writer)
    await runner.run({"m": (model, iter_jobs(model, tests, None))}, 2, {"m": None})
    journal.close()
    df = read(tmp_path)
    assert list(df["error_kind"]) == ["evaluator", "evaluator"]
    assert "kaboom" in df["error_message"].iloc[0]


async def test_a_row_that_cannot_be_built_is_raised_after_the_others_are_committed(
        tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch) -> None:
    import pytest

    from engine.run import runner as runner_module

    real = runner_module.build_row

    def build_row(**kwargs):  # stands in for a bug in building one row
        if kwargs["test"].id == "t1":
            raise RuntimeError("cannot build")
        return real(**kwargs)

    monkeypatch.setattr(runner_module, "build_row", build_row)
    with pytest.raises(RuntimeError, match="cannot build"):
        await run_jobs(tmp_path, [make_model(fake_openai.base_url)], [make_test(i) for i in range(6)], concurrency=1)
    df = read(tmp_path)
    assert "t1" not in set(df["test_id"]) and "t0" in set(df["test_id"])
    assert len(df) == len(fake_openai.requests) - 1   # every other finished call's row is committed and written


async def test_budget_stops_dispatch(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(usage={"prompt_tokens": 1_000_000, "completion_tokens": 0})
    model = make_model(fake_openai.base_url, price_in=1.0, price_out=1.0, concurrency=1)
    stats = await run_jobs(tmp_path, [model], [make_test(i) for i in range(20)], concurrency=1, max_cost=2.5)
    assert stats.stopped == "budget"
    assert len(read(tmp_path)) == 3   # the third call passes 2.5; nothing after it is sent


async def test_resume_skips_done_and_retry_errors_replaces_errors(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: (Reply(fault="http_400") if "3" in body["messages"][0]["content"]
                                          else Reply())
    tests = [make_test(i) for i in range(6)]
    model = make_model(fake_openai.base_url)
    await run_jobs(tmp_path, [model], tests[:4], rows_per_part=2)
    await run_jobs(tmp_path, [model], tests, rows_per_part=2)          # resume: only t4, t5 are new
    assert len(fake_openai.requests) == 6
    df = read(tmp_path)
    assert len(df) == 6 and df["error_kind"].notna().sum() == 1
    fake_openai.responder = lambda body: Reply()
    fake_openai.requests.clear()
    await run_jobs(tmp_path, [model], tests, replace_errors=True, only_errors=True)
    assert len(fake_openai.requests) == 1
    df = read(tmp_path)
    assert len(df) == 6 and df["error_kind"].isna().all() and not df.duplicated(["test_id"]).any()


async def test_retry_errors_keeps_the_old_row_when_the_retry_fails(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(fault="http_400")
    model = make_model(fake_openai.base_url)
    await run_jobs(tmp_path, [model], [make_test(0)])
    await run_jobs(tmp_path, [model], [make_test(0)], replace_errors=True, only_errors=True)
    df = read(tmp_path)
    assert len(df) == 1 and df["error_kind"].iloc[0] == "http_400"


def test_filter_by_tag_and_glob() -> None:
    tests = [make_test(1, tags=("math",)), make_test(2, id="geo-paris"), make_test(3)]
    assert [t.id for t in select_tests(tests, ["math"])] == ["t1"]
    assert [t.id for t in select_tests(tests, ["geo-*", "s/t3"])] == ["geo-paris", "t3"]
    assert len(select_tests(tests, [])) == 3


def test_jobs_are_lazy_and_attempt_major() -> None:
    model = make_model("http://x/v1")
    first_test = make_test(0)
    # 100,000 distinct tests; copies of one built test (its evaluator compiled once: 1 s, not 4 s of CPU).
    tests = [first_test] + [replace(first_test, id=f"t{i}", line=i, prompt=f"question {i}", hash=f"h{i}",
                                    messages=({"role": "user", "content": f"question {i}"},))
                            for i in range(1, 100_000)]
    jobs = iter_jobs(model, tests, 3)
    first = [next(jobs) for _ in range(3)]
    assert [(j.test.id, j.attempt) for j in first] == [("t0", 0), ("t1", 0), ("t2", 0)]


async def test_workers_are_no_more_than_jobs(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """A concurrency of 10,000 for two tests starts two workers, not 10,000."""
    import asyncio

    from engine.results.journal import Journal
    from engine.results.writer import ResultsWriter
    from engine.run.jobs import count_jobs

    fake_openai.responder = lambda body: Reply(delay_s=0.2)
    model = make_model(fake_openai.base_url, concurrency=10_000)
    tests = [make_test(i) for i in range(2)]
    tasks_seen: list[int] = []
    journal = Journal(tmp_path / "_journal.sqlite")
    runner = Runner(RunConfig(run_id="r", concurrency=10_000, commit_interval_s=0.01), journal,
                    ResultsWriter(tmp_path, journal),
                    on_progress=lambda stats: tasks_seen.append(len(asyncio.all_tasks())))
    spy = asyncio.create_task(_count_tasks_while(tasks_seen))
    try:
        stats = await runner.run({"m": (model, iter_jobs(model, tests, None))}, count_jobs([model], tests, None),
                                 {"m": None})
    finally:
        spy.cancel()
        journal.close()
    assert stats.done == 2 and len(read(tmp_path)) == 2
    assert tasks_seen and max(tasks_seen) < 50   # this task, the committer, 2 workers, the spy, aiohttp's own


async def _count_tasks_while(seen: list[int]) -> None:
    import asyncio

    while True:
        seen.append(len(asyncio.all_tasks()))
        await asyncio.sleep(0.01)


async def test_the_committer_commits_what_it_was_handed_when_closed_and_tells_the_loop(tmp_path: Path) -> None:
    # The committer is a thread: closing it as a row is handed over still commits that row, and the loop hears
    # of every committed row (its `on_commit`, queued on the loop) before the run counts it done.
    from engine.results.committer import Committer

    journal = Journal(tmp_path / "_journal.sqlite")
    heard: list[list[str]] = []
    committer = Committer(journal, ResultsWriter(tmp_path, journal), asyncio.get_running_loop(), heard.append,
                          lambda exc: heard.append(["failed", str(exc)]), interval_s=60.0, rows=1000)
    try:
        for i in range(3):
            committer.add(f"k{i}", {"error_kind": None, "test_id": f"t{i}"}, f"k{i}")
        committer.close()   # long before its 60 s interval: what was handed over is committed now
        await asyncio.sleep(0)
        assert heard == [["k0", "k1", "k2"]] and journal.keys() == {"k0", "k1", "k2"}
        assert not committer.failed
    finally:
        journal.close()
