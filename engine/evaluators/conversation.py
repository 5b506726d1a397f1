"""Conversation evaluators: how a test's conversation went, read from the transcript (an agent or workspace test)
or, on a single-turn test, from the answer's tool calls.

    outcome          how an agent conversation ended: [completed, escalated, capped, stuck, failed]
    calls / prose_turns / bad_arguments / invented_tools      counts: {equals | min | max} (calls: `tool:`)
    turns / failed_commands      a conversation's model calls, a workspace's failed commands: {equals | min | max}
    tool_status      every tool call's recorded status: {all: ok} or {none: [invented, bad_args]} (`tool:` too)

The transcript is duck-typed as in trajectory.py. `outcome`, `turns`, `tool_status` and `failed_commands` read only
a conversation (`CONVERSATION_ONLY`): a single-turn test has no statuses and one model call, so they give an error
verdict there; the counts read the answer's tool calls instead, so a golden checks them like any answer evaluator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from engine.base.compiled_schema import schema_validator
from engine.errors import EvaluatorConfigError
from engine.evaluators.base import Kind, error, short, verdict
from engine.evaluators.ranges import Range, bounds_schema, parse_range
from engine.model.answer import Answer, ToolCall
from engine.model.scoring import Scorer, ScoringContext
from engine.model.test import Test
from engine.model.transcript import ToolEvent
from engine.model.verdict import Verdict

__all__ = [
    "BAD_ARGUMENTS", "CALLS", "CONVERSATION_ONLY", "FAILED_COMMANDS", "INVENTED_TOOLS", "OUTCOME", "OUTCOMES",
    "PROSE_TURNS", "TOOL_STATUS", "TOOL_STATUSES", "TURNS",
]

#: How an agent conversation can end and still be scored (an `error` conversation is an error row).
OUTCOMES = ("completed", "escalated", "capped", "stuck", "failed")
#: A tool call's status as the row's `tool_events[].status` records it (engine.model.transcript.ToolStatus): ok,
#: error (the declared tool answered with an error), invented (no such tool offered), bad_args, and a workspace's
#: failed (a command that exited non-zero, timed out or wrote too much) and refused (a path outside it).
TOOL_STATUSES = ("ok", "error", "invented", "bad_args", "failed", "refused")
#: Kinds that read only a conversation: on a single-turn test they are an error verdict (as trajectory's are).
CONVERSATION_ONLY: frozenset[str] = frozenset({"outcome", "turns", "tool_status", "failed_commands"})


# ------------------------------------------------------------------------------------------ outcome

def outcome(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The agent conversation ended one of these ways (a list; one name is a list of one)."""
    kind = "outcome"
    wanted = [value] if isinstance(value, str) else value
    if not isinstance(wanted, list) or not wanted or any(w not in OUTCOMES for w in wanted):
        raise EvaluatorConfigError(f"outcome takes a list of {', '.join(OUTCOMES)}, e.g. [completed]; "
                                   f"got {short(value)}", kind=kind)
    allowed = tuple(dict.fromkeys(str(w) for w in wanted))

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        transcript = ctx.transcript
        if transcript is None:
            return error("outcome reads how an agent conversation ended, and this test has none; give the "
                         "test an `agent:` block (or a `workspace:`)", kind)
        ended = str(transcript.outcome)
        expected = " or ".join(allowed)
        if ended in allowed:
            return verdict(1.0, f"the conversation ended {ended}", kind)
        return verdict(0.0, f"the conversation ended {ended}, expected {expected} "
                            f"(after {transcript.turns} model call(s))", kind)

    return score


# ------------------------------------------------------------------------------------------ counts

def _made(answer: Answer, ctx: ScoringContext) -> list[str]:
    """The names of every tool call made: the conversation's, else the answer's."""
    transcript = ctx.transcript
    if transcript is None:
        return [call.name for call in answer.tool_calls]
    return [event.name for event in transcript.tool_events]


