"""Tool calls in a reply: streamed deltas joined, argument text decoded under a depth limit.

Shape errors are `BadResponse`s naming the place, as everywhere in `engine.client.response`.
"""

from __future__ import annotations

import json
from typing import Any

from engine.base.jsontext import loads as fast_loads
from engine.client import retry
from engine.client.retry import wrong_type
from engine.model.answer import ToolCall

__all__ = ["MAX_ARGUMENT_DEPTH", "ToolCallAccumulator", "arguments_text", "loads", "optional_str", "tool_call"]

MAX_ARGUMENT_DEPTH = 64


def optional_str(container: dict[str, Any], key: str, where: str) -> str | None:
    """`container[key]` when it is a string or absent; a `BadResponse` naming `where.key` otherwise."""
    value = container.get(key)
    if value is None or type(value) is str:
        return value
    raise wrong_type(f"{where}.{key}" if where else key, value, "a string")


def loads(text: str | bytes, what: str, *, exact: bool = True) -> Any:
    """`json.loads`, with nesting past the decoder's limit reported as a bad response.

    Args:
        text: The JSON text.
        what: What it is, for the message.
        exact: False: decoded by orjson where it can (`engine.base.jsontext.loads`: 2-2.5x faster), which
            reads an integer beyond 64 bits as a float; True where numbers are kept (tool-call arguments).

    Raises:
        ValueError: the text is not JSON (the caller says what that means where it is).
        BadResponse: nested too deep to decode.
    """
    try:
        return json.loads(text) if exact else fast_loads(text)
    except RecursionError:
        raise retry.bad_response(f"{what} is nested too deep to read") from None


def arguments_text(arguments: Any, where: str) -> str:
    """Tool-call arguments as text: a string as sent; an object (some servers send one) as JSON."""
    if type(arguments) is str:
        return arguments
    if arguments is None:
        return ""
    if type(arguments) is not dict:
        raise wrong_type(where + ".function.arguments", arguments, "a string")
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
            raise wrong_type("choices[0].delta.tool_calls", deltas, "a list")
        for where, delta in retry.objects(deltas, "choices[0].delta.tool_calls"):
            index = delta.get("index")
            if index is not None and type(index) is not int:
                raise wrong_type(where + ".index", index, "a whole number")
            call_id = delta.get("id") or None
            if call_id is not None and type(call_id) is not str:
                raise wrong_type(where + ".id", call_id, "a string")
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
                raise wrong_type(where + ".function", fn, "an object")
            name = optional_str(fn, "name", where + ".function")
            if name and name != entry[1]:
                entry[1] = entry[1] + name if entry[1] else name
            arguments = fn.get("arguments")
            if arguments:
                entry[2].append(arguments_text(arguments, where))

    def finish(self) -> tuple[ToolCall, ...]:
        """The joined calls, in the order they started."""
        return tuple(tool_call(name, "".join(pieces), call_id) for call_id, name, pieces in self._calls)
