"""Reading OpenAI replies by their documented shape: the one place a server's JSON is trusted or refused.

A reply is read only along the paths the OpenAI protocol documents (chat and completions, streamed and
whole). A value of the wrong type on one of those paths - `choices: "abc"`, `delta: "x"`, `usage: 5`,
`tool_calls: ["junk"]` - raises `BadResponse` naming the place ("`choices` is a string"), so the call
becomes one error row and the run goes on. Fields outside those paths are ignored, whatever they hold.

Limits on every decode:

- nesting: `json.loads` raises RecursionError past ~1,000 levels; that is caught and reported as a
  bad response. Tool-call arguments (which evaluators walk) are refused past `MAX_ARGUMENT_DEPTH`.
- numbers: token counts must be whole numbers in [0, `MAX_TOKEN_COUNT`]; anything else is stored as
  null and the row gets a note, so one absurd number can never fail a Parquet write.
- size: the caller (`openai.py`) caps the bytes read per reply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.client import retry
from engine.errors import ClientError
from engine.model import ToolCall
from engine.redact import Redactor

MAX_ARGUMENT_DEPTH = 64
MAX_TOKEN_COUNT = 10**12     # more tokens than any model has read or written in one call
_EXCERPT = 80


@dataclass(slots=True)
class CallResult:
    """Everything one call produced, success or not.

    Times are seconds measured from the start of the last try (retries and their waits are counted
    in `retries` and `rate_limit_wait_s`, not in `latency_s`). Token counts are None when the server
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
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    latency_s: float | None = None
    ttft_provider_s: float | None = None
    ttft_visible_s: float | None = None
    retries: int = 0
    rate_limit_wait_s: float = 0.0
    truncated: bool = False
    error: ClientError | None = None
    notes: list[str] = field(default_factory=list)


def type_name(value: Any) -> str:
    """A JSON value's type in words: "a string", "a number", "a list", ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _wrong(where: str, value: Any, expected: str) -> ClientError:
    return retry.bad_response(f"`{where}` is {type_name(value)}, expected {expected}")


def loads(text: str | bytes, what: str) -> Any:
    """`json.loads`, with nesting past the decoder's limit reported as a bad response.

    Raises:
        ValueError: the text is not JSON (the caller says what that means where it is).
        BadResponse: nested too deep to decode.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise retry.bad_response(f"{what} is nested too deep to read") from None


def _optional_str(container: Mapping[str, Any], key: str, where: str) -> str | None:
    value = container.get(key)
    if value is None or type(value) is str:
        return value
    raise _wrong(f"{where}.{key}" if where else key, value, "a string")


# -- non-streaming replies ------------------------------------------------------------------------------

def parse_whole(raw: bytes, result: CallResult, redact: Redactor) -> None:
    """Read a whole (non-streaming) chat or completions reply into `result`."""
    try:
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
        raise _wrong("choices", choices, "a list")
    if not choices:
        raise retry.bad_response("`choices` is empty")
    result.served_model = _optional_str(data, "model", "") or None
    result.system_fingerprint = _optional_str(data, "system_fingerprint", "") or None
    usage = data.get("usage")
    if usage:
        apply_usage(usage, result)
    choice = choices[0]
    if type(choice) is not dict:
        raise _wrong("choices[0]", choice, "an object")
    result.finish_reason = _optional_str(choice, "finish_reason", "choices[0]")
    if "text" in choice and "message" not in choice:
        result.text = _optional_str(choice, "text", "choices[0]") or ""
        return
    message = choice.get("message")
    if message is None:
        message = {}
    elif type(message) is not dict:
        raise _wrong("choices[0].message", message, "an object")
    result.text = _optional_str(message, "content", "choices[0].message") or ""
    result.reasoning = (_optional_str(message, "reasoning_content", "choices[0].message")
                        or _optional_str(message, "reasoning", "choices[0].message") or None)
    tool_calls = message.get("tool_calls")
    if tool_calls is None:
        return
    if type(tool_calls) is not list:
        raise _wrong("choices[0].message.tool_calls", tool_calls, "a list")
    calls = []
    for i, call in enumerate(tool_calls):
        where = f"choices[0].message.tool_calls[{i}]"
        if type(call) is not dict:
            raise _wrong(where, call, "an object")
        fn = call.get("function")
        if fn is None:
            fn = {}
        elif type(fn) is not dict:
            raise _wrong(where + ".function", fn, "an object")
        name = _optional_str(fn, "name", where + ".function") or ""
        call_id = call.get("id")
        if call_id is not None and type(call_id) is not str:
            raise _wrong(where + ".id", call_id, "a string")
        calls.append(tool_call(name, arguments_text(fn.get("arguments"), where), call_id))
    result.tool_calls = tuple(calls)