def _count(kind: str, label: str, rng: Range, count: Callable[[Answer, ScoringContext], tuple[int, str]], *,
           conversation: bool = False) -> Callable[[Answer, ScoringContext], Verdict]:
    """A scorer holding `count`'s figure within `rng`; with `conversation`, an error verdict on a single-turn test."""
    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        if conversation and ctx.transcript is None:
            return _no_conversation(kind)
        got, which = count(answer, ctx)
        detail = f": {which}" if which and not rng.holds(got) else ""
        return verdict(1.0 if rng.holds(got) else 0.0, f"{got} {label}, {rng.words(lambda n: f'{n:g}')} "
                                                         f"expected{detail}", kind)

    return score


def calls(value: Any, options: Mapping[str, Any]) -> Scorer:
    """How many tool calls were made (`tool:` only those of one function), `{equals | min | max}`."""
    rng = parse_range("calls", value, ("tool",), exact=True, whole=True)
    tool = value.get("tool")
    if tool is not None and (not isinstance(tool, str) or not tool):
        raise EvaluatorConfigError(f"calls: tool is a function name, got {short(tool)}", kind="calls", option="tool")

    def count(answer: Answer, ctx: ScoringContext) -> tuple[int, str]:
        made = _made(answer, ctx)
        picked = [name for name in made if tool is None or name == tool]
        return len(picked), " -> ".join(made) or "no calls"

    return _count("calls", "tool call(s)" if tool is None else f"call(s) of {tool}", rng, count)


def prose_turns(value: Any, options: Mapping[str, Any]) -> Scorer:
    """How many model replies had no tool call (single-turn: 1 when the answer called no tool)."""
    rng = parse_range("prose_turns", value, (), exact=True, whole=True)

    def count(answer: Answer, ctx: ScoringContext) -> tuple[int, str]:
        transcript = ctx.transcript
        if transcript is None:
            return (0 if answer.tool_calls else 1), ""
        return int(transcript.prose_turns), f"of {transcript.turns} model call(s)"

    return _count("prose_turns", "repl(ies) without a tool call", rng, count)


def _bad(call: ToolCall, test: Test) -> bool:
    """The call's arguments are not a JSON object fitting the offered tool's parameters."""
    if not call.valid_json or not isinstance(call.arguments, Mapping):
        return True
    parameters = test.tool_schemas.get(call.name)
    return bool(parameters) and next(iter(schema_validator(parameters).iter_errors(call.arguments)), None) is not None


def bad_arguments(value: Any, options: Mapping[str, Any]) -> Scorer:
    """How many tool calls had arguments that were not JSON, not an object, or against the tool's
    parameters (an agent test: the loop's `bad_args` events)."""
    rng = parse_range("bad_arguments", value, (), exact=True, whole=True)

    def count(answer: Answer, ctx: ScoringContext) -> tuple[int, str]:
        transcript = ctx.transcript
        if transcript is None:
            bad = [call.name for call in answer.tool_calls if call.name in ctx.test.tool_schemas
                   and _bad(call, ctx.test)]
        else:
            bad = [event.name for event in transcript.tool_events if event.status == "bad_args"]
        return len(bad), ", ".join(bad)

    return _count("bad_arguments", "call(s) with bad arguments", rng, count)


def invented_tools(value: Any, options: Mapping[str, Any]) -> Scorer:
    """How many tool calls named a tool the test did not offer."""
    rng = parse_range("invented_tools", value, (), exact=True, whole=True)

    def count(answer: Answer, ctx: ScoringContext) -> tuple[int, str]:
        transcript = ctx.transcript
        if transcript is None:
            invented = [call.name for call in answer.tool_calls if call.name not in ctx.test.tool_schemas]
        else:
            invented = [event.name for event in transcript.tool_events if event.status == "invented"]
        return len(invented), ", ".join(invented)

    return _count("invented_tools", "call(s) to tools not offered", rng, count)


def _no_conversation(kind: str) -> Verdict:
    return error(f"{kind} reads a multi-turn conversation, and this test has none; give the test an `agent:` "
                 "block (or a `workspace:`)", kind)


