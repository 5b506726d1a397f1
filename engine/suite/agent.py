"""A test's `agent:` block and its golden conversation, compiled when the suite loads.

    agent: {max_turns: 8, max_repeats: 2, state: {booked: false}}

`max_turns` and `max_repeats` become `AgentSettings` (the loop's limits); `state` is the initial state
variables the tools' `set:` rules change. A test takes its `agent:` from `defaults` key by key, so
`defaults: {agent: {max_turns: 6}}` with a test's `agent: {state: {...}}` gives both.

Both become engine.model.agent types (the loader builds them; the agent loop reads them). Compiling never
raises: problems come back as `Problem`s with a path for FILE:LINE:COL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine.base.diagnostic import Path, Problem
from engine.model.agent import GoldenTurn
from engine.model.answer import ToolCall
from engine.model.tools import plain

__all__ = ["AGENT_KEYS", "compile_golden", "merge_agent"]

AGENT_KEYS = ("max_turns", "max_repeats", "max_prose_turns", "state")


def merge_agent(default: Any, own: Any) -> dict[str, Any] | None:
    """A test's `agent:` block over the suite default's, key by key; None when neither has one.

    A test whose `agent` is `null` or absent while the defaults have one is an agent test with the defaults.
    """
    if not isinstance(default, Mapping) and not isinstance(own, Mapping):
        return None
    merged = dict(default) if isinstance(default, Mapping) else {}
    if isinstance(own, Mapping):
        merged.update(own)
    return merged


def compile_golden(value: Any, path: Path = ("golden",), *,
                   ends_with_calls: bool = False) -> tuple[tuple[GoldenTurn, ...], list[Problem]]:
    """Compile a golden conversation.

    Args:
        value: A list of turns; each a string (an answer) or `{content, tool_calls: [{name, arguments}]}`.
        path: Where the golden sits (prefixed to every problem's path).
        ends_with_calls: The last turn may call tools (a workspace test's golden may end with `finish`).

    Returns:
        The turns (empty when there are problems) and the problems.
    """
    if not isinstance(value, list) or not value:
        return (), [Problem(path, "an agent test's golden is the model's turns: a list whose items are "
                            "`{tool_calls: [{name, arguments}]}` or the final answer text")]
    turns: list[GoldenTurn] = []
    problems: list[Problem] = []
    for n, item in enumerate(value):
        turn = _turn(item, path + (n,), n, problems)
        if turn is not None:
            turns.append(turn)
    for n, turn in enumerate(turns[:-1]):
        if not turn.tool_calls:
            problems.append(Problem(path + (n,), f"turn {n} calls no tool, so the conversation ends there and "
                                    f"the {len(value) - n - 1} turn(s) after it are never played"))
    if turns and turns[-1].tool_calls and not problems and not ends_with_calls:
        problems.append(Problem(path + (len(value) - 1,), "the golden conversation must end with the answer: "
                                "a last turn without tool calls"))
    return (tuple(turns) if not problems else ()), problems


def _turn(item: Any, path: Path, n: int, problems: list[Problem]) -> GoldenTurn | None:
    if isinstance(item, str):
        return GoldenTurn(content=item)
    if not isinstance(item, Mapping):
        problems.append(Problem(path, f"turn {n} must be the answer text or `{{content, tool_calls}}`"))
        return None
    for key in item:
        if key not in ("content", "tool_calls"):
            problems.append(Problem(path + (str(key),), f"unknown key '{key}' in a golden turn; the keys are "
                                    "content and tool_calls", key=True))
    content = item.get("content")
    if content is not None and not isinstance(content, str):
        problems.append(Problem(path + ("content",), "`content` must be text"))
    raw_calls = item.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        problems.append(Problem(path + ("tool_calls",), "`tool_calls` must be a list of {name, arguments}"))
        return None
    calls = []
    for i, call in enumerate(raw_calls):
        here = path + ("tool_calls", i)
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str) or not call["name"]:
            problems.append(Problem(here, "a golden tool call needs a `name` (and `arguments`)"))
            continue
        unknown = [key for key in call if key not in ("name", "arguments")]
        for key in unknown:
            problems.append(Problem(here + (str(key),), f"unknown key '{key}' in a golden tool call; the keys are "
                                    "name and arguments", key=True))
        arguments = plain(call.get("arguments", {}))
        call_id = f"golden_{n + 1}_{i}"   # turns count from 1, as in the ledger
        if isinstance(arguments, str):
            calls.append(ToolCall.from_raw(call["name"], arguments, id=call_id))
        else:
            calls.append(ToolCall(call["name"], arguments, json.dumps(arguments, ensure_ascii=False), True, call_id))
    return GoldenTurn(content=str(content or ""), tool_calls=tuple(calls))
