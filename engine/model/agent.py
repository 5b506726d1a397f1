"""An agent test's loop limits and its golden conversation's turns, as the suite loader compiles them.

engine.suite.agent compiles a test's `agent:` block (`merge_agent`) and its golden conversation
(`compile_golden`); the agent loop (engine.agent) runs within these limits and replays these turns.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.model.answer import ToolCall

__all__ = ["AgentSettings", "GoldenTurn"]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """How long a conversation may go on (a test's `agent:` block).

    Args:
        max_turns: Model calls at most; a model still calling tools after that is `capped`.
        max_repeats: How often the same call (name and arguments) may be repeated after its first
            time; one more repeat ends the conversation as `stuck`.
        max_prose_turns: When a workspace's `finish` tool is offered: replies without a tool call in a
            row that end the conversation as `stuck` (each earlier one is answered with a reminder).
    """

    max_turns: int = 8
    max_repeats: int = 2
    max_prose_turns: int = 3

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")
        if self.max_repeats < 0:
            raise ValueError(f"max_repeats must be 0 or more, got {self.max_repeats}")
        if self.max_prose_turns < 1:
            raise ValueError(f"max_prose_turns must be at least 1, got {self.max_prose_turns}")


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
