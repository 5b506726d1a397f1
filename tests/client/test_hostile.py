"""A hostile server: every reply the client cannot read ends as one classified error.

Each case is sent by the fake server byte for byte (`Reply(raw=...)`), streamed and not. The client
must return a result - never raise - with the right `error_kind`, a message that says what was wrong,
and no retry (the reply was served; the same server sends it again).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from engine.client.client import ModelClient
from engine.client.request import RequestSettings, prepare
from engine.client.response import CallResult
from engine.client.session import Sessions
from engine.client.tool_calls import MAX_ARGUMENT_DEPTH
from engine.model.model_config import ModelConfig
from engine.model.test import Test
from tests.fake_openai import FakeOpenAI, Reply

TEST = Test(suite="s", id="t", file="s.yaml", line=1, messages=({"role": "user", "content": "hi"},),
            prompt="hi", eval=None)
DEEP = 100_000


def deep(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


def whole(choice: Any = None, **top: Any) -> bytes:
    """A non-streaming body; `choice` replaces the first choice, `top` adds or replaces top-level keys."""
    body: dict[str, Any] = {"id": "x", "model": "fake-1", "choices": [
        choice if choice is not None else {"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}]}
    body.update(top)
    return json.dumps(body).encode()


def stream(*events: Any, done: bool = True) -> bytes:
    """An SSE body of these events (dicts are JSON-encoded, str sent as the data verbatim)."""
    out = [b": ping\n\n"]
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        out.append(b"data: " + data.encode() + b"\n\n")
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def chunk(delta: Any = None, finish: str | None = None, **top: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"id": "x", "model": "fake-1", "choices": [
        {"index": 0, "delta": {"content": "ok"} if delta is None else delta, "finish_reason": finish}]}
    event.update(top)
    return event


END = {"id": "x", "model": "fake-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}

# name -> (non-streaming body, streamed body, expected message fragment)
WRONG_SHAPES: dict[str, tuple[bytes, bytes, str]] = {
    "choices is a string": (whole(choices="abc"), stream({"choices": "abc"}, END),
                            "`choices` is a string"),
    "choices holds a number": (whole(choices=[1]), stream({"choices": [1]}, END),
                               "`choices[0]` is a number"),
    "delta/message is a string": (whole({"index": 0, "message": "x"}), stream(chunk("x"), END),
                                  "is a string, expected an object"),
    "usage is a number": (whole(usage=5), stream(chunk(), END, {"choices": [], "usage": 5}),
                          "`usage` is a number"),
    "tool_calls holds junk": (
        whole({"index": 0, "message": {"content": None, "tool_calls": ["junk"]}, "finish_reason": "tool_calls"}),
        stream(chunk({"tool_calls": ["junk"]}), END),
        "tool_calls[0]` is a string"),
    "content is a list": (whole({"index": 0, "message": {"content": [1, 2]}}), stream(chunk({"content": [1]}), END),
                          "content` is a list"),
    "finish_reason is an object": (whole({"index": 0, "message": {"content": "a"}, "finish_reason": {"a": 1}}),
                                   stream(chunk(finish={"a": 1})), "finish_reason` is an object"),
    "body is a list": (b"[1, 2]", stream("[1, 2]", END), "is a list, expected an object"),
    "nested 100,000 deep in the body": (whole(extra=None).replace(b'"extra": null', b'"extra": ' + deep().encode()),
                                        stream('{"choices": [], "x": ' + deep() + "}", END),
                                        "nested too deep"),
    "tool arguments nested 100,000 deep": (
        whole({"index": 0, "finish_reason": "tool_calls", "message": {"content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": deep()}}]}}),
        stream(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": deep()}}]},
                     finish="tool_calls"), END),
        "nested too deep"),
    "tool arguments past the depth limit": (
        whole({"index": 0, "finish_reason": "tool_calls", "message": {"content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": deep(MAX_ARGUMENT_DEPTH + 1)}}]}}),
        stream(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {
            "name": "f", "arguments": deep(MAX_ARGUMENT_DEPTH + 1)}}]}, finish="tool_calls"), END),
        f"nested deeper than {MAX_ARGUMENT_DEPTH} levels"),
}


def model_for(server: FakeOpenAI, **overrides: Any) -> ModelConfig:
    return replace(ModelConfig(name="m", model="fake-1", base_url=server.base_url, timeout_s=10.0), **overrides)


async def call(server: FakeOpenAI, *, stream: bool, **model_fields: Any) -> CallResult:
    model = model_for(server, **model_fields)
    async with Sessions(64) as sessions:
        client = ModelClient(sessions, {"m": "sk-test"})
        return await client.call(model, prepare(model, TEST, RequestSettings(stream=stream)))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("case", list(WRONG_SHAPES))
async def test_wrong_shape_is_one_bad_response(fake_openai: FakeOpenAI, case: str, stream: bool) -> None:
    body, sse, fragment = WRONG_SHAPES[case]
    fake_openai.script(Reply(raw=sse if stream else body))
    result = await call(fake_openai, stream=stream)
    assert result.error is not None, result
    assert result.error.kind == "bad_response", str(result.error)
    assert fragment in str(result.error)
    assert result.retries == 0 and len(fake_openai.requests) == 1   # not retried: it was served


def test_a_bad_response_is_never_retried() -> None:
    from engine.client import retry

    assert not retry.bad_response("x").retryable and not retry.too_large(1).retryable


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("value", "shown"), [(1e20, "1e+20"), (-5, "-5"), (2.5, "2.5"), (10**20, "1000"),
                                              ("12", "a string"), (True, "a boolean")])
async def test_absurd_token_counts_are_null_with_a_note(fake_openai: FakeOpenAI, stream: bool, value: Any,
                                                        shown: str) -> None:
    fake_openai.script(Reply(content="Paris", usage={"prompt_tokens": value, "completion_tokens": 3.0}))
    result = await call(fake_openai, stream=stream)
    assert result.error is None and result.text == "Paris"
    assert result.prompt_tokens is None and result.completion_tokens == 3   # 3.0 is a whole number: kept
    assert len(result.notes) == 1 and result.notes[0].startswith("usage.prompt_tokens " + shown)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_reply_over_the_size_cap_is_an_error_row(fake_openai: FakeOpenAI, stream: bool,
                                                        chunked: bool) -> None:
    big = "x" * (2 * 2**20)
    if chunked:
        fake_openai.script(Reply(raw=stream_body(big) if stream else whole({"index": 0, "message": {"content": big}})))
    else:
        fake_openai.script(Reply(content=big, chunk_chars=len(big)))
    result = await call(fake_openai, stream=stream, max_response_mb=1.0)
    assert result.error is not None and result.error.kind == "response_too_large"
    assert "over 1 MB" in str(result.error) and "max_response_mb" in str(result.error)
    assert result.retries == 0 and len(fake_openai.requests) == 1
    fake_openai.script(Reply(content=big, chunk_chars=2**16))
    fine = await call(fake_openai, stream=stream, max_response_mb=4.0)   # under the cap: read whole
    assert fine.error is None and fine.text == big


def stream_body(text: str) -> bytes:
    return stream(chunk({"content": text}), END)


async def test_a_50_megabyte_line_is_read(fake_openai: FakeOpenAI) -> None:
    text = "y" * (50 * 2**20)
    fake_openai.script(Reply(raw=stream_body(text)))
    result = await call(fake_openai, stream=True, max_response_mb=64.0)
    assert result.error is None and len(result.text) == len(text)
