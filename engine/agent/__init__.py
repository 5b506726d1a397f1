"""Agents: multi-turn tool use with tool results declared in YAML.

What is here (the suite loader compiles tools and the agent block, engine/run/conversation.py runs
each agent job through `run_conversation`, engine/results/rows.py stores the transcript)::

    tools.py          (re-exports engine.suite.tools) a tool's `returns` rules compiled once ->
                      Tool.answer(arguments, state) -> ToolAnswer
    transcript.py     Transcript: messages, model-call ledger, tool events, counts, outcome, state, records()
    loop.py           run_conversation(call_model, messages, tools, AgentSettings) -> Transcript
    openai_caller.py  OpenAICaller: the loop's model on a real endpoint via engine.client.openai
    golden.py         GoldenCaller / replay_golden: a reference conversation played back
    stored.py         transcript_of_row: a stored results row back into a Transcript (`engine rescore`)
                      (its compile_golden / GoldenTurn, and AgentSettings, live in engine.suite.agent)

Layering: agent imports client, results.rows (is_fallback), model, errors and suite; run imports
agent. The load-time halves (tool rules, the `agent:` block, golden turns) live in engine.suite,
below, because the suite loader compiles them once per suite and reports problems at FILE:LINE:COL;
nothing here imports run or cli.
Public names load lazily (below), so evaluators may import `engine.agent.transcript` without a cycle.
The YAML form, the columns a conversation fills and the trajectory evaluators are in docs/agents.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.agent.golden import GoldenCaller, GoldenTurn, compile_golden, replay_golden
    from engine.agent.loop import AgentSettings, ModelCaller, ModelReply, run_conversation
    from engine.agent.openai_caller import OpenAICaller
    from engine.agent.tools import Problem, Rule, Tool, ToolAnswer, compile_tool, compile_tools
    from engine.agent.transcript import LedgerEntry, Message, Outcome, ToolEvent, ToolStatus, Transcript

# Names are loaded on first use (PEP 562), so `import engine.agent.transcript` costs only that module:
# the trajectory evaluators import it from inside engine.evaluators, while tools.py imports
# engine.evaluators.tool_match; eager imports here would close that cycle.
_HOMES = {
    "GoldenCaller": "golden", "GoldenTurn": "golden", "compile_golden": "golden", "replay_golden": "golden",
    "AgentSettings": "loop", "ModelCaller": "loop", "ModelReply": "loop", "run_conversation": "loop",
    "OpenAICaller": "openai_caller",
    "Problem": "tools", "Rule": "tools", "Tool": "tools", "ToolAnswer": "tools", "compile_tool": "tools",
    "compile_tools": "tools",
    "LedgerEntry": "transcript", "Message": "transcript", "Outcome": "transcript", "ToolEvent": "transcript",
    "ToolStatus": "transcript", "Transcript": "transcript",
}

__all__ = [
    "AgentSettings",
    "GoldenCaller",
    "GoldenTurn",
    "LedgerEntry",
    "Message",
    "ModelCaller",
    "ModelReply",
    "OpenAICaller",
    "Outcome",
    "Problem",
    "Rule",
    "Tool",
    "ToolAnswer",
    "ToolEvent",
    "ToolStatus",
    "Transcript",
    "compile_golden",
    "compile_tool",
    "compile_tools",
    "replay_golden",
    "run_conversation",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'engine.agent' has no attribute {name!r}")
    return getattr(importlib.import_module(f"engine.agent.{home}"), name)
