"""The client against the fake server: streaming, tools, usage, every fault ends classified."""

from __future__ import annotations

import socket
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


def model_for(server: FakeOpenAI, **overrides: Any) -> ModelConfig:
    return replace(ModelConfig(name="m", model="fake-1", base_url=server.base_url, timeout_s=5.0), **overrides)


async def call(server: FakeOpenAI, *, stream: bool = True, test: Test = TEST, **model_fields: Any) -> CallResult:
    model = model_for(server, **model_fields)
    async with Sessions(64) as sessions:
        client = ModelClient(sessions, {"m": "sk-test"})
        return await client.call(model, prepare(model, test, RequestSettings(stream=stream)))


@pytest.mark.parametrize("stream", [True, False])
async def test_plain_answer_with_usage(fake_openai: FakeOpenAI, stream: bool) -> None:
    fake_openai.script(Reply(content="The capital is Paris.", usage={
        "prompt_tokens": 7, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 2}}))
    result = await call(fake_openai, stream=stream)
    assert result.error is None
    assert result.text == "The capital is Paris."
    assert (result.prompt_tokens, result.completion_tokens, result.cached_tokens, result.reasoning_tokens) == (
        7, 5, 3, 2)
    assert result.finish_reason == "stop" and result.served_model == "fake-1"
    assert result.system_fingerprint == "fp_fake"
    assert result.latency_s is not None and result.ttft_provider_s is not None
    assert (result.ttft_visible_s is not None) is stream
    body = fake_openai.requests[0]
    assert body["stream"] is stream and body["max_tokens"] == 1024 and body["temperature"] == 0.0
    assert ("stream_options" in body) is stream


async def test_missing_usage_is_null_not_zero(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(usage=None))
    result = await call(fake_openai)
    assert result.error is None
    assert result.prompt_tokens is None and result.completion_tokens is None


@pytest.mark.parametrize("stream", [True, False])
async def test_reasoning_kept_apart(fake_openai: FakeOpenAI, stream: bool) -> None:
    fake_openai.script(Reply(content="42", reasoning="let me think"),
                       Reply(content="<think>hmm</think>\n\n42"))
    first = await call(fake_openai, stream=stream)
    second = await call(fake_openai, stream=stream)
    assert (first.text, first.reasoning) == ("42", "let me think")
    assert (second.text, second.reasoning) == ("42", "hmm")


@pytest.mark.parametrize("tool_index", [True, False])
async def test_tool_call_deltas_are_joined(fake_openai: FakeOpenAI, tool_index: bool) -> None:
    fake_openai.script(Reply(content="", tool_index=tool_index, arg_chunks=4, tool_calls=[
        {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}},
        {"name": "get_time", "arguments": '{"tz": '}]))
    test = replace(TEST, tools=({"type": "function", "function": {"name": "get_weather"}},))
    result = await call(fake_openai, test=test)
    assert result.error is None and result.finish_reason == "tool_calls"
    first, second = result.tool_calls
    assert (first.name, first.arguments, first.valid_json) == ("get_weather", {"city": "Paris", "unit": "c"}, True)
    assert (second.name, second.valid_json, second.raw_arguments) == ("get_time", False, '{"tz": ')
    assert fake_openai.requests[0]["tool_choice"] == "auto"


async def test_tool_call_arguments_sent_as_json_values(fake_openai: FakeOpenAI) -> None:
    """`arguments: null` stays null (scored as not an object); no `arguments` at all is a call without any."""
    fake_openai.script(Reply(content="", tool_calls=[
        {"function": {"name": "a", "arguments": None}},
        {"function": {"name": "b", "arguments": {"x": 1}}},
        {"function": {"name": "c"}}]))
    result = await call(fake_openai, stream=False)
    assert result.error is None
    got = [(c.name, c.arguments, c.raw_arguments, c.valid_json) for c in result.tool_calls]
    assert got == [("a", None, "null", True), ("b", {"x": 1}, '{"x": 1}', True), ("c", {}, "", True)]


async def test_completions_api(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(content="done"))
    result = await call(fake_openai, api="completions")
    assert result.error is None and result.text == "done"
    assert fake_openai.requests[0]["prompt"] == "hi"


async def test_429_with_retry_after_is_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(fault="http_429", retry_after="0.05"), Reply(content="ok"))
    result = await call(fake_openai)
    assert result.error is None and result.retries == 1
    assert result.rate_limit_wait_s == pytest.approx(0.05)


async def test_500_then_success(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(fault="http_500", retry_after_ms="10"), Reply(content="ok"))
    result = await call(fake_openai)
    assert (result.error, result.retries, result.rate_limit_wait_s) == (None, 1, 0.0)


