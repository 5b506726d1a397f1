"""`api: anthropic`: Anthropic's Messages API (`POST {base_url}/messages`, base_url `https://api.anthropic.com/v1`).

Request: the key in `x-api-key` with `anthropic-version: 2023-06-01`; system messages become the top-level
`system`; user and assistant turns become content blocks (text, base64 or URL images, `tool_use` for the
assistant's calls, `tool_result` for the tools' answers, consecutive answers in one user turn); tools as
`{name, description, input_schema}` and `tool_choice` auto / any / tool / none; `max_tokens` always; the
model's `params` at the top level (`thinking`, `top_k`, `stop_sequences`, `metadata`...). The API has no seed:
`--seed` is not sent. An assistant turn's `thinking` and `redacted_thinking` blocks, kept as the reply sent them
(`base.ECHO`), go back first in that turn: with thinking on, the API refuses a tool_use turn without them.

Reply: `content` blocks (text, thinking -> reasoning, tool_use -> tool calls), `model` (the served model),
`stop_reason` (end_turn and stop_sequence -> stop, max_tokens -> length, tool_use -> tool_calls, refusal and
others by their own name), `usage`. The prompt tokens are the engine's total: `input_tokens` plus
`cache_read_input_tokens` (also `cached_tokens`) plus `cache_creation_input_tokens` (also
`cache_write_tokens`). Streams carry named events (message_start, content_block_start, content_block_delta
with text_delta / input_json_delta / thinking_delta / signature_delta, content_block_stop, message_delta with the
stop reason and usage, message_stop, ping, error); each event's data names its type, which is all that is read.

Failures: 529 `overloaded_error` and 429 are waits (`engine.client.retry`, `retry-after` honoured); an error
body is shown as its `type: message`; embeddings: none (a `similar` naming an anthropic model is refused).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from engine.client import retry
from engine.client.providers.anthropic_batch import BATCH
from engine.client.providers.base import (
    ECHO,
    Provider,
    WireRequest,
    add_turn,
    call_arguments,
    check_stream_end,
    data_url_parts,
    error_message,
    fold_events,
    reply_body,
    system_text,
)
from engine.client.response import CallResult, count
from engine.client.retry import wrong_type
from engine.client.tool_calls import arguments_text, optional_str, tool_call
from engine.errors import ClientError
from engine.redact import Redactor

__all__ = ["PROVIDER", "VERSION", "finish_reason"]

VERSION = "2023-06-01"
_STOPS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
          "model_context_window_exceeded": "length"}
_CHOICES = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}
_SAMPLING = ("max_tokens", "temperature", "seed", "stream")


def headers(key: str | None) -> dict[str, str]:
    """JSON both ways, the key in `x-api-key`, the API version pinned."""
    out = {"Content-Type": "application/json", "Accept": "application/json", "anthropic-version": VERSION}
    if key:
        out["x-api-key"] = key
    return out


def build(request: WireRequest) -> dict[str, Any]:
    """The Messages API body."""
    body: dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens}
    system = [system_text(m.get("content")) for m in request.messages if m.get("role") in ("system", "developer")]
    if any(system):
        body["system"] = "\n\n".join(part for part in system if part)
    body["messages"] = _messages(request.messages)
    if request.tools:
        body["tools"] = [_tool(tool) for tool in request.tools]
        choice = request.tool_choice or "auto"
        if isinstance(choice, Mapping):
            name = (choice.get("function") or {}).get("name")
            body["tool_choice"] = {"type": "tool", "name": name}
        elif choice in _CHOICES:
            body["tool_choice"] = _CHOICES[choice]
    body.update({k: v for k, v in request.params.items() if k not in _SAMPLING})
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stream:
        body["stream"] = True
    return body


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    fn = tool.get("function", tool)
    out: dict[str, Any] = {"name": fn.get("name")}
    if fn.get("description"):
        out["description"] = fn["description"]
    out["input_schema"] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out


def _messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """User and assistant turns as content blocks, consecutive turns of one role merged (the API alternates)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        if role == "tool":
            blocks: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": message.get("tool_call_id"),
                                             "content": system_text(message.get("content"))}]
            role = "user"
        else:
            blocks = [*_thinking(message.get(ECHO)), *_blocks(message.get("content"))]
            for call in message.get("tool_calls") or ():
                fn = call.get("function") or {}
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": fn.get("name"),
                               "input": call_arguments(str(fn.get("arguments") or ""))})
            role = "assistant" if role == "assistant" else "user"
        add_turn(out, role, "content", blocks)
    return out


