"""A declared tool, ready to answer calls: its compiled `returns` rules and the answer to one call.

The suite loader compiles each suite's tools once (engine.suite.tools: `compile_tool(s)`, problems at
FILE:LINE:COL); the agent loop asks `Tool.answer` for each call. Rules are tried in order; the first whose
`when` accepts the arguments answers. A `when` compares as the `strict` profile of `tool_call` does (the same
`strict_equal`, here): an argument not named in `when` is free, `""` among the accepted values means the
argument may be left out, strings compare trimmed and case-insensitively, a bool never equals a number.
Templates see each argument by name, `args` (the whole argument object) and `state` (the state variables
before this call). Answering never raises: a call no rule accepts, or a template that cannot render, is a
tool error the model reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from jsonschema.exceptions import best_match

from engine.base.compiled_schema import schema_validator
from engine.base.render import render_value
from engine.base.words import short

__all__ = ["Rule", "Tool", "ToolAnswer", "error_text", "plain", "result_text", "strict_args", "strict_equal"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Rule:
    """One compiled entry of `returns`.

    Args:
        index: Its position in `returns` (recorded with each tool event).
        when: Argument -> accepted values; None for the default rule (accepts every call).
        result: The value returned (may hold templates), when `error` is None.
        error: The error message (may be a template), or None for a succeeding rule.
        delay_s: Seconds the tool takes to answer.
        set: State variable -> new value (values may be templates).
        templated: Whether `result`, `error` or `set` holds a template (else nothing is rendered).
    """

    index: int
    when: Mapping[str, tuple[Any, ...]] | None
    result: Any = None
    error: str | None = None
    delay_s: float = 0.0
    set: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    templated: bool = False

    def accepts(self, arguments: Mapping[str, Any]) -> bool:
        """Whether this rule answers a call with these (decoded) arguments."""
        if self.when is None:
            return True
        for name, accepted in self.when.items():
            if name not in arguments:
                if "" not in accepted:
                    return False
                continue
            value = arguments[name]
            if not any(strict_equal(value, option) for option in accepted if not _is_omit(option)):
                return False
        return True


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """What one call of a declared tool returns.

    Args:
        status: "ok", or "error" for an `error:` rule, no matching rule, or a template that failed.
        content: The text of the `tool` message the model reads.
        value: The result value (after rendering), or the error message.
        rule: The index of the rule that answered, or None when none did.
        delay_s: How long the tool takes.
        state_changes: State variables this call sets (already rendered).
    """

    status: Literal["ok", "error"]
    content: str
    value: Any
    rule: int | None
    delay_s: float = 0.0
    state_changes: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class Tool:
    """One declared tool, ready to answer calls.

    Args:
        name: The function name the model calls.
        description: What the model reads about it.
        parameters: The JSON Schema of its arguments.
        rules: The compiled `returns`, in order.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    rules: tuple[Rule, ...]

    @property
    def definition(self) -> dict[str, Any]:
        """The OpenAI tool definition offered to the model."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": dict(self.parameters)}}

    def argument_problem(self, arguments: Any) -> str | None:
        """Why these decoded arguments do not fit the tool's parameters, or None when they do."""
        if not isinstance(arguments, Mapping):
            return f"the arguments must be a JSON object, got {json.dumps(arguments)[:80]}"
        error = best_match(schema_validator(self.parameters).iter_errors(dict(arguments)))
        if error is None:
            return None
        where = ".".join(str(p) for p in error.absolute_path)
        return f"{where}: {error.message}" if where else error.message

    def answer(self, arguments: Mapping[str, Any], state: Mapping[str, Any]) -> ToolAnswer:
        """The declared answer to one call with valid arguments.

        Args:
            arguments: The call's decoded arguments (a JSON object).
            state: The state variables before this call (templates read them as `state`).
        """
        for rule in self.rules:
            if rule.accepts(arguments):
                return _answer_with(self.name, rule, arguments, state)
        shown = json.dumps(dict(arguments), ensure_ascii=False)[:200]
        message = f"{self.name} has no answer for the arguments {shown}"
        return ToolAnswer("error", error_text(message), message, None)


def _answer_with(name: str, rule: Rule, arguments: Mapping[str, Any], state: Mapping[str, Any]) -> ToolAnswer:
    result, error, changes = rule.result, rule.error, rule.set
    if rule.templated:
        variables = {**arguments, "args": dict(arguments), "state": dict(state)}
        try:
            result = render_value(result, variables)
            error = None if error is None else str(render_value(error, variables))
            changes = render_value(dict(changes), variables)
        except Exception as exc:  # noqa: BLE001 - any template failure is this tool's error, reported, not raised
            message = f"{name}: the declared result of rule {rule.index} could not be rendered: {exc}"
            return ToolAnswer("error", error_text(message), message, rule.index, rule.delay_s)
    if error is not None:
        return ToolAnswer("error", error_text(error), error, rule.index, rule.delay_s, changes)
    return ToolAnswer("ok", result_text(result), result, rule.index, rule.delay_s, changes)


def result_text(value: Any) -> str:
    """The `tool` message text of a result: a string as it is, any other value as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def error_text(message: str) -> str:
    """The `tool` message text of an error: `{"error": message}`, a shape models recognise."""
    return json.dumps({"error": message}, ensure_ascii=False)


def _is_omit(option: Any) -> bool:
    return isinstance(option, str) and option == ""


def plain(value: Any) -> Any:
    """Turn YAML-loader subclasses (CommentedMap, ScalarFloat...) into plain JSON types."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def strict_equal(value: Any, accepted: Any) -> bool:
    """One value against one accepted value under the strict profile."""
    if isinstance(accepted, bool) or isinstance(value, bool):
        return isinstance(accepted, bool) and isinstance(value, bool) and accepted is value
    if accepted is None or value is None:
        return accepted is None and value is None
    if isinstance(accepted, (int, float)):
        return isinstance(value, (int, float)) and value == accepted
    if isinstance(accepted, str):
        return isinstance(value, str) and value.strip().casefold() == accepted.strip().casefold()
    if isinstance(accepted, list):
        return (isinstance(value, list) and len(value) == len(accepted)
                and all(strict_equal(v, a) for v, a in zip(value, accepted, strict=True)))
    if isinstance(accepted, dict):
        return isinstance(value, dict) and strict_args(value, accepted, allow_extra=False) is None
    return bool(value == accepted)


def strict_args(args: Mapping[str, Any], accepted: Mapping[str, Any], allow_extra: bool) -> str | None:
    """Why these arguments do not match the accepted values under the strict profile, or None when they do."""
    for key, value in args.items():
        if key not in accepted:
            if allow_extra:
                continue
            return f"unexpected argument {key!r}"
        options = accepted[key] if isinstance(accepted[key], list) else [accepted[key]]
        if not options:
            return f"argument {key!r}: no value is accepted (the accepted list is empty)"
        if not any(strict_equal(value, a) for a in options if a != ""):
            shown = [a for a in options if a != ""]
            return f"argument {key!r}: expected one of {short(shown)}, got {short(value)}"
    for key, options in accepted.items():
        options = options if isinstance(options, list) else [options]
        if key not in args and "" not in options:
            return f"missing argument {key!r}"
    return None
