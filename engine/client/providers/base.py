"""What every provider module gives the client: the request in the engine's shape, and the `Provider` it fills.

The engine speaks OpenAI chat messages inside (a test's `messages`, an agent loop's assistant `tool_calls` and
`tool` answers, `image_url` parts with data URLs); a provider turns them into its wire body and its replies,
whole or streamed, into a `CallResult`. Everything else (sending, retries, pacing, size caps, masking, the reply
paid once) is the client's (`engine.client.client`, its tries sent by `engine.client.transport`), the same for
every provider.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.client import retry
from engine.client.providers.batch import Batch
from engine.client.response import CallResult
from engine.client.tool_calls import loads
from engine.errors import ClientError
from engine.model.model_config import ModelConfig
from engine.redact import Redactor

__all__ = ["ECHO", "Embeddings", "Provider", "StreamReader", "WireRequest", "add_turn", "call_arguments",
           "check_stream_end", "data_url_parts", "error_message", "error_object", "method_url", "reply_body",
           "stream_event", "system_text"]

#: The field of an assistant message (the engine's OpenAI-shaped conversation) that carries what its provider's
#: API asks to get back unchanged with that turn (Anthropic's signed thinking blocks, Gemini's thought signatures):
#: opaque to the engine, written by a provider's reader (`CallResult.echo`), read by the same provider's `build`,
#: never sent by the others and never stored in rows.
ECHO = "echo"


@dataclass(frozen=True)
class WireRequest:
    """One request as the engine holds it, for a provider to put on its wire.

    Args:
        model: The model id sent to the server.
        messages: OpenAI chat messages (images as `image_url` parts); empty for a text prompt.
        prompt: The text prompt (completions-style APIs).
        tools: OpenAI tool definitions (`{"type": "function", "function": {name, description, parameters}}`).
        tool_choice: "auto", "none", "required", `{"type": "function", "function": {"name": ...}}`, or None.
        params: The model's `params:` from models.yaml, passed through where the API takes them.
        max_tokens: The reply's token limit.
        temperature: The temperature, or None to send none.
        seed: The seed, or None.
        stream: Ask for server-sent events.
    """

    model: str
    messages: Sequence[Mapping[str, Any]] = ()
    prompt: str = ""
    tools: Sequence[Mapping[str, Any]] = ()
    tool_choice: Any = None
    params: Mapping[str, Any] = field(default_factory=dict)
    max_tokens: int = 1024
    temperature: float | None = None
    seed: int | None = None
    stream: bool = False


class StreamReader(Protocol):
    """Folds one streamed reply into its `CallResult`, event by event."""

    done: bool   # the API's end-of-stream mark arrived: nothing more is read

    def feed(self, datas: list[str]) -> bool:
        """Fold in the data of the events one chunk completed; True when visible content arrived."""

    def keep(self) -> None:
        """Put what was read so far in the result (called on every way out, a cut stream included)."""

    def end(self) -> None:
        """The stream was read to its end: finish the tool calls; raise a stream error when it was incomplete."""


@dataclass(frozen=True)
class Embeddings:
    """An API's embeddings method, for `similar` evaluators.

    Args:
        path: The method's path after `base_url` for a model.
        body: The request for a model and its texts.
        read: The reply's JSON -> (one vector per text as the reply holds them, the `usage` object or None).
    """

    path: Callable[[ModelConfig], str]
    body: Callable[[ModelConfig, Sequence[str]], dict[str, Any]]
    read: Callable[[Any], tuple[list[Any], Any]]


@dataclass(frozen=True)
class Provider:
    """One API the client speaks: how a request is written and how its replies and failures are read.

    Args:
        name: The `api:` value in models.yaml.
        chat: Takes messages and tools (agent tests, judges); False: a text prompt only.
        path: (model, stream) -> the method's path after `base_url` (it may carry its own query, `?alt=sse`).
        headers: The API key (or None) -> the request headers, the key where this API reads it.
        build: The wire body of a request.
        parse: Reads a whole reply's bytes into the result (a `BadResponse` for a shape it does not document).
        stream: (result, redact) -> the reader of one streamed reply.
        classify: (status, headers, body text) -> the error of a non-2xx reply, and the retry delay its body
            asks for (None: the headers' `retry-after`, else the backoff).
        embeddings: The embeddings method, or None when the API has none.
        batch: The batch method (`engine.client.providers.batch`), or None when the API has none.
    """

    name: str
    chat: bool
    path: Callable[[ModelConfig, bool], str]
    headers: Callable[[str | None], dict[str, str]]
    build: Callable[[WireRequest], dict[str, Any]]
    parse: Callable[[bytes, CallResult, Redactor], None]
    stream: Callable[[CallResult, Redactor], StreamReader]
    classify: Callable[[int, Mapping[str, str], str], tuple[ClientError, float | None]]
    embeddings: Embeddings | None = None
    batch: Batch | None = None


def method_url(base_url: str, method: str) -> str:
    """`base_url` with the method's path appended and its query string kept after it.

    `https://x.openai.azure.com/openai/deployments/d?api-version=2024-06-01` + `/chat/completions` is
    `.../d/chat/completions?api-version=2024-06-01`: a query string is the endpoint's, sent with every request.
    A method with its own query (`/models/m:streamGenerateContent?alt=sse`) puts it first.
    """
    base, _, query = base_url.partition("#")[0].partition("?")
    path, _, own = method.partition("?")
    joined = "&".join(q for q in (own, query) if q)
    return base.rstrip("/") + path + ("?" + joined if joined else "")


def add_turn(turns: list[dict[str, Any]], role: str, key: str, items: list[dict[str, Any]]) -> None:
    """Append a turn of `role` holding `items` under `key`, or extend the last turn when it has the same role
    (Anthropic's and Gemini's APIs take the roles in turn: a tool's answer and the next user text are one turn)."""
    if turns and turns[-1]["role"] == role:
        turns[-1][key].extend(items)
    else:
        turns.append({"role": role, key: items})


def system_text(content: Any) -> str:
    """A system message's content as text (its text parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content
                         if isinstance(part, Mapping) and part.get("type") == "text")
    return "" if content is None else str(content)


def data_url_parts(url: str) -> tuple[str, str] | None:
    """(MIME type, base64 data) of a `data:<mime>;base64,<data>` URL; None for any other URL."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    mime, _, encoding = head.partition(";")
    if not sep or encoding != "base64":
        return None
    return mime, data


def reply_body(raw: bytes, redact: Redactor) -> Any:
    """A whole reply's body read as JSON (numbers exactly); a stream error quoting its start, masked, when it is not
    JSON."""
    try:
        return loads(raw, "the response body", exact=True)
    except ValueError:
        shown = raw[:160].decode("utf-8", "replace")
        raise retry.stream_error(f"the response body is not JSON: {redact.excerpt(shown, 80)}") from None


def check_stream_end(result: CallResult, *, done: bool, marker: str, reason: str) -> None:
    """Raise when a stream closed before its end `marker` or without a `reason` (its finish or stop reason); the
    answer is then marked truncated."""
    if not done:
        result.truncated = True
        raise retry.stream_error(f"the stream ended without {marker}: the answer may be cut short")
    if result.finish_reason is None:
        result.truncated = True
        raise retry.stream_error(f"the stream ended without {reason}")


def stream_event(data: str, redact: Redactor) -> Any:
    """One server-sent event's data read as JSON (numbers exactly); a stream error quoting it, masked, when it is
    not JSON."""
    try:
        return loads(data, "a server-sent event", exact=True)
    except ValueError:
        raise retry.stream_error(f"malformed server-sent event: not JSON: {redact.excerpt(data, 80)}") from None


def fold_events(reader: StreamReader, datas: list[str], redact: Redactor, fold: Callable[[Any], bool]) -> bool:
    """A stream reader's `feed`: each event's data read as JSON (`stream_event`) and folded in by `fold` (True when
    it brought visible content), up to the API's end mark (`reader.done`); True when any event did."""
    visible = False
    for data in datas:
        if fold(stream_event(data, redact)):
            visible = True
        if reader.done:
            break
    return visible


def call_arguments(raw: str) -> dict[str, Any]:
    """A tool call's argument text as the object APIs with structured calls want back ({} when it was not one)."""
    try:
        value = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def error_object(body: str) -> dict[str, Any] | None:
    """The `error` object of an error body (Gemini's sometimes comes in a list), or None."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, list) and data:
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else None


def error_message(body: str) -> str:
    """The `error.message` of an error body as one line, led by the error's type or status; the body when not JSON.

    Anthropic: `{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`;
    Gemini: `{"error": {"code": 429, "message": "...", "status": "RESOURCE_EXHAUSTED"}}` (sometimes in a list).
    """
    error = error_object(body)
    if error is None or not isinstance(error.get("message"), str):
        return body
    kind = error.get("type") or error.get("status")
    message = " ".join(error["message"].split())
    return f"{kind}: {message}" if isinstance(kind, str) and kind else message