def _thinking(echo: Any) -> list[dict[str, Any]]:
    """The thinking blocks an assistant turn carries back, as the reply sent them (none when it carries none)."""
    if not isinstance(echo, list):
        return []
    return [dict(block) for block in echo if isinstance(block, Mapping)
            and block.get("type") in ("thinking", "redacted_thinking")]


def _blocks(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            inline = data_url_parts(url)
            source = ({"type": "base64", "media_type": inline[0], "data": inline[1]} if inline
                      else {"type": "url", "url": url})
            blocks.append({"type": "image", "source": source})
    return blocks


def finish_reason(stop: str) -> str:
    """A `stop_reason` on the engine's scale: `stop`, `length`, `tool_calls`, or its own name (`refusal`)."""
    return _STOPS.get(stop, stop)


def _usage(usage: Any, result: CallResult, where: str) -> None:
    """Token counts of a `usage` object; fields it leaves out keep what an earlier event said."""
    if type(usage) is not dict:
        raise wrong_type(where, usage, "an object")
    counts = {key: count(usage, key, where, result) for key in
              ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
              if usage.get(key) is not None}
    fresh = counts.get("input_tokens", _fresh(result))
    if "cache_read_input_tokens" in counts:
        result.cached_tokens = counts["cache_read_input_tokens"]
    if "cache_creation_input_tokens" in counts:
        result.cache_write_tokens = counts["cache_creation_input_tokens"]
    if fresh is not None:
        result.prompt_tokens = fresh + (result.cached_tokens or 0) + (result.cache_write_tokens or 0)
    if "output_tokens" in counts:
        result.completion_tokens = counts["output_tokens"]


def _fresh(result: CallResult) -> int | None:
    """The uncached input tokens an earlier event reported (the prompt total less the cache's)."""
    if result.prompt_tokens is None:
        return None
    return result.prompt_tokens - (result.cached_tokens or 0) - (result.cache_write_tokens or 0)


def _error(data: dict[str, Any], redact: Redactor) -> ClientError:
    error = data.get("error")
    text = error_message(arguments_text(data, "error") if type(error) is dict else str(error))
    return retry.stream_error(f"the server answered with an error: {redact.excerpt(text, retry.SERVER_TEXT_CHARS)}")


def parse(raw: bytes, result: CallResult, redact: Redactor) -> None:
    """Read a whole Messages API reply."""
    data = reply_body(raw, redact)
    if type(data) is not dict:
        raise retry.bad_response(f"the response body is {retry.type_name(data)}, expected an object")
    if data.get("type") == "error":
        raise _error(data, redact)
    content = data.get("content")
    if type(content) is not list:
        raise wrong_type("content", content, "a list")
    result.served_model = optional_str(data, "model", "") or None
    if data.get("usage") is not None:
        _usage(data["usage"], result, "usage")
    stop = optional_str(data, "stop_reason", "")
    result.finish_reason = finish_reason(stop) if stop else None
    text: list[str] = []
    thoughts: list[str] = []
    signed: list[dict[str, Any]] = []
    calls = []
    for where, block in retry.objects(content, "content"):
        kind = block.get("type")
        if kind == "text":
            text.append(optional_str(block, "text", where) or "")
        elif kind == "thinking":
            thought = optional_str(block, "thinking", where) or ""
            thoughts.append(thought)
            signed.append({"type": "thinking", "thinking": thought,
                           "signature": optional_str(block, "signature", where) or ""})
        elif kind == "redacted_thinking":
            signed.append({"type": "redacted_thinking", "data": optional_str(block, "data", where) or ""})
        elif kind == "tool_use":
            arguments = block.get("input")
            if arguments is not None and type(arguments) is not dict:
                raise wrong_type(where + ".input", arguments, "an object")
            calls.append(tool_call(optional_str(block, "name", where) or "",
                                   arguments_text(arguments if arguments is not None else {}, where),
                                   optional_str(block, "id", where)))
    result.text = "".join(text)
    result.reasoning = "".join(thoughts) or None
    result.echo = signed or None
    result.tool_calls = tuple(calls)


class AnthropicStream:
    """Reads a Messages API stream: blocks opened, filled by deltas, closed; the stop reason; `message_stop`."""

    __slots__ = ("_blocks", "_redact", "_result", "done")

    def __init__(self, result: CallResult, redact: Redactor) -> None:
        self._result = result
        self._redact = redact
        # index -> [type, pieces, tool id, tool name, signature pieces (a redacted block: its data)]
        self._blocks: dict[int, list[Any]] = {}
        self.done = False

    def feed(self, datas: list[str]) -> bool:
        """Fold in the events of one chunk; True when text or a tool call arrived."""
        return fold_events(self, datas, self._redact, self._event)

    def _event(self, event: Any) -> bool:
        if type(event) is not dict:
            raise retry.bad_response(f"a server-sent event is {retry.type_name(event)}, expected an object")
        kind = event.get("type")
        result = self._result
        if kind == "content_block_delta":
            block = self._block(event)
            delta = event.get("delta")
            if type(delta) is not dict:
                raise wrong_type("content_block_delta.delta", delta, "an object")
            step = delta.get("type")
            if step == "signature_delta":
                block[4].append(optional_str(delta, "signature", "content_block_delta.delta") or "")
                return False
            field = {"text_delta": "text", "input_json_delta": "partial_json", "thinking_delta": "thinking"}.get(
                str(step))
            if field is None:   # citations_delta and delta types added later: nothing the engine keeps
                return False
            piece = optional_str(delta, field, "content_block_delta.delta") or ""
            block[1].append(piece)
            return step == "input_json_delta" or (step == "text_delta" and not piece.isspace())
        if kind == "content_block_start":
            index = event.get("index")
            start = event.get("content_block")
            if type(index) is not int or type(start) is not dict:
                raise retry.bad_response("content_block_start needs an integer `index` and a `content_block`")
            block_type = start.get("type")
            entry: list[Any] = [block_type, [], optional_str(start, "id", "content_block"),
                                optional_str(start, "name", "content_block"), []]
            opening = {"text": "text", "thinking": "thinking"}.get(str(block_type))
            if opening is not None and start.get(opening):
                entry[1].append(optional_str(start, opening, "content_block"))
            if block_type == "thinking" and start.get("signature"):
                entry[4].append(optional_str(start, "signature", "content_block"))
            if block_type == "redacted_thinking":
                entry[4].append(optional_str(start, "data", "content_block") or "")
            self._blocks[index] = entry
            return block_type == "tool_use"
        if kind == "message_start":
            message = event.get("message")
            if type(message) is not dict:
                raise wrong_type("message_start.message", message, "an object")
            result.served_model = optional_str(message, "model", "message") or result.served_model
            if message.get("usage") is not None:
                _usage(message["usage"], result, "message.usage")
        elif kind == "message_delta":
            delta = event.get("delta")
            if type(delta) is dict and delta.get("stop_reason"):
                result.finish_reason = finish_reason(str(optional_str(delta, "stop_reason", "delta")))
            if event.get("usage") is not None:
                _usage(event["usage"], result, "message_delta.usage")
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise _error(event, self._redact)
        return False   # ping, content_block_stop, and event types added later

    def _block(self, event: dict[str, Any]) -> list[Any]:
        index = event.get("index")
        if type(index) is not int:
            raise wrong_type("content_block_delta.index", index, "a whole number")
        block = self._blocks.get(index)
        if block is None:
            raise retry.bad_response(f"content_block_delta for block {index}, which no content_block_start opened")
        return block

    def keep(self) -> None:
        """The text, thinking (and its signed blocks) and complete tool calls so far."""
        blocks = [self._blocks[i] for i in sorted(self._blocks)]
        self._result.text = "".join("".join(b[1]) for b in blocks if b[0] == "text")
        self._result.reasoning = "".join("".join(b[1]) for b in blocks if b[0] == "thinking") or None
        self._result.echo = [{"type": "thinking", "thinking": "".join(b[1]), "signature": "".join(b[4])}
                             if b[0] == "thinking" else {"type": "redacted_thinking", "data": "".join(b[4])}
                             for b in blocks if b[0] in ("thinking", "redacted_thinking")] or None
        with contextlib.suppress(ClientError):
            self._result.tool_calls = self._calls()

    def _calls(self) -> tuple[Any, ...]:
        return tuple(tool_call(b[3] or "", "".join(b[1]), b[2]) for i, b in sorted(self._blocks.items())
                     if b[0] == "tool_use")

    def end(self) -> None:
        """Raise when the stream ended before `message_stop` or without a stop reason."""
        self._result.tool_calls = self._calls()
        check_stream_end(self._result, done=self.done, marker="message_stop", reason="a stop reason")


def classify(status: int, headers: Any, body: str) -> tuple[ClientError, float | None]:
    """A non-2xx reply: its `type: message` shown; 529 (overloaded) and 429 waited out, `retry-after` honoured."""
    return retry.status_error(status, headers, error_message(body)), None


PROVIDER = Provider(name="anthropic", chat=True, path=lambda model, stream: "/messages", headers=headers,
                    build=build, parse=parse, stream=AnthropicStream, classify=classify, batch=BATCH)
