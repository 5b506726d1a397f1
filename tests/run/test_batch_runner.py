"""The runner's batch path against OpenAI's Batch API served on loopback (tests/fake_batches.py): what a resumed
run does with a batch recorded without its id (the crash window), and the response cache in front of a batch."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from engine.model.model_config import BatchSettings
from engine.results.journal import BatchRecord, Journal
from engine.results.rows import row_key
from engine.run.run_config import PollPlan
from tests.fake_batches import OpenAIBatchServer
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.helpers import make_model, make_test, run_jobs

FAST = PollPlan(first_s=0.02, most_s=0.02)


def _frame(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir).set_index("test_id").sort_index()


async def test_a_batch_recorded_without_its_id_is_not_sent_again_and_says_why(tmp_path: Path) -> None:
    """A run killed between the provider's acceptance of a batch and the journal's record of its id: resumed, its
    calls are error rows (`batch_unknown`) naming what to do, never sent again; the others go in a new batch."""
    live = FakeOpenAI()
    batches = OpenAIBatchServer(live)
    live.start()
    try:
        live.responder = lambda body: Reply(content="ok")
        model = make_model(live.base_url, batch=BatchSettings(size=10, max_wait_s=60))
        tests = [make_test(i) for i in range(5)]
        keys = [row_key("m", test, 0) for test in tests]
        tmp_path.mkdir(exist_ok=True)
        journal = Journal(tmp_path / "_journal.sqlite")
        journal.put_batch(BatchRecord("lost", "m", None, tuple(keys[:2]), "2026-12-07T00:00:00Z"))
        journal.close()
        stats = await run_jobs(tmp_path, [model], tests, batch_poll=FAST)
        assert (stats.done, stats.errors) == (5, 2)
        frame = _frame(tmp_path)
        assert list(frame["error_kind"].fillna("")) == ["batch_unknown", "batch_unknown", "", "", ""]
        assert frame.loc["t0", "error_message"].endswith("engine run --resume RUN --retry-errors")
        assert len(batches.submitted) == 3 and batches.log.count("POST /v1/batches") == 1
        assert frame.loc[["t2", "t3", "t4"], "batch_id"].tolist() == ["batch_1"] * 3
    finally:
        live.stop()


async def test_a_batched_call_the_response_cache_holds_is_not_sent(tmp_path: Path) -> None:
    """The response cache answers a batched call as it answers a live one: nothing sent, nothing paid."""
    from engine.client.response_cache import ResponseCache
    from engine.results.writer import ResultsWriter
    from engine.run.jobs import iter_jobs
    from engine.run.runner import RunConfig, Runner

    live = FakeOpenAI()
    batches = OpenAIBatchServer(live)
    live.start()
    cache = ResponseCache(tmp_path / "cache.sqlite")
    try:
        live.responder = lambda body: Reply(content="ok")
        model = make_model(live.base_url, batch=BatchSettings(size=10, max_wait_s=60), price_in=1.0, price_out=1.0)
        tests = [make_test(i) for i in range(3)]
        for run in ("first", "second"):
            run_dir = tmp_path / run
            run_dir.mkdir()
            journal = Journal(run_dir / "_journal.sqlite")
            writer = ResultsWriter(run_dir, journal)
            runner = Runner(RunConfig(run_id=run, response_cache=cache, batch_poll=FAST), journal, writer)
            await runner.run({"m": (model, iter_jobs(model, tests, None))}, 3, {"m": None})
            journal.close()
        assert len(batches.submitted) == 3 and batches.log.count("POST /v1/batches") == 1
        second = _frame(tmp_path / "second")
        assert second["cached"].all() and (second["cost"] == 0).all() and second["passed"].all()
        assert _frame(tmp_path / "first")["batch_id"].eq("batch_1").all()
    finally:
        cache.close()
        live.stop()


AGENT_SUITE = """\
suite: s
tools:
  lookup:
    parameters: {type: object, properties: {city: {type: string}}}
    returns: [{result: "18 degrees"}]
tests:
  - id: plain-{{ n }}
    prompt: "plain {{ n }}"
    eval: {contains: ok}
    cases: [{n: 0}, {n: 1}, {n: 2}]
  - id: agent
    prompt: "agent: the weather in Paris?"
    tools: [lookup]
    agent: {max_turns: 3}
    eval: {contains: "18"}
