"""The Anthropic and Gemini providers through the real client against loopback servers speaking their wire formats:
stop reasons and safety stops named, broken streams, errors read from their bodies, embeddings, schemas mapped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from engine.client.client import ModelClient
from engine.client.providers import PROVIDERS, WireRequest
from engine.client.providers.gemini import gemini_schema
from engine.client.request import PreparedRequest, RequestSettings, prepare
from engine.client.response import CallResult
from engine.client.session import Sessions
from engine.errors import UsageError
from engine.judge import embeddings
from engine.judge.caller import resolve_judges
from engine.model.model_config import ModelConfig
from engine.model.test import Test
from engine.suite import models_schema
from tests import fake_anthropic, fake_gemini
from tests.factories import make_test
from tests.fake_anthropic import FakeAnthropic
from tests.fake_gemini import FakeGemini
from tests.fake_openai import bag_of_words

KEY = "sk-provider-unit-KEY-0123456789"
TEST = make_test(messages=({"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}),
                 prompt="hi")


@pytest.fixture
def claude() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture
def gemini() -> Iterator[FakeGemini]:
    server = FakeGemini().start()
    yield server
    server.stop()


def model_of(server: Any, api: str, **fields: Any) -> ModelConfig:
    return replace(ModelConfig(name="m", model=f"{api}-1", base_url=server.base_url, api=api, timeout_s=5.0),
                   **fields)


async def call(model: ModelConfig, *, stream: bool = True, test: Test = TEST) -> CallResult:
    async with Sessions(8) as sessions:
        client = ModelClient(sessions, {"m": KEY})
        return await client.call(model, prepare(model, test, RequestSettings(stream=stream)))


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("stop", "finish", "truncated"), [("refusal", "refusal", False),
                                                         ("stop_sequence", "stop", False),
                                                         ("max_tokens", "length", True)])
async def test_anthropic_stop_reasons_on_the_engines_scale(claude: FakeAnthropic, stream: bool, stop: str,
                                                           finish: str, truncated: bool) -> None:
    claude.script(fake_anthropic.Reply(text="No.", stop=stop))
    result = await call(model_of(claude, "anthropic"), stream=stream)
    assert result.error is None
    assert (result.text, result.finish_reason, result.truncated) == ("No.", finish, truncated)
    assert claude.keys == {KEY}


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("reply", "finish"), [
    (fake_gemini.Reply(text="", finish="SAFETY"), "safety"),
    (fake_gemini.Reply(text="The lyrics", finish="RECITATION"), "recitation"),
    (fake_gemini.Reply(block="PROHIBITED_CONTENT"), "blocked_prohibited_content"),
    (fake_gemini.Reply(text="Once", finish="MAX_TOKENS"), "length"),
])
async def test_gemini_safety_stops_and_blocked_prompts_are_named(gemini: FakeGemini, stream: bool,
                                                                 reply: fake_gemini.Reply, finish: str) -> None:
    gemini.script(reply)
    result = await call(model_of(gemini, "gemini"), stream=stream)
    assert result.error is None, result.error
    assert result.finish_reason == finish and result.served_model == "gemini-1-001"
    assert result.truncated is (finish == "length")


def _events(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


START = {"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 5, "output_tokens": 1}}}
TEXT = [{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Half an ans"}}]


async def test_an_anthropic_error_event_mid_stream_keeps_the_partial_answer_and_is_not_sent_again(
        claude: FakeAnthropic) -> None:
    claude.script(fake_anthropic.Reply(raw=_events(START, *TEXT, {"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}})))
    result = await call(model_of(claude, "anthropic"))
    assert result.error is not None and result.error.kind == "stream" and not result.error.retryable
    assert "overloaded_error: Overloaded" in str(result.error) and "--retry-errors" in str(result.error)
    assert result.text == "Half an ans" and result.served_model == "claude-x"
    assert len(claude.requests) == 1


async def test_an_anthropic_stream_without_message_stop_is_truncated(claude: FakeAnthropic) -> None:
    claude.script(fake_anthropic.Reply(raw=_events(START, *TEXT)))
    result = await call(model_of(claude, "anthropic"))
    assert result.error is not None and "without message_stop" in str(result.error)
    assert result.truncated and result.text == "Half an ans" and len(claude.requests) == 1


async def test_a_gemini_stream_closed_before_its_finish_reason_is_truncated(gemini: FakeGemini) -> None:
    chunk = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Par"}]}}], "modelVersion": "g-1"}
    gemini.script(fake_gemini.Reply(raw=b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"))
    result = await call(model_of(gemini, "gemini"))
    assert result.error is not None and "without a finishReason" in str(result.error)
    assert result.truncated and result.text == "Par"


@pytest.mark.parametrize("raw", [
    b'{"type": "message", "content": "not a list"}',
    b'{"type": "message", "content": [{"type": "tool_use", "name": "f", "input": [1]}]}',
])
async def test_an_anthropic_reply_of_the_wrong_shape_is_a_bad_response(claude: FakeAnthropic, raw: bytes) -> None:
    claude.script(fake_anthropic.Reply(raw=raw))
    result = await call(model_of(claude, "anthropic"), stream=False)
    assert result.error is not None and result.error.kind == "bad_response" and len(claude.requests) == 1


@pytest.mark.parametrize(("status", "shown"), [(401, "authentication_error: invalid x-api-key"),
                                               (403, "permission_error: invalid x-api-key")])
async def test_anthropic_auth_errors_are_one_line_never_retried_and_masked(claude: FakeAnthropic, status: int,
                                                                         shown: str) -> None:
    claude.script(fake_anthropic.Reply(status=status, message=f"invalid x-api-key\n{KEY}"))
    result = await call(model_of(claude, "anthropic", max_retries=3))
    assert result.error is not None and result.error.kind == f"http_{status}" and result.retries == 0
    assert shown in str(result.error) and KEY not in str(result.error) and "\n" not in str(result.error)
    assert len(claude.requests) == 1


async def test_gemini_retry_info_delay_is_waited(gemini: FakeGemini) -> None:
    gemini.script(fake_gemini.Reply(status=429, message="Quota", retry_delay="0.2s"), fake_gemini.Reply(text="ok"))
    result = await call(model_of(gemini, "gemini"))
    assert result.error is None and result.text == "ok" and result.retries == 1
    assert result.rate_limit_wait_s == pytest.approx(0.2)


async def test_gemini_embeddings_through_batch_embed_contents(gemini: FakeGemini) -> None:
    model = model_of(gemini, "gemini", model="text-embedding-004")
    texts = ["the cat sat", "a dog ran"]
    reader = embeddings.VectorReader(len(texts), model)
    request = PreparedRequest(embeddings.embeddings_url(model), embeddings.request_body(model, texts), False, None,
                              0, None, reader=reader.read, api="gemini")
    async with Sessions(8) as sessions:
        result = await ModelClient(sessions, {"m": KEY}).call(model, request)
    assert result.error is None
    assert reader.vectors == [tuple(bag_of_words(text)) for text in texts]
    assert gemini.paths == ["/v1beta/models/text-embedding-004:batchEmbedContents"]
    assert gemini.requests[0]["requests"][0]["model"] == "models/text-embedding-004"


def test_similar_on_an_anthropic_model_is_refused_before_any_call() -> None:
    test = make_test(eval={"similar": {"reference": "a cat", "model": "claude"}})
    claude = ModelConfig(name="claude", model="c", base_url="http://127.0.0.1:1/v1", api="anthropic")
    with pytest.raises(UsageError, match="anthropic API: it has no embeddings method"):
        resolve_judges([test], {"claude": claude}, None, "models.yaml")


def test_json_schema_mapped_onto_geminis_subset() -> None:
    schema = {"type": "object", "additionalProperties": False, "$schema": "x",
              "properties": {"when": {"type": ["string", "null"], "format": "date-time"},
                             "kind": {"const": "a"},
                             "tags": {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                                      "uniqueItems": True}},
              "required": ["kind"]}
    assert gemini_schema(schema) == {
        "type": "object",
        "properties": {"when": {"nullable": True, "type": "string", "format": "date-time"},
                       "kind": {"enum": ["a"]},
                       "tags": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}},
        "required": ["kind"]}


CALL = {"id": "c1", "type": "function", "function": {"name": "find_slots", "arguments": '{"party": 2}'}}


@pytest.mark.parametrize(("choice", "anthropic", "gemini_config"), [
    ("required", {"type": "any"}, {"mode": "ANY"}),
    ("none", {"type": "none"}, {"mode": "NONE"}),
    ({"type": "function", "function": {"name": "f"}}, {"type": "tool", "name": "f"},
     {"mode": "ANY", "allowedFunctionNames": ["f"]}),
])
def test_tool_choice_on_each_wire(choice: Any, anthropic: dict[str, Any], gemini_config: dict[str, Any]) -> None:
    wire = WireRequest(model="m", messages=[{"role": "user", "content": "q"}],
                       tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                       tool_choice=choice)
    assert PROVIDERS["anthropic"].build(wire)["tool_choice"] == anthropic
    assert PROVIDERS["gemini"].build(wire)["toolConfig"] == {"functionCallingConfig": gemini_config}


def test_an_image_goes_inline_on_both_wires() -> None:
    parts = [{"type": "text", "text": "What is this?"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
    wire = WireRequest(model="m", messages=[{"role": "user", "content": parts}])
    assert PROVIDERS["anthropic"].build(wire)["messages"][0]["content"][1] == {
        "type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    assert PROVIDERS["gemini"].build(wire)["contents"][0]["parts"][1] == {
        "inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}


@pytest.mark.parametrize("called", [
    {"role": "assistant", "content": None, "tool_calls": [CALL]},   # the docs' mid-way conversation
    {"role": "assistant", "tool_calls": [CALL]},                     # an agent turn: no content key at all
])
def test_a_turn_that_only_calls_tools_goes_out_in_the_form_each_api_takes(called: dict[str, Any]) -> None:
    """OpenAI takes null, "" or no key; llama-cpp-python's server refuses null and its templates a missing key:
    chat sends "". Anthropic's turn is its tool_use blocks alone (an empty text block is refused), Gemini's its
    functionCall parts alone."""
    wire = WireRequest(model="m", messages=[{"role": "user", "content": "Book for two."}, called,
                                            {"role": "tool", "tool_call_id": "c1", "content": "[19:00]"}],
                       tools=[{"type": "function", "function": {"name": "find_slots", "parameters": {}}}])
    chat = PROVIDERS["chat"].build(wire)["messages"][1]
    assert chat["content"] == "" and chat["tool_calls"] == [CALL]
    assert PROVIDERS["anthropic"].build(wire)["messages"][1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "c1", "name": "find_slots", "input": {"party": 2}}]}
    assert PROVIDERS["gemini"].build(wire)["contents"][1] == {"role": "model", "parts": [
        {"functionCall": {"name": "find_slots", "args": {"party": 2}}}]}
    assert "content" not in called or called["content"] is None   # the test's own messages are left as loaded


def test_the_models_schema_names_every_provider() -> None:
    assert models_schema.MODELS_SCHEMA["$defs"]["model"]["properties"]["api"]["enum"] == list(PROVIDERS)