def turns(value: Any, options: Mapping[str, Any]) -> Scorer:
    """How many model calls the conversation took, `{equals | min | max}`: `{equals: 3}` is "exactly 3 turns"."""
    rng = parse_range("turns", value, (), exact=True, whole=True)

    def count(answer: Answer, ctx: ScoringContext) -> tuple[int, str]:
        transcript = ctx.transcript
        assert transcript is not None   # `_count(conversation=True)` answered a single-turn test already
        return int(transcript.turns), f"the conversation ended {transcript.outcome}"

    return _count("turns", "model call(s)", rng, count, conversation=True)


def _where(event: ToolEvent) -> str:
    """A tool event named for a reason: its tool (as the model wrote it, cut to 60 characters) and turn."""
    name = str(event.name)
    return f"{name[:60]}{'...' if len(name) > 60 else ''} (turn {event.turn})"


def failed_commands(value: Any, options: Mapping[str, Any]) -> Scorer:
    """How many of a workspace's commands failed (tool status `failed`: exited non-zero, timed out or wrote too
    much), `{equals | min | max}`. A test without a workspace has no commands: an error verdict, not a pass."""
    kind = "failed_commands"
    rng = parse_range(kind, value, (), exact=True, whole=True)

    def count(answer: Answer, ctx: ScoringContext) -> tuple[int, str]:
        assert ctx.transcript is not None   # `score` below answered a single-turn test already
        failed = [_where(event) for event in ctx.transcript.tool_events if event.status == "failed"]
        return len(failed), ", ".join(failed)

    counted = _count(kind, "failed command(s)", rng, count)

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        if ctx.transcript is None:
            return _no_conversation(kind)
        if ctx.test.workspace is None:
            return error("failed_commands counts a workspace's failed commands, and this test has no "
                         "`workspace:`; for declared tools use {tool_status: {none: [error]}}", kind)
        return counted(answer, ctx)

    return score


def _statuses(kind: str, name: str, raw: Any) -> tuple[str, ...]:
    """`all:` / `none:` as a tuple of known statuses (one name is a list of one)."""
    listed = [raw] if isinstance(raw, str) else raw
    if not isinstance(listed, list) or not listed or not all(isinstance(x, str) for x in listed):
        raise EvaluatorConfigError(f"{kind}: {name} takes a status or a list of them, e.g. {{{name}: ok}}; got "
                                   f"{short(raw)}", kind=kind, option=name)
    unknown = [x for x in listed if x not in TOOL_STATUSES]
    if unknown:
        raise EvaluatorConfigError(f"{kind}: {unknown[0]!r} is not a tool status; the statuses are "
                                   f"{', '.join(TOOL_STATUSES)} (a call that worked is `ok`)", kind=kind,
                                   option=name)
    return tuple(dict.fromkeys(listed))


