"""Reading OpenAI replies by their documented shape: the one place a server's JSON is trusted or refused.

A reply is read only along the paths the OpenAI protocol documents (chat and completions, streamed and
whole). A value of the wrong type on one of those paths - `choices: "abc"`, `delta: "x"`, `usage: 5`,
`tool_calls: ["junk"]` - raises `BadResponse` naming the place ("`choices` is a string"), so the call
becomes one error row and the run goes on. Fields outside those paths are ignored, whatever they hold.

Limits on every decode:

- nesting: `json.loads` raises RecursionError past ~1,000 levels; that is caught and reported as a
  bad response (`tool_calls.loads`). Tool-call arguments, which evaluators walk, are refused past 64
  levels (`tool_calls.py`, where streamed tool-call deltas are joined).
- numbers: token counts must be whole numbers in [0, `MAX_TOKEN_COUNT`]; anything else is stored as
  null and the row gets a note, so one absurd number can never fail a Parquet write.
- size: the caller (`engine.client.transport`) caps the bytes read per reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.base.jsontext import loads as fast_loads
from engine.client import retry
from engine.client.retry import type_name, wrong_type
from engine.client.tool_calls import ToolCallAccumulator, arguments_text, loads, optional_str, tool_call
from engine.errors import ClientError
from engine.model.answer import ToolCall
from engine.redact import Redactor

MAX_TOKEN_COUNT = 10**12     # more tokens than any model has read or written in one call
_EXCERPT = 80


@dataclass(slots=True)
class CallResult:
    """Everything one call produced, success or not.

    Times are seconds measured from the start of the last try (retries and their waits are counted
    in `retries` and `rate_limit_wait_s`, not in `latency_s`), but a failed call's `latency_s`, which runs
    from its first try: every try and the waits between them. Token counts are None when the server
    sent none - never 0. `notes` says what was refused from a reply that was otherwise read.
    """

    text: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    served_model: str | None = None
    system_fingerprint: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None   # of the prompt tokens: read from the provider's prompt cache
    cache_write_tokens: int | None = None   # of the prompt tokens: written to it (Anthropic's cache creation)
    reasoning_tokens: int | None = None
    # What the API asks to get back unchanged with this turn in a conversation (`providers.base.ECHO`); opaque,
    # only its provider reads it; never stored in rows.
    echo: Any = None
    latency_s: float | None = None
    ttft_provider_s: float | None = None
    ttft_visible_s: float | None = None
    retries: int = 0
    rate_limit_wait_s: float = 0.0
    truncated: bool = False
    error: ClientError | None = None
    notes: list[str] = field(default_factory=list)
    served_by: str | None = None   # the replica that took the last try (userinfo masked); None: one endpoint
    cached: bool = False     # answered from the response cache (engine.client.response_cache): nothing timed or paid
    batch_id: str | None = None   # the provider's batch that answered it (priced at the batch price); None: live
    # The reply began (a 2xx status and its first body bytes): the call was served, so it is never sent again
    # automatically, whatever breaks after (engine.client.retry). Not stored: it describes one try.
    reply_started: bool = False


__all__ = ["CallResult", "ToolCallAccumulator", "apply_event", "apply_usage", "count", "decode_events", "parse_whole",
           "split_think", "tool_call"]


# -- non-streaming replies ------------------------------------------------------------------------------

def parse_whole(raw: bytes, result: CallResult, redact: Redactor) -> None:
    """Read a whole (non-streaming) chat or completions reply into `result`."""
    try:
        # orjson unless the reply carries tool calls, whose object-valued arguments keep their numbers exactly
        data = loads(raw, "the response body", exact=b'"tool_calls"' in raw)
        if type(data) is dict and _inexact_usage(data.get("usage")):
            data = loads(raw, "the response body")
    except ValueError:
        text = raw[:2 * _EXCERPT].decode("utf-8", "replace")
        raise retry.stream_error(f"the response body is not JSON: {redact.excerpt(text, _EXCERPT)}") from None
    if type(data) is not dict:
        raise retry.bad_response(f"the response body is {type_name(data)}, expected an object")
    choices = data.get("choices")
    if type(choices) is not list:
        if choices is None and "error" in data:
            raise retry.stream_error(f"the server answered with an error: {_error_text(data['error'], redact)}")
        raise wrong_type("choices", choices, "a list")
    if not choices:
        raise retry.bad_response("`choices` is empty")
    result.served_model = optional_str(data, "model", "") or None
    result.system_fingerprint = optional_str(data, "system_fingerprint", "") or None
    usage = data.get("usage")
    if usage:
        apply_usage(usage, result)
    choice = choices[0]
    if type(choice) is not dict:
        raise wrong_type("choices[0]", choice, "an object")
    result.finish_reason = optional_str(choice, "finish_reason", "choices[0]")
    if "text" in choice and "message" not in choice:
        result.text = optional_str(choice, "text", "choices[0]") or ""
        return
    message = choice.get("message")
    if message is None:
        message = {}
    elif type(message) is not dict:
        raise wrong_type("choices[0].message", message, "an object")
    result.text = optional_str(message, "content", "choices[0].message") or ""
    result.reasoning = (optional_str(message, "reasoning_content", "choices[0].message")
                        or optional_str(message, "reasoning", "choices[0].message") or None)
    tool_calls = message.get("tool_calls")
    if tool_calls is None:
        return
    if type(tool_calls) is not list:
        raise wrong_type("choices[0].message.tool_calls", tool_calls, "a list")
    calls = []
    for where, call in retry.objects(tool_calls, "choices[0].message.tool_calls"):
        fn = call.get("function")
        if fn is None:
            fn = {}
        elif type(fn) is not dict:
            raise wrong_type(where + ".function", fn, "an object")
        name = optional_str(fn, "name", where + ".function") or ""
        call_id = call.get("id")
        if call_id is not None and type(call_id) is not str:
            raise wrong_type(where + ".id", call_id, "a string")
        # A JSON `null` stays `null` (scored as not an object, as BFCL does); only a call with no
        # `arguments` at all counts as one without arguments.
        arguments = fn.get("arguments", "")
        raw_args = "null" if arguments is None else arguments_text(arguments, where)
        calls.append(tool_call(name, raw_args, call_id))
    result.tool_calls = tuple(calls)


# -- usage ----------------------------------------------------------------------------------------------

def apply_usage(usage: Any, result: CallResult) -> None:
    """Token counts from a `usage` object; a count out of range is stored as null with a note."""
    if type(usage) is not dict:
        raise wrong_type("usage", usage, "an object")
    result.prompt_tokens = count(usage, "prompt_tokens", "usage", result)
    result.completion_tokens = count(usage, "completion_tokens", "usage", result)
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    if type(prompt_details) is dict:
        result.cached_tokens = count(prompt_details, "cached_tokens", "usage.prompt_tokens_details", result)
    if type(completion_details) is dict:
        result.reasoning_tokens = count(completion_details, "reasoning_tokens", "usage.completion_tokens_details",
                                         result)


def _inexact_usage(usage: Any) -> bool:
    """Whether orjson may have read a token count differently from `json.loads`.

    orjson reads an integer beyond 64 bits as a float; such a count is refused either way, but its note
    should show the number as sent, so a reply with one is decoded again by `json.loads`.
    """
    if type(usage) is not dict:
        return False
    for value in usage.values():
        if type(value) is float and abs(value) >= 2.0**63:
            return True
        if type(value) is dict and _inexact_usage(value):
            return True
    return False


def count(container: Mapping[str, Any], key: str, where: str, result: CallResult) -> int | None:
    """`container[key]` as a token count; a value out of range is None, with a note on the result."""
    value = container.get(key)
    if type(value) is int and 0 <= value <= MAX_TOKEN_COUNT:   # the usual case, first
        return value
    if value is None:
        return None
    if type(value) is float and value.is_integer() and 0 <= value <= MAX_TOKEN_COUNT:
        return int(value)
    shown = value if type(value) in (int, float) else type_name(value)
    result.notes.append(f"{where}.{key} {shown!s:.40} is not a token count (a whole number from 0 to "
                        f"{MAX_TOKEN_COUNT:.0e}): stored as null")
    return None


def _error_text(error: Any, redact: Redactor) -> str:
    message = error.get("message") if type(error) is dict else error
    if type(message) is not str:
        try:
            message = json.dumps(message)
        except (RecursionError, TypeError, ValueError):
            message = type_name(message)
    return redact.excerpt(message, retry.SERVER_TEXT_CHARS)


# -- streamed replies -----------------------------------------------------------------------------------

def decode_events(datas: list[str], redact: Redactor) -> list[dict[str, Any]]:
    """Decode the JSON payloads of several events at once.

    One `json.loads` of `[a,b,c]` costs far less than three calls (the per-call overhead dominates for
    small chunks); when the batch does not decode into exactly one object per event, each payload
    is decoded alone so the bad one is named.
    """
    if not datas:
        return []
    if len(datas) > 1:
        batch = "[" + ",".join(datas) + "]"
        # orjson, faster than `json.loads` on many small events, unless tool calls ride in it: their
        # object-valued arguments keep their numbers exactly with `json.loads`
        exact = '"tool_calls"' in batch
        try:
            events = json.loads(batch) if exact else fast_loads(batch)
        except (ValueError, RecursionError):
            events = None
        if type(events) is list and len(events) == len(datas):
            again = False
            for event in events:
                if type(event) is not dict:
                    break
                usage = event.get("usage")
                if usage and not exact and _inexact_usage(usage):
                    again = True
            else:
                return json.loads(batch) if again else events
    out = []
    for data in datas:
        try:
            event = loads(data, "a server-sent event", exact='"tool_calls"' in data)
            if type(event) is dict and _inexact_usage(event.get("usage")):
                event = loads(data, "a server-sent event")
        except ValueError:
            raise retry.stream_error(f"malformed server-sent event: not JSON: {redact.excerpt(data, _EXCERPT)}") \
                from None
        if type(event) is not dict:
            raise retry.bad_response(f"a server-sent event is {type_name(event)}, expected an object")
        out.append(event)
    return out


def apply_event(event: dict[str, Any], result: CallResult, text: list[str], reasoning: list[str],
                calls: ToolCallAccumulator, completions: bool, redact: Redactor) -> bool:
    """Fold one streamed chunk into the result; True when it carried visible content."""
    choices = event.get("choices")
    if choices is None and "error" in event:
        raise retry.stream_error(f"the server sent an error inside the stream: "
                                 f"{_error_text(event.get('error'), redact)}")
    if result.served_model is None:   # the first event names it; later ones are not looked at
        model = event.get("model")
        if model:
            if type(model) is not str:
                raise wrong_type("model", model, "a string")
            result.served_model = model
    fingerprint = event.get("system_fingerprint")
    if fingerprint:
        if type(fingerprint) is not str:
            raise wrong_type("system_fingerprint", fingerprint, "a string")
        result.system_fingerprint = fingerprint
    usage = event.get("usage")
    if usage:
        apply_usage(usage, result)
    if not choices:
        return False
    if type(choices) is not list:
        raise wrong_type("choices", choices, "a list")
    visible = False
    for choice in choices:
        if type(choice) is not dict:
            raise wrong_type("choices[0]", choice, "an object")
        if choice.get("index", 0) != 0:
            continue
        # the text piece: a completions choice holds it as `text`, a chat choice in its `delta` as `content`
        delta, key = (choice, "text") if completions else (choice.get("delta"), "content")
        if delta:
            if type(delta) is not dict:
                raise wrong_type("choices[0].delta", delta, "an object")
            piece = delta.get(key)
            if piece:
                if type(piece) is not str:
                    raise wrong_type("choices[0].text" if completions else "choices[0].delta.content", piece,
                                     "a string")
                text.append(piece)
                visible = not piece.isspace()
            # a chat delta with more than plain text: the rarer fields
            if not completions and (len(delta) > 1 or "content" not in delta):
                thought = delta.get("reasoning_content") or delta.get("reasoning")
                if thought:
                    if type(thought) is not str:
                        raise wrong_type("choices[0].delta.reasoning_content", thought, "a string")
                    reasoning.append(thought)
                tool_deltas = delta.get("tool_calls")
                if tool_deltas:
                    calls.add(tool_deltas)
                    visible = True
        reason = choice.get("finish_reason")
        if reason:
            if type(reason) is not str:
                raise wrong_type("choices[0].finish_reason", reason, "a string")
            result.finish_reason = reason
    return visible


_THINK_END = re.compile(r"</think>", re.IGNORECASE)


def split_think(result: CallResult) -> None:
    """Move a leading `<think>...</think>` block (any case) from the answer to the reasoning.

    The one place reasoning is split off: evaluators score `text` as it is. A block the model never
    closed (cut by max_tokens) is all reasoning.
    """
    first = result.text[:1]
    if first != "<" and not first.isspace():   # the usual answer: no copy of it made to find out
        return
    stripped = result.text.lstrip()
    if stripped[:7].lower() != "<think>":
        return
    end = _THINK_END.search(stripped, 7)
    inner, sep, rest = (stripped[7:], "", "") if end is None else (stripped[7:end.start()], "</think>",
                                                                  stripped[end.end():])
    thought = inner.strip()
    result.reasoning = (result.reasoning + "\n" + thought) if result.reasoning else thought
    result.text = rest.lstrip() if sep else ""