"""


async def test_a_batch_models_agent_tests_go_live_beside_its_batches(tmp_path: Path) -> None:
    """An agent test's turns depend on each other: on a batch model it runs live (streamed, no batch_id) while the
    model's single-turn tests go in a batch."""
    from engine.suite import load_suites

    live = FakeOpenAI()
    batches = OpenAIBatchServer(live)
    live.start()
    try:
        def respond(body: dict) -> Reply:   # type: ignore[type-arg]
            if "agent:" not in str(body["messages"][0]["content"]):
                return Reply(content="ok")
            if any(m["role"] == "tool" for m in body["messages"]):
                return Reply(content="It is 18 degrees.")
            return Reply(content="", tool_calls=[{"name": "lookup", "arguments": {"city": "Paris"}}])

        live.responder = respond
        (tmp_path / "s.yaml").write_text(AGENT_SUITE, encoding="utf-8")
        suites, problems = load_suites([tmp_path / "s.yaml"])
        assert not problems
        model = make_model(live.base_url, batch=BatchSettings(size=10, max_wait_s=60))
        stats = await run_jobs(tmp_path / "run", [model], list(suites[0].tests), batch_poll=FAST)
        assert (stats.done, stats.errors, stats.passed) == (4, 0, 4)
        frame = _frame(tmp_path / "run")
        assert frame["batch_id"].isna().tolist() == [True, False, False, False]   # agent, plain-0, -1, -2
        assert frame.loc["agent", "turns"] == 2 and len(batches.submitted) == 3
        streamed = [body for body in live.requests if body.get("stream")]
        assert len(streamed) == 2   # the conversation's two turns, live
    finally:
        live.stop()


async def test_a_batch_that_fails_whole_gives_each_call_an_error_row_naming_why(tmp_path: Path) -> None:
    from tests.fake_batches import Plan

    live = FakeOpenAI()
    batches = OpenAIBatchServer(live)
    live.start()
    try:
        batches.plan = Plan(fail="line 1: model not found")
        model = make_model(live.base_url, batch=BatchSettings(size=10, max_wait_s=60))
        stats = await run_jobs(tmp_path, [model], [make_test(i) for i in range(3)], batch_poll=FAST)
        assert (stats.done, stats.errors) == (3, 3)
        frame = _frame(tmp_path)
        assert frame["error_kind"].eq("batch_failed").all() and frame["batch_id"].eq("batch_1").all()
        assert frame["error_message"].str.contains("model not found").all()
    finally:
        live.stop()


async def test_retry_errors_on_a_model_no_longer_batched_collects_its_batch_then_sends_what_failed_live(
        tmp_path: Path) -> None:
    """A batch expired with one of its three calls answered; the entry then loses `batch:` and `--retry-errors`
    runs: the batch is read again (a retry killed mid-batch is collected from it), and the two calls it failed go
    live, as the entry says now, not in a new batch."""
    from tests.fake_batches import Plan

    live = FakeOpenAI()
    batches = OpenAIBatchServer(live)
    live.start()
    try:
        live.responder = lambda body: Reply(content="ok")
        batches.plan = Plan(answer_first=1)
        tests = [make_test(i) for i in range(3)]
        model = make_model(live.base_url, batch=BatchSettings(size=10, max_wait_s=60))
        stats = await run_jobs(tmp_path, [model], tests, batch_poll=FAST)
        assert (stats.done, stats.errors) == (3, 2)
        streamed = len(live.requests)
        stats = await run_jobs(tmp_path, [make_model(live.base_url)], tests, batch_poll=FAST, replace_errors=True,
                               only_errors=True)
        assert (stats.done, stats.errors) == (2, 0)
        frame = _frame(tmp_path)
        assert frame["error_kind"].isna().all() and frame["passed"].all()
        assert frame["batch_id"].fillna("").tolist() == ["batch_1", "", ""]
        assert batches.log.count("POST /v1/batches") == 1 and batches.log.count("GET /v1/batches/batch_1") >= 2
        assert [body.get("stream") for body in live.requests[streamed:]] == [True, True]
    finally:
        live.stop()
