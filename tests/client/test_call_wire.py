"""What a call puts on the wire and reads back, per test: the seed of each attempt, `tool_choice` only with
tools, a tool's API name both ways, and a failed call's latency over all its tries."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engine.client.client import ModelClient
from engine.client.request import RequestSettings, prepare
from engine.client.response import CallResult
from engine.client.session import Sessions
from engine.model.model_config import ModelConfig
from engine.model.test import Test
from tests.factories import make_test
from tests.fake_openai import FakeOpenAI, Reply

TEST = make_test(messages=({"role": "user", "content": "hi"},), prompt="hi")
BOOK = {"type": "function", "function": {"name": "calendar.book", "description": "", "parameters": {}}}


def model_for(server: FakeOpenAI, **overrides: Any) -> ModelConfig:
    return replace(ModelConfig(name="m", model="fake-1", base_url=server.base_url, timeout_s=5.0), **overrides)


async def call(model: ModelConfig, test: Test = TEST, attempt: int = 0) -> CallResult:
    async with Sessions(8) as sessions:
        return await ModelClient(sessions, {"m": None}).call(model, prepare(model, test, RequestSettings(),
                                                                             attempt=attempt))


@pytest.mark.parametrize(("params", "sent"), [({}, [None, None, None]), ({"seed": 40}, [40, 41, 42]),
                                              ({"seed": 2**63 - 1}, [2**63 - 1, -2**63, -2**63 + 1])])
async def test_each_attempt_has_its_own_seed(fake_openai: FakeOpenAI, params: dict[str, Any], sent: list[Any]
                                             ) -> None:
    model = model_for(fake_openai, params=params)
    for attempt in range(3):
        assert prepare(model, TEST, RequestSettings(), attempt=attempt).seed == sent[attempt]
        await call(model, attempt=attempt)
    assert [body.get("seed") for body in fake_openai.requests] == sent


@pytest.mark.parametrize(("choice", "params", "sent"), [
    (None, {}, "auto"), (None, {"tool_choice": "required"}, "required"), ("none", {"tool_choice": "required"}, "none"),
    ({"type": "function", "function": {"name": "calendar.book"}}, {},
     {"type": "function", "function": {"name": "calendar_book"}})])
async def test_tool_choice_and_api_names_go_out_and_calls_come_back_by_key(
        fake_openai: FakeOpenAI, choice: Any, params: dict[str, Any], sent: Any) -> None:
    fake_openai.script(Reply(content="", tool_calls=[{"name": "calendar_book", "arguments": {"at": "19:00"}}]))
    called = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "calendar.book", "arguments": "{}"}}]}
    test = replace(TEST, tools=(BOOK,), tool_choice=choice, api_names={"calendar.book": "calendar_book"},
                   messages=(*TEST.messages, called, {"role": "tool", "tool_call_id": "c1", "content": "full"}))
    result = await call(model_for(fake_openai, params=params), test)
    body = fake_openai.requests[0]
    assert body["tool_choice"] == sent
    assert body["tools"][0]["function"]["name"] == "calendar_book"
    assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "calendar_book"
    assert [c.name for c in result.tool_calls] == ["calendar.book"]
    assert test.tools[0]["function"]["name"] == "calendar.book"   # the test itself is left as loaded


async def test_no_tool_choice_without_tools_whatever_the_params(fake_openai: FakeOpenAI) -> None:
    await call(model_for(fake_openai, params={"tool_choice": "required"}), replace(TEST, tool_choice="required"))
    assert "tool_choice" not in fake_openai.requests[0] and "tools" not in fake_openai.requests[0]


async def test_a_failed_call_counts_every_try_and_the_waits_between(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(*[Reply(fault="http_500", retry_after="0.3", delay_s=0.2)] * 3)
    result = await call(model_for(fake_openai, max_retries=2))
    assert result.error is not None and result.retries == 2 and len(fake_openai.requests) == 3
    # three tries of at least 0.2 s each and two waits of 0.3 s: far more than the last try alone
    assert result.latency_s is not None and result.latency_s >= 3 * 0.2 + 2 * 0.3