def arguments_text(arguments: Any, where: str) -> str:
    """Tool-call arguments as text: a string as sent; an object (some servers send one) as JSON."""
    if type(arguments) is str:
        return arguments
    if arguments is None:
        return ""
    if type(arguments) is not dict:
        raise _wrong(where + ".function.arguments", arguments, "a string")
    try:
        return json.dumps(arguments)
    except RecursionError:
        raise retry.bad_response(f"`{where}.function.arguments` is nested too deep to read") from None


def tool_call(name: str, raw_arguments: str, call_id: str | None) -> ToolCall:
    """A `ToolCall` from its argument text; text that is not JSON is flagged (`valid_json`), never dropped.

    Raises:
        BadResponse: the arguments are JSON nested deeper than `MAX_ARGUMENT_DEPTH`.
    """
    text = raw_arguments.strip() or "{}"
    try:
        arguments = loads(text, f"the arguments of tool call {name!r}")
    except ValueError:
        return ToolCall(name=name, arguments=None, raw_arguments=raw_arguments, valid_json=False, id=call_id)
    # Depth can only pass the limit when the text has that many brackets (a C-speed count first).
    if text.count("[") + text.count("{") > MAX_ARGUMENT_DEPTH and _deeper_than(arguments, MAX_ARGUMENT_DEPTH):
        raise retry.bad_response(f"the arguments of tool call {name!r} are nested deeper than "
                                 f"{MAX_ARGUMENT_DEPTH} levels")
    return ToolCall(name=name, arguments=arguments, raw_arguments=raw_arguments, valid_json=True, id=call_id)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether a decoded JSON value nests more than `limit` containers deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if type(node) is dict:
            stack.extend((child, depth + 1) for child in node.values() if type(child) in (dict, list))
        elif type(node) is list:
            stack.extend((child, depth + 1) for child in node if type(child) in (dict, list))
    return False


# -- usage ----------------------------------------------------------------------------------------------

def apply_usage(usage: Any, result: CallResult) -> None:
    """Token counts from a `usage` object; a count out of range is stored as null with a note."""
    if type(usage) is not dict:
        raise _wrong("usage", usage, "an object")
    result.prompt_tokens = _count(usage, "prompt_tokens", "usage", result)
    result.completion_tokens = _count(usage, "completion_tokens", "usage", result)
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    if type(prompt_details) is dict:
        result.cached_tokens = _count(prompt_details, "cached_tokens", "usage.prompt_tokens_details", result)
    if type(completion_details) is dict:
        result.reasoning_tokens = _count(completion_details, "reasoning_tokens", "usage.completion_tokens_details",
                                         result)