def tool_status(value: Any, options: Mapping[str, Any]) -> Scorer:
    """Every tool call's recorded status: `{all: ok}` (each call's status is one of these) or
    `{none: [invented, bad_args]}` (no call's is); `tool:` looks at one function's calls only. No call made
    passes (there is nothing to fault): pair it with `calls: {min: 1}` to require one."""
    kind = "tool_status"
    if not isinstance(value, Mapping):
        raise EvaluatorConfigError(f"{kind} takes a mapping like {{{kind}: {{all: ok}}}}, got {short(value)}",
                                   kind=kind)
    unknown = [k for k in value if k not in ("all", "none", "tool")]
    if unknown:
        raise EvaluatorConfigError(f"{kind}: unknown option {unknown[0]!r}; use all, none or tool", kind=kind,
                                   option=str(unknown[0]))
    if ("all" in value) == ("none" in value):
        raise EvaluatorConfigError(f"{kind}: give one of `all` (every call's status is one of these) or `none` "
                                   "(no call's is), e.g. {tool_status: {all: ok}}", kind=kind)
    every = "all" in value
    wanted = _statuses(kind, "all" if every else "none", value["all" if every else "none"])
    tool = value.get("tool")
    if tool is not None and (not isinstance(tool, str) or not tool):
        raise EvaluatorConfigError(f"{kind}: tool is a function name, got {short(tool)}", kind=kind, option="tool")
    statuses = " or ".join(wanted)
    which = "tool call(s)" if tool is None else f"call(s) of {tool}"

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        if ctx.transcript is None:
            return _no_conversation(kind)
        events = [e for e in ctx.transcript.tool_events if tool is None or e.name == tool]
        wrong = [e for e in events if (e.status in wanted) != every]
        if not events:
            return verdict(1.0, f"no {which} made: nothing to check", kind)
        if not wrong:
            return verdict(1.0, f"all {len(events)} {which} {statuses}" if every
                           else f"none of {len(events)} {which} {statuses}", kind)
        shown = ", ".join(f"{_where(e)} {e.status}" for e in wrong[:10]) + (", ..." if len(wrong) > 10 else "")
        head = f"not {statuses}" if every else statuses
        return verdict(0.0, f"{len(wrong)} of {len(events)} {which} {head}: {shown}", kind)

    return score


# ------------------------------------------------------------------------------------------ registry entries

OUTCOME = Kind("How an agent conversation ended: any of completed, escalated, capped, stuck, failed.",
               {"oneOf": [{"enum": list(OUTCOMES)},
                          {"type": "array", "minItems": 1, "items": {"enum": list(OUTCOMES)}}]},
               {}, ({"outcome": ["completed"]},), build=outcome, bounded=True)
CALLS = Kind("How many tool calls were made (tool: one function's only): equals, min or max.",
             bounds_schema(True, True, tool={"type": "string", "minLength": 1, "description": "Count only this "
                                       "function's calls."}),
             {}, ({"calls": {"tool": "find_slots", "equals": 2}},), build=calls, bounded=True)
PROSE_TURNS = Kind("How many model replies had no tool call: equals, min or max.", bounds_schema(True, True), {},
                   ({"prose_turns": {"max": 0}},), build=prose_turns, bounded=True)
BAD_ARGUMENTS = Kind("How many tool calls had arguments not fitting the tool: equals, min or max.",
                     bounds_schema(True, True), {}, ({"bad_arguments": {"max": 0}},), build=bad_arguments)
INVENTED_TOOLS = Kind("How many tool calls named a tool the test did not offer: equals, min or max.",
                      bounds_schema(True, True), {}, ({"invented_tools": {"max": 0}},), build=invented_tools,
                      bounded=True)
TURNS = Kind("How many model calls the conversation took (agent tests only): equals, min or max.",
             bounds_schema(True, True), {}, ({"turns": {"equals": 3}},), build=turns, bounded=True)
FAILED_COMMANDS = Kind("How many of a workspace's commands failed (exited non-zero, timed out or wrote too much): "
                       "equals, min or max.", bounds_schema(True, True), {}, ({"failed_commands": {"max": 0}},),
                       build=failed_commands, bounded=True)
_STATUS_LIST = {"oneOf": [{"enum": list(TOOL_STATUSES)},
                          {"type": "array", "minItems": 1, "items": {"enum": list(TOOL_STATUSES)}}]}
TOOL_STATUS = Kind("Every tool call's recorded status (agent tests only): all: one or more statuses each call "
                   "has, or none: statuses no call has; tool: one function's calls only.",
                   {"type": "object", "additionalProperties": False, "minProperties": 1, "properties": {
                       "all": {**_STATUS_LIST, "description": "Each call's status is one of these (ok = the call "
                               "worked)."},
                       "none": {**_STATUS_LIST, "description": "No call's status is one of these."},
                       "tool": {"type": "string", "minLength": 1, "description": "Look at this function's calls "
                                "only."}}},
                   {}, ({"tool_status": {"all": "ok"}}, {"tool_status": {"none": ["invented", "bad_args"]}}),
                   build=tool_status, bounded=True)
