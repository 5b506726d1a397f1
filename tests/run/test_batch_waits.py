"""The waits of a model's batches when the provider refuses a batch call with 429 and says how long to wait:
Gemini in the error body (`google.rpc.RetryInfo.retryDelay`, as its live calls read it), OpenAI and Anthropic in
`retry-after`. The batcher drives each provider's real wire over the real transport against its loopback batch
server (tests/fake_batches.py); its pauses are recorded, not slept."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from engine.client.client import ModelClient
from engine.client.request import RequestSettings, prepare
from engine.client.response import CallResult
from engine.client.session import Sessions
from engine.model.model_config import BatchSettings, ModelConfig
from engine.results.journal import Journal
from engine.run.batches import Batcher, BatchRun
from engine.run.run_config import PollPlan, RunStats
from tests import fake_anthropic, fake_gemini, fake_openai
from tests.factories import make_test
from tests.fake_anthropic import FakeAnthropic
from tests.fake_batches import AnthropicBatchServer, BatchServer, GeminiBatchServer, OpenAIBatchServer, Plan
from tests.fake_gemini import FakeGemini
from tests.fake_openai import FakeOpenAI

KEY = "sk-batch-waits-KEY-0123456789abcdef"
#: The plan's pause between polls: the waits a server asks for differ from it.
PLAN = PollPlan(first_s=0.5, most_s=0.5)

SERVERS: dict[str, tuple[Any, Any, Callable[[], Any]]] = {
    "chat": (FakeOpenAI, OpenAIBatchServer, lambda: fake_openai.Reply(content="ok")),
    "anthropic": (FakeAnthropic, AnthropicBatchServer, lambda: fake_anthropic.Reply(text="ok")),
    "gemini": (FakeGemini, GeminiBatchServer, lambda: fake_gemini.Reply(text="ok")),
}


@contextmanager
def served(api: str) -> Iterator[BatchServer]:
    """The API's live fake, answering "ok", with its batch server mounted, running for the block."""
    fake, mount, reply = SERVERS[api]
    live = fake()
    batches: BatchServer = mount(live)
    live.responder = lambda body: reply()
    live.start()
    try:
        yield batches
    finally:
        live.stop()


async def batched(model: ModelConfig, questions: list[str], tmp_path: Path) -> tuple[list[CallResult], list[float]]:
    """Ask `questions` of `model` through its batcher (one batch of them all): the results, and each pause the
    batcher asked its sleep for."""
    journal = Journal(tmp_path / "_journal.sqlite")
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    async def write(change: Callable[[Journal], None]) -> None:
        change(journal)

    try:
        async with Sessions(4) as sessions:
            client = ModelClient(sessions, {"m": KEY})
            wire, batch_api = client.batch_api(model)
            batcher = Batcher(model, BatchSettings(size=len(questions), max_wait_s=60), wire, batch_api,
                              BatchRun(client.read_whole, write, RunStats(), lambda: None, on_cost=lambda cost: None,
                                       afford=len, plan=PLAN, sleep=sleep))
            results = await asyncio.gather(*(
                batcher.call(f"k{i}", prepare(model, make_test(prompt=q, messages=({"role": "user", "content": q},)),
                                              RequestSettings(stream=False)))
                for i, q in enumerate(questions)))
            await batcher.aclose()
        return list(results), waits
    finally:
        journal.close()


@pytest.mark.parametrize("api", ["gemini", "chat", "anthropic"])
async def test_a_throttled_batch_call_waits_what_the_server_asked_not_the_poll_plan(api: str,
                                                                                   tmp_path: Path) -> None:
    """The create and the first poll are refused with 429 asking for 37 s: each is tried again after 37 s (as a
    live call would wait), the next poll after the plan's pause, and both calls are answered from the batch."""
    with served(api) as batches:
        batches.plan = Plan(polls=2, throttle=2, wait_s=37.0)
        model = ModelConfig(name="m", model=f"{api}-1", base_url=batches.server.base_url, api=api, timeout_s=10.0,
                            rate_limit_deadline_s=600.0)
        results, waits = await batched(model, ["q0", "q1"], tmp_path)
        assert [r.error for r in results] == [None, None] and [r.text for r in results] == ["ok", "ok"]
        assert waits == [37.0, 37.0, PLAN.first_s], batches.log   # create refused, poll refused, poll not ended
        assert len(batches.submitted) == 2


async def test_a_wait_the_server_asks_for_is_bounded_by_the_models_rate_limit_deadline(tmp_path: Path) -> None:
    """A hostile server asking for a day waits no longer than the model's `rate_limit_deadline_s`."""
    with served("gemini") as batches:
        batches.plan = Plan(throttle=1, wait_s=86_400.0)
        model = ModelConfig(name="m", model="gemini-1", base_url=batches.server.base_url, api="gemini",
                            timeout_s=10.0, rate_limit_deadline_s=90.0)
        results, waits = await batched(model, ["q"], tmp_path)
        assert results[0].error is None and waits == [90.0]