async def test_retries_are_bounded(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(*[Reply(fault="http_502", retry_after_ms="5")] * 5)
    result = await call(fake_openai, max_retries=2)
    assert result.error is not None and result.error.kind == "http_502"
    assert result.retries == 2 and len(fake_openai.requests) == 3


async def test_400_is_never_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(fault="http_400"), Reply())
    result = await call(fake_openai)
    assert result.error is not None and result.error.kind == "http_400" and result.retries == 0
    assert len(fake_openai.requests) == 1


# llama-cpp-python's reply to `content: null` (its request type's seven alternatives, each refused), as the server
# sent it: the reason (the assistant turn's content is not a string) is the third of seven.
VALIDATION = "7 validation errors:\n" + "\n".join(
    f"  {{'type': 'literal_error', 'loc': ('body', 'messages', 1, '{kind}', 'role'), 'msg': \"Input should be "
    f"'{role}'\", 'input': 'assistant'}}" if kind != "ChatCompletionRequestAssistantMessage" else
    "  {'type': 'string_type', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestAssistantMessage', 'content'), "
    "'msg': 'Input should be a valid string', 'input': None}"
    for kind, role in [("ChatCompletionRequestSystemMessage", "system"), ("ChatCompletionRequestUserMessage", "user"),
                       ("ChatCompletionRequestAssistantMessage", ""), ("ChatCompletionRequestToolMessage", "tool"),
                       ("ChatCompletionRequestToolMessage", "tool"), ("ChatCompletionRequestFunctionMessage",
                                                                      "function"),
                       ("ChatCompletionRequestFunctionMessage", "function")])


@pytest.mark.parametrize("stream", [True, False])
async def test_the_servers_own_error_text_reaches_the_error_capped_and_masked(fake_openai: FakeOpenAI,
                                                                            stream: bool) -> None:
    key = "sk-live-0123456789abcdefghij"
    long_tail = " and more" * 300
    fake_openai.script(Reply(fault="http_500", error_message=f"for key {key}: {VALIDATION}{long_tail}"))
    model = model_for(fake_openai, max_retries=0)
    async with Sessions(4) as sessions:
        result = await ModelClient(sessions, {"m": key}).call(model, prepare(model, TEST, RequestSettings(
            stream=stream)))
    message = str(result.error)
    assert message.startswith("HTTP 500 from the server: for key ***: 7 validation errors: {'type': 'literal_")
    assert key not in message
    assert "'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string'" in message
    assert message.endswith(" ... (cut)") and len(message) < 1100


@pytest.mark.parametrize("stream", [True, False])
async def test_a_redirect_is_not_followed_and_says_where_the_endpoint_moved(fake_openai: FakeOpenAI,
                                                                            stream: bool) -> None:
    fake_openai.script(Reply(fault="http_308", location="https://u:pw@api.example.com/v2/chat/completions"),
                       Reply())
    result = await call(fake_openai, stream=stream)
    assert result.error is not None and result.error.kind == "http_308" and result.retries == 0
    assert "the endpoint moved to https://***@api.example.com/v2/chat/completions" in str(result.error)
    assert len(fake_openai.requests) == 1


async def test_reset_mid_stream_is_not_sent_again_and_keeps_the_partial_answer(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(*[Reply(fault="reset", content="a fairly long answer here")] * 3)
    result = await call(fake_openai, max_retries=2)
    assert result.error is not None and result.error.kind == "connection" and not result.error.retryable
    assert result.retries == 0 and len(fake_openai.requests) == 1
    assert result.truncated and result.text and "a fairly long answer here".startswith(result.text)
    assert f"cut after {len(result.text)} characters" in str(result.error) and "--retry-errors" in str(result.error)


async def test_a_connection_dropped_before_any_reply_is_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(fault="drop"), Reply(content="Paris"))
    result = await call(fake_openai, max_retries=2)
    assert result.error is None and result.text == "Paris"
    assert result.retries == 1 and len(fake_openai.requests) == 2


