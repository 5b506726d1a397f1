"""Agents: multi-turn tool use with tool results declared in YAML (issue #12).

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

The plan (items 1-3 and `builtin: golden` of item 5 are done; see engine/run/conversation.py):

1. YAML schema. `tools.<name>.returns` joins `$defs/tool` in schemas/suite.schema.json (a list of
   `{when, result | error, delay_s, set}`), and a test (or `defaults`) gains
   `agent: {max_turns: 8, max_repeats: 2, state: {...}}` (state: the initial state variables).
   The suite loader calls `compile_tools(data["tools"])` once per suite and
   `compile_golden(test["golden"])` for agent tests, mapping each `Problem.path` (with `key=`)
   through `Report.error` to FILE:LINE:COL. `Test` gains `agent: AgentSettings | None`,
   `initial_state` and the compiled golden turns; the test hash covers `returns` and `agent`.
2. Runner. A job whose test has `agent` runs `run_conversation(OpenAICaller(client, model, test,
   settings, slots=global_slots), test.messages, tools_of(test), test.agent, state=...,
   asked_model=model.model)` instead of one `client.call`; the global slot is held per model call,
   not across tool delays. `--max-cost`: a thin wrapper around the caller adds each reply's cost
   to the spend as it comes (the loop knows no prices), so a long conversation counts while it
   runs; passing the budget only ends dispatch, it never cuts a conversation mid-way. The unit of the
   journal and of `--resume` stays the row, i.e. the whole conversation: a conversation cut by
   kill -9 has no row and runs again from its first turn.
3. Results columns (engine/results/schema.py): `transcript` list<struct> from
   `Transcript.records()`, `ledger` list<struct> from `ledger_records()`, `tool_events` from
   `tool_event_records()`, the `counts()` columns (`turns`, `prose_turns`, `tool_calls_made`,
   `invented_tools`, `bad_tool_args`, `outcome`), `state` as JSON text; the existing
   `prompt_tokens` / `completion_tokens` / `cost` / `retries` / `fallback` take the transcript's
   totals (None when any call's usage is unknown, never a partial sum; `fallback` true when any
   call had one), `latency_s` its `elapsed_s`, `answer` its `final_answer`; `error_kind` the
   failing call's when `outcome == "error"`. The struct types are declared in results/schema.py
   from the record keys (inferring them would type a column of empty `tool_calls` lists as null).
4. Trajectory evaluators, one registry entry each in the compiled-node core, reading the
   Transcript from the scoring context: `tool_sequence` (order exact|subsequence|any over
   `Transcript.calls()`), `tool_call` with `at: first|last|any|N`, `max_calls`, `max_turns`,
   `no_invented_tools` (`invented_tools == 0`), `parallel` (the named calls share one turn in
   `calls()`; the tool events' start/end show the overlap), `final_answer: <answer evaluator>`
   (scores `Transcript.answer()`) and `state: {...}` (the final state, matched
   like `tool_call` args). Each names every expectation that failed, not only the first.
5. Golden (done): `engine validate` replays each agent golden with `replay_golden` and scores the
   transcript with the test's evaluator; `builtin: golden` in models.yaml runs `GoldenCaller`
   (single-turn tests answer with `Answer.from_golden` as today).
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
# the trajectory evaluators will import it from inside engine.evaluators, while tools.py imports
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