def _count(container: Mapping[str, Any], key: str, where: str, result: CallResult) -> int | None:
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
    return redact.excerpt(message, 300)


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
        try:
            events = json.loads("[" + ",".join(datas) + "]")
        except (ValueError, RecursionError):
            events = None
        if type(events) is list and len(events) == len(datas) and all(type(e) is dict for e in events):
            return events
    out = []
    for data in datas:
        try:
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
    model = event.get("model")
    if model and result.served_model is None:
        if type(model) is not str:
            raise _wrong("model", model, "a string")
        result.served_model = model
    fingerprint = event.get("system_fingerprint")
    if fingerprint:
        if type(fingerprint) is not str:
            raise _wrong("system_fingerprint", fingerprint, "a string")
        result.system_fingerprint = fingerprint
    usage = event.get("usage")
    if usage:
        apply_usage(usage, result)
    if not choices:
        return False
    if type(choices) is not list:
        raise _wrong("choices", choices, "a list")
    visible = False
    for choice in choices:
        if type(choice) is not dict:
            raise _wrong("choices[0]", choice, "an object")
        if choice.get("index", 0) != 0:
            continue
        if completions:
            piece = choice.get("text")
            if piece:
                if type(piece) is not str:
                    raise _wrong("choices[0].text", piece, "a string")
                text.append(piece)
                visible = not piece.isspace()
        else:
            delta = choice.get("delta")
            if delta:
                if type(delta) is not dict:
                    raise _wrong("choices[0].delta", delta, "an object")
                piece = delta.get("content")
                if piece:
                    if type(piece) is not str:
                        raise _wrong("choices[0].delta.content", piece, "a string")
                    text.append(piece)
                    visible = not piece.isspace()
                if len(delta) > 1 or "content" not in delta:  # more than plain text: rarer fields
                    thought = delta.get("reasoning_content") or delta.get("reasoning")
                    if thought:
                        if type(thought) is not str:
                            raise _wrong("choices[0].delta.reasoning_content", thought, "a string")
                        reasoning.append(thought)
                    tool_deltas = delta.get("tool_calls")
                    if tool_deltas:
                        calls.add(tool_deltas)
                        visible = True
        reason = choice.get("finish_reason")
        if reason:
            if type(reason) is not str:
                raise _wrong("choices[0].finish_reason", reason, "a string")
            result.finish_reason = reason
    return visible


class ToolCallAccumulator:
    """Joins streamed tool-call deltas: by `index`, falling back to `id` when indices collide or lack."""

    __slots__ = ("_by_id", "_by_index", "_calls")

    def __init__(self) -> None:
        self._calls: list[list[Any]] = []   # [id, name, [argument pieces]]
        self._by_index: dict[int, list[Any]] = {}
        self._by_id: dict[str, list[Any]] = {}

    def add(self, deltas: Any) -> None:
        """Fold one event's `delta.tool_calls` list in."""
        if type(deltas) is not list:
            raise _wrong("choices[0].delta.tool_calls", deltas, "a list")
        for i, delta in enumerate(deltas):
            where = f"choices[0].delta.tool_calls[{i}]"
            if type(delta) is not dict:
                raise _wrong(where, delta, "an object")
            index = delta.get("index")
            if index is not None and type(index) is not int:
                raise _wrong(where + ".index", index, "a whole number")
            call_id = delta.get("id") or None
            if call_id is not None and type(call_id) is not str:
                raise _wrong(where + ".id", call_id, "a string")
            entry = None
            if call_id is not None and call_id in self._by_id:
                entry = self._by_id[call_id]
            elif index is not None and index in self._by_index:
                known = self._by_index[index]
                if call_id is None or known[0] in (None, call_id):
                    entry = known   # same index, and no different id: a continuation
            elif index is None and call_id is None and self._calls:
                entry = self._calls[-1]
            if entry is None:
                entry = [call_id, "", []]
                self._calls.append(entry)
                if index is not None:
                    self._by_index[index] = entry
            if call_id is not None:
                entry[0] = entry[0] or call_id
                self._by_id[call_id] = entry
            fn = delta.get("function")
            if fn is None:
                continue
            if type(fn) is not dict:
                raise _wrong(where + ".function", fn, "an object")
            name = _optional_str(fn, "name", where + ".function")
            if name and name != entry[1]:
                entry[1] = entry[1] + name if entry[1] else name
            arguments = fn.get("arguments")
            if arguments:
                entry[2].append(arguments_text(arguments, where))

    def finish(self) -> tuple[ToolCall, ...]:
        """The joined calls, in the order they started."""
        return tuple(tool_call(name, "".join(pieces), call_id) for call_id, name, pieces in self._calls)


def split_think(result: CallResult) -> None:
    """Move a leading `<think>...</think>` block from the answer to the reasoning."""
    first = result.text[:1]
    if first != "<" and not first.isspace():   # the usual answer: no copy of it made to find out
        return
    stripped = result.text.lstrip()
    if not stripped.startswith("<think>"):
        return
    inner, sep, rest = stripped[len("<think>"):].partition("</think>")
    thought = inner.strip()
    result.reasoning = (result.reasoning + "\n" + thought) if result.reasoning else thought
    result.text = rest.lstrip() if sep else ""