async def test_a_stall_after_the_reply_started_times_out_once(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(*[Reply(fault="stall", stall_s=30, content="Paris")] * 2)
    result = await call(fake_openai, timeout_s=0.3, max_retries=1)
    assert result.error is not None and result.error.kind == "timeout" and result.truncated
    assert result.retries == 0 and len(fake_openai.requests) == 1 and result.text == "P"
    assert "cut after 1 characters" in str(result.error)


async def test_a_reply_that_never_starts_times_out_after_the_retries(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(*[Reply(delay_s=30)] * 2)
    result = await call(fake_openai, timeout_s=0.3, max_retries=1)
    assert result.error is not None and result.error.kind == "timeout" and result.error.retryable
    assert result.retries == 1 and len(fake_openai.requests) == 2 and "--retry-errors" not in str(result.error)


async def test_a_timed_out_try_is_retried_as_openai_python_does(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(delay_s=30), Reply(content="Paris"))
    result = await call(fake_openai, timeout_s=0.3, max_retries=2)
    assert result.error is None and result.text == "Paris" and not result.truncated
    assert result.retries == 1 and len(fake_openai.requests) == 2


async def test_malformed_sse_is_a_stream_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(fault="malformed"))
    result = await call(fake_openai)
    assert result.error is not None and result.error.kind == "stream" and result.retries == 0


async def test_missing_done_is_truncated_never_success(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(fault="no_done", content="half an ans"))
    result = await call(fake_openai)
    assert result.error is not None and result.error.kind == "stream"
    assert result.truncated and result.text == "half an ans"


async def test_five_megabyte_line(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(fault="huge_line"))
    result = await call(fake_openai)
    assert result.error is None and len(result.text) == 5 * 1024 * 1024


async def test_served_model_is_recorded(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(model="gpt-4o-mini-2024-07-18"))
    result = await call(fake_openai)
    assert result.served_model == "gpt-4o-mini-2024-07-18"


async def test_length_finish_is_truncated(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(finish_reason="length"))
    result = await call(fake_openai)
    assert result.error is None and result.truncated


async def test_connection_refused(unused_tcp_port: int) -> None:
    model = ModelConfig(name="m", model="x", base_url=f"http://127.0.0.1:{unused_tcp_port}/v1", max_retries=1)
    async with Sessions(64) as sessions:
        result = await ModelClient(sessions, {}).call(model, prepare(model, TEST, RequestSettings()))
    assert result.error is not None and result.error.kind == "connection" and result.retries == 1


async def test_a_connect_that_never_completes_is_a_timeout_of_connect_timeout_s() -> None:
    # A listener with backlog 0 that never accepts: once its queue holds one connection, the kernel drops
    # further SYNs, so the client's connect neither succeeds nor fails.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    held: list[socket.socket] = []
    try:
        while True:   # fill the queue: stop at the first connect that does not complete
            probe = socket.socket()
            held.append(probe)
            probe.settimeout(1)
            try:
                probe.connect(("127.0.0.1", port))
            except TimeoutError:
                break
            assert len(held) < 16, "the listener's queue never filled"
        model = ModelConfig(name="m", model="x", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0,
                            timeout_s=600, connect_timeout_s=0.3)
        async with Sessions(4) as sessions:
            result = await ModelClient(sessions, {}).call(model, prepare(model, TEST, RequestSettings()))
    finally:
        for sock in (*held, listener):
            sock.close()
    assert result.error is not None and result.error.kind == "timeout" and result.error.retryable
    assert "no connection within 0.3 s (connect_timeout_s" in str(result.error)


@pytest.mark.parametrize(("cli", "model_param", "test_value", "sent"), [
    (None, None, None, 1024),     # the engine's default floor
    (None, 16, None, 16),         # a model's params.max_tokens is its floor
    (None, 16, 64, 64),           # a test's value raises the floor
    (None, 16, 8, 16),            # ...and never lowers it
    (32, 16, None, 32),           # --max-tokens overrides the model's floor
    (32, 16, 100, 100),
])
def test_max_tokens_precedence(cli: int | None, model_param: int | None, test_value: int | None,
                               sent: int) -> None:
    params = {} if model_param is None else {"max_tokens": model_param}
    model = ModelConfig(name="m", model="fake-1", base_url="http://127.0.0.1:1/v1", params=params)
    request = prepare(model, replace(TEST, max_tokens=test_value), RequestSettings(max_tokens=cli))
    assert request.body["max_tokens"] == sent and request.max_tokens == sent


async def test_calls_waiting_to_retry_are_counted(fake_openai: FakeOpenAI) -> None:
    import asyncio

    fake_openai.script(Reply(fault="http_429", retry_after="0.5"), Reply(content="Paris"))
    model = model_for(fake_openai)
    async with Sessions(64) as sessions:
        client = ModelClient(sessions, {})
        task = asyncio.create_task(client.call(model, prepare(model, TEST, RequestSettings())))
        seen = 0
        while not task.done():
            seen = max(seen, client.retrying)
            await asyncio.sleep(0.02)
        result = task.result()
    assert result.text == "Paris" and result.retries == 1
    assert seen == 1 and client.retrying == 0
