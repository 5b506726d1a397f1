"""A golden reference conversation, compiled, and a model that plays it back through the loop.

A test's golden for an agent is the model's side of the conversation, one item per model call::

    golden:
      - tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      - "It is 18°C and cloudy: take a light jacket."       # a string: an answer without tool calls

`GoldenCaller` answers each model call with the next turn, whatever the tools returned, so replaying
a golden through `run_conversation` with the declared tools shows whether the test's own checks pass
on it (the golden self-check) and lets `builtin: golden` run a suite with no model at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.agent._core import plain
from engine.agent.loop import AgentSettings, run_conversation
from engine.agent.tools import Path, Problem, Tool
from engine.agent.transcript import Transcript
from engine.client.openai import CallResult
from engine.errors import ClientError
from engine.model import ToolCall

__all__ = ["GOLDEN_MODEL", "GoldenCaller", "GoldenTurn", "compile_golden", "replay_golden"]

GOLDEN_MODEL = "golden"   # the served model a replay reports


@dataclass(frozen=True, slots=True)
class GoldenTurn:
    """One model turn of a golden conversation.

    Args:
        content: The text of the turn (the answer, on the last turn).
        tool_calls: The calls of the turn; arguments given as a string are sent as that raw text
            (to script malformed arguments).
    """

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


def compile_golden(value: Any, path: Path = ("golden",)) -> tuple[tuple[GoldenTurn, ...], list[Problem]]:
    """Compile a golden conversation.

    Args:
        value: A list of turns; each a string (an answer) or `{content, tool_calls: [{name, arguments}]}`.
        path: Where the golden sits (prefixed to every problem's path).

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
    if turns and turns[-1].tool_calls and not problems:
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


class GoldenCaller:
    """A model that answers each call with the next golden turn.

    Args:
        turns: The compiled golden conversation.
        served_model: The model name its replies report.
    """

    def __init__(self, turns: Sequence[GoldenTurn], served_model: str = GOLDEN_MODEL) -> None:
        self._turns = tuple(turns)
        self._played = 0
        self._served = served_model

    async def __call__(self, messages: list[dict[str, Any]]) -> CallResult:
        """The next turn; an error result once the golden has no turn left."""
        if self._played >= len(self._turns):
            error = ClientError(f"the golden conversation has {len(self._turns)} turn(s); the loop asked for "
                                f"turn {self._played + 1}", kind="golden_exhausted")
            return CallResult(served_model=self._served, latency_s=0.0, error=error)
        turn = self._turns[self._played]
        self._played += 1
        return CallResult(text=turn.content, tool_calls=turn.tool_calls, served_model=self._served,
                          finish_reason="tool_calls" if turn.tool_calls else "stop", latency_s=0.0)


async def replay_golden(turns: Sequence[GoldenTurn], messages: Sequence[Mapping[str, Any]],
                        tools: Mapping[str, Tool], settings: AgentSettings | None = None, *,
                        state: Mapping[str, Any] | None = None) -> Transcript:
    """Play a golden conversation through the loop with the declared tool results.

    Token counts stay None (a replay sends nothing to count); the ledger's served model is `golden`.
    """
    return await run_conversation(GoldenCaller(turns), messages, tools, settings, state=state,
                                  asked_model=GOLDEN_MODEL)
