"""`api: chat`: OpenAI's chat completions (`POST {base_url}/chat/completions`), the engine's own message shape.

The body is the messages as they are (less another API's `base.ECHO`; an assistant turn without text gets
`content: ""`, the form every OpenAI-compatible server takes), the tools with the test's `tool_choice`
(else the params', else `auto`; none at all without tools), the model's `params`, then the resolved `max_tokens`,
`temperature`, `seed` and `stream` (with `stream_options.include_usage`). Replies are read by
`engine.client.response`; a stream ends at `data: [DONE]`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from engine.client import retry
from engine.client.providers.base import ECHO, Embeddings, Provider, WireRequest, check_stream_end, error_message
from engine.client.providers.openai_batch import CHAT_BATCH
from engine.client.response import CallResult, ToolCallAccumulator, apply_event, decode_events, parse_whole
from engine.errors import ClientError
from engine.model.model_config import ModelConfig
from engine.redact import Redactor

__all__ = ["EMBEDDINGS", "PROVIDER", "OpenAIStream", "bearer_headers", "classify", "with_sampling"]


def build(request: WireRequest) -> dict[str, Any]:
    """The chat completions body."""
    body: dict[str, Any] = {"model": request.model, "messages": [_wire_message(m) for m in request.messages]}
    if request.tools:
        body["tools"] = list(request.tools)
    body = with_sampling(body, request)
    if request.tools:   # the test's choice, else one in the model's params, else auto
        body["tool_choice"] = request.tool_choice or body.get("tool_choice") or "auto"
    return body


def _wire_message(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """A message as every OpenAI-compatible server takes it: another API's `ECHO` left out, and an assistant turn
    without text (one that only calls tools) sent with `content: ""`.

    OpenAI takes that turn's content as null, "" or left out; llama-cpp-python's server refuses null (its request
    type wants a string) and its stock chat templates fail on a missing key; LM Studio and mlx-lm refuse null,
    vLLM and SGLang a missing key. An empty string is what all of them take.
    """
    if ECHO in message:
        message = {k: v for k, v in message.items() if k != ECHO}
    if message.get("content") is None and message.get("role") == "assistant":
        message = {**message, "content": ""}
    return message


def with_sampling(body: dict[str, Any], request: WireRequest) -> dict[str, Any]:
    """The model's params, then the resolved settings over them (shared with `api: completions`)."""
    body.update(request.params)
    if not request.tools:
        body.pop("tool_choice", None)   # never on a request without tools, whatever the params say
    body["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.seed is not None:
        body["seed"] = request.seed
    body["stream"] = request.stream
    if request.stream:
        body["stream_options"] = {"include_usage": True}
    return body


def bearer_headers(key: str | None) -> dict[str, str]:
    """JSON both ways, the key as `Authorization: Bearer`."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def classify(status: int, headers: Mapping[str, str], body: str) -> tuple[ClientError, float | None]:
    """A non-2xx reply by `engine.client.retry`'s rules, shown by its `error.message` (the body when it has none)."""
    return retry.status_error(status, headers, error_message(body)), None


class OpenAIStream:
    """Reads an OpenAI SSE stream: chunks of `choices[0].delta` (or `.text`), usage last, then `[DONE]`."""

    __slots__ = ("_calls", "_completions", "_reasoning", "_redact", "_result", "_text", "done")

    def __init__(self, result: CallResult, redact: Redactor, completions: bool = False) -> None:
        self._result = result
        self._redact = redact
        self._completions = completions
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls = ToolCallAccumulator()
        self.done = False

    def feed(self, datas: list[str]) -> bool:
        """Fold in a chunk's events, up to `[DONE]`."""
        if "[DONE]" in datas:
            datas = datas[:datas.index("[DONE]")]
            self.done = True
        visible = False
        for event in decode_events(datas, self._redact):
            if apply_event(event, self._result, self._text, self._reasoning, self._calls, self._completions,
                           self._redact):
                visible = True
        return visible

    def keep(self) -> None:
        """The text, reasoning and tool calls read so far (a tool call cut mid-arguments is left out)."""
        self._result.text = "".join(self._text)
        self._result.reasoning = "".join(self._reasoning) if self._reasoning else None
        with contextlib.suppress(ClientError):
            self._result.tool_calls = self._calls.finish()

    def end(self) -> None:
        """Raise when the stream ended without `[DONE]` or without a finish reason."""
        self._result.tool_calls = self._calls.finish()
        check_stream_end(self._result, done=self.done, marker="[DONE]", reason="a finish reason")


def _embeddings_body(model: ModelConfig, texts: Any) -> dict[str, Any]:
    # The model's chat `params` are not sent (max_tokens, temperature mean nothing here and some servers refuse
    # unknown fields); they still key the cache through the model's identity.
    return {"model": model.model, "input": list(texts), "encoding_format": "float"}


def _embeddings_read(data: Any) -> tuple[list[Any], Any]:
    if type(data) is not dict or type(data.get("data")) is not list:
        raise retry.bad_response("the /embeddings reply has no `data` list")
    items = data["data"]
    if all(type(item) is dict and type(item.get("index")) is int for item in items):
        items = sorted(items, key=lambda item: item["index"])
    return [item.get("embedding") if type(item) is dict else None for item in items], data.get("usage")


EMBEDDINGS = Embeddings(path=lambda model: "/embeddings", body=_embeddings_body, read=_embeddings_read)

PROVIDER = Provider(name="chat", chat=True, path=lambda model, stream: "/chat/completions", headers=bearer_headers,
                    build=build, parse=parse_whole, stream=OpenAIStream, classify=classify, embeddings=EMBEDDINGS,
                    batch=CHAT_BATCH)
