"""What the model said, as the evaluators see it: its text and the tool calls it made."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.base.jsontext import dumps_ascii, dumps_unicode


@dataclass(frozen=True)
class ToolCall:
    """One function call the model made.

    Args:
        name: The function name as the model wrote it.
        arguments: The decoded arguments (usually a dict); None when `raw_arguments` was not valid JSON,
            or was the JSON `null` (then `valid_json` is True, and evaluators fail it as not an object).
        raw_arguments: The argument text exactly as received.
        valid_json: False when `raw_arguments` did not decode as JSON (the call is flagged, not dropped).
        id: The provider's call id, when it sent one.
    """

    name: str
    arguments: Any = None
    raw_arguments: str = ""
    valid_json: bool = True
    id: str | None = None

    @classmethod
    def from_arguments(cls, name: str, arguments: Any, id: str | None = None) -> ToolCall:
        """Build a call from already-decoded arguments (goldens, replayed data).

        `raw_arguments` is `json.dumps(arguments)`'s text, from the encoder engine.base.jsontext builds once.
        """
        return cls(name=name, arguments=arguments, raw_arguments=dumps_ascii(arguments), valid_json=True, id=id)

    @classmethod
    def from_raw(cls, name: str, raw_arguments: str, id: str | None = None) -> ToolCall:
        """Build a call from argument text as streamed; invalid JSON is flagged, and so is JSON nested deeper than
        the decoder reads (a model's `[[[[...`, read back from a run's rows)."""
        text = raw_arguments.strip() or "{}"
        try:
            return cls(name=name, arguments=json.loads(text), raw_arguments=raw_arguments, valid_json=True, id=id)
        except (ValueError, RecursionError):
            return cls(name=name, arguments=None, raw_arguments=raw_arguments, valid_json=False, id=id)


@dataclass(frozen=True)
class Answer:
    """What the model said, as the evaluators see it.

    Args:
        text: The visible answer text (a leading `<think>` block already moved to `reasoning` by the client).
        tool_calls: The calls the model made, in order.
        finish_reason: "stop", "length", "tool_calls", ... or None when unknown.
        reasoning: Reasoning text, kept for the record and never scored.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    reasoning: str | None = None

    @classmethod
    def from_golden(cls, golden: Any) -> Answer:
        """The answer a model would give if it gave the golden answer.

        Text stays text; a JSON value is scored as its JSON text; a mapping with `tool_calls`
        (and optional `content`) is a tool-call envelope.
        """
        if type(golden) is str:   # the usual golden: text, answered before `Mapping`'s slower ABC check
            return cls(text=golden, finish_reason="stop")
        if isinstance(golden, Mapping) and "tool_calls" in golden:
            calls = tuple(
                ToolCall.from_arguments(str(c.get("name", "")), c.get("arguments", {}))
                for c in golden.get("tool_calls") or ()
            )
            return cls(text=str(golden.get("content") or ""), tool_calls=calls,
                       finish_reason="tool_calls" if calls else "stop")
        if isinstance(golden, str):
            return cls(text=golden, finish_reason="stop")
        # `json.dumps(golden, ensure_ascii=False)`'s text, its encoder built once.
        return cls(text=dumps_unicode(golden), finish_reason="stop")
