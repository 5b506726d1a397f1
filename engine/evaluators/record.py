"""Record evaluators: checks over what the run recorded of a test, not over what the model said.

    outcome          how an agent conversation ended: [completed, escalated, capped, stuck, failed]
    no_fallback      the model asked for answered (served model)
    not_truncated    no reply was cut short by the token limit
    usage_reported   the server reported token counts
    latency_s / ttft_s / tokens / cost      budgets: {min: .., max: ..} (ttft_s, tokens: `kind:` too)
    calls / prose_turns / bad_arguments / invented_tools      counts: {equals | min | max} (calls: `tool:`)
    turns / failed_commands      a conversation's model calls, a workspace's failed commands: {equals | min | max}
    tool_status      every tool call's recorded status: {all: ok} or {none: [invented, bad_args]} (`tool:` too)

The run facts (served model, finish reason, usage, times, cost) come from `ScoringContext.record`, which the
runner and `engine rescore` build from the results row (`engine.results.rows.record_of`); where nothing ran
(the golden self-check) there is no record, and those kinds, listed in `RUN_ONLY`, give a neutral verdict
saying so (`engine validate` names them). `outcome` and the counts read the conversation (an agent test's
transcript, duck-typed as in trajectory.py) or, on a single-turn test, the answer's tool calls, so a golden
checks them like any answer evaluator. `turns`, `tool_status` and `failed_commands` read only a conversation
(`CONVERSATION_ONLY`): a single-turn test has no statuses and one model call, so they give an error verdict there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.base.compiled_schema import schema_validator
from engine.errors import EvaluatorConfigError
from engine.evaluators.base import Kind, error, short, verdict
from engine.model.answer import Answer, ToolCall
from engine.model.scoring import Record, Scorer, ScoringContext
from engine.model.test import Test
from engine.model.transcript import ToolEvent
from engine.model.verdict import Verdict

__all__ = [
    "BAD_ARGUMENTS", "CALLS", "CONVERSATION_ONLY", "COST", "FAILED_COMMANDS", "INVENTED_TOOLS", "LATENCY_S",
    "NOT_TRUNCATED", "NO_FALLBACK", "OUTCOME", "OUTCOMES", "PROSE_TURNS", "RUN_ONLY", "TOKENS", "TOOL_STATUS",
    "TOOL_STATUSES", "TTFT_S", "TURNS", "USAGE_REPORTED",
]

#: How an agent conversation can end and still be scored (an `error` conversation is an error row).
OUTCOMES = ("completed", "escalated", "capped", "stuck", "failed")
#: A tool call's status as the row's `tool_events[].status` records it (engine.model.transcript.ToolStatus): ok,
#: error (the declared tool answered with an error), invented (no such tool offered), bad_args, and a workspace's
#: failed (a command that exited non-zero, timed out or wrote too much) and refused (a path outside it).
TOOL_STATUSES = ("ok", "error", "invented", "bad_args", "failed", "refused")
#: Kinds that read only a conversation: on a single-turn test they are an error verdict (as trajectory's are).
CONVERSATION_ONLY: frozenset[str] = frozenset({"outcome", "turns", "tool_status", "failed_commands"})
#: Kinds that read what a run records: the golden self-check cannot judge them.
RUN_ONLY: frozenset[str] = frozenset({"no_fallback", "not_truncated", "usage_reported", "latency_s", "ttft_s",
                                      "tokens", "cost"})


def _unmeasured(kind: str) -> Verdict:
    """The verdict of a run-only kind scored without a run: neutral, and saying why."""
    return verdict(1.0, f"{kind} cannot be checked without a run: it reads what the run records", kind,
                   unchecked="needs a run")


def _flag(kind: str, value: Any) -> None:
    if value is not True:
        raise EvaluatorConfigError(f"{kind} takes `true` (write {{{kind}: true}}), got {short(value)}", kind=kind)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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


# ------------------------------------------------------------------------------------------ run flags

def no_fallback(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The served model is the one asked for. Names compare as `engine.results.rows.is_fallback` does:
    without case; a provider prefix (`openai/gpt-4o`), a dated snapshot of the asked id
    (`gpt-4o-mini-2024-07-18`, `-20240718`, `-0718`, Gemini's `-001`), or a dated model answering a `-latest`
    alias is the same model."""
    kind = "no_fallback"
    _flag(kind, value)

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        record = ctx.record
        if record is None:
            return _unmeasured(kind)
        if record.fallback is None:
            return error("no_fallback: the server did not say which model answered (no `model` in its reply), "
                         "so a fallback cannot be told; drop this check for this server", kind)
        if record.fallback:
            return verdict(0.0, f"answered by {record.served_model!r}, not the model asked for "
                                f"{record.asked_model!r}", kind)
        return verdict(1.0, f"answered by {record.served_model!r} (asked {record.asked_model!r})", kind)

    return score


def not_truncated(value: Any, options: Mapping[str, Any]) -> Scorer:
    """No reply was cut short: finish reason `length`, or a stream that ended early."""
    kind = "not_truncated"
    _flag(kind, value)

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        record = ctx.record
        if record is None:
            return _unmeasured(kind)
        if record.truncated or record.finish_reason == "length":
            return verdict(0.0, f"the reply was cut short (finish reason {record.finish_reason!r}); raise the "
                                "test's max_tokens or ask for a shorter answer", kind)
        return verdict(1.0, f"the reply ended by itself (finish reason {record.finish_reason!r})", kind)

    return score


def usage_reported(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The server reported prompt and completion token counts (for every call of a conversation)."""
    kind = "usage_reported"
    _flag(kind, value)

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        record = ctx.record
        if record is None:
            return _unmeasured(kind)
        missing = [name for name, got in (("prompt", record.prompt_tokens), ("completion", record.completion_tokens))
                   if got is None]
        if missing:
            return verdict(0.0, f"the server reported no {' and no '.join(missing)} token count", kind)
        return verdict(1.0, f"usage reported: {record.prompt_tokens} prompt + {record.completion_tokens} "
                            "completion tokens", kind)

    return score


# ------------------------------------------------------------------------------------------ ranges

@dataclass(frozen=True, slots=True)
class _Range:
    """The bounds a figure must keep: `equals`, or `min` and/or `max` (inclusive)."""

    low: float | None
    high: float | None
    exact: float | None

    def holds(self, got: float) -> bool:
        if self.exact is not None:
            return got == self.exact
        return (self.low is None or got >= self.low) and (self.high is None or got <= self.high)

    def words(self, unit: Callable[[float], str]) -> str:
        if self.exact is not None:
            return f"exactly {unit(self.exact)}"
        if self.low is not None and self.high is not None:
            return f"between {unit(self.low)} and {unit(self.high)}"
        return f"at most {unit(self.high)}" if self.high is not None else f"at least {unit(self.low or 0)}"


def _range(kind: str, value: Any, extra: tuple[str, ...], *, exact: bool, whole: bool) -> _Range:
    """`{min, max}` (and `equals` for counts) from the node's value, checked once."""
    bounds = ("equals", "min", "max") if exact else ("min", "max")
    if not isinstance(value, Mapping):
        raise EvaluatorConfigError(f"{kind} takes a mapping like {{{kind}: {{max: 2}}}}, got {short(value)}",
                                   kind=kind)
    unknown = [k for k in value if k not in (*bounds, *extra)]
    if unknown:
        raise EvaluatorConfigError(f"{kind}: unknown option {unknown[0]!r}; use {', '.join((*bounds, *extra))}",
                                   kind=kind, option=str(unknown[0]))
    got: dict[str, float | None] = {}
    for name in bounds:
        raw = value.get(name)
        if raw is None:
            got[name] = None
            continue
        if not _number(raw) or raw < 0 or (whole and raw != int(raw)):
            what = "a whole number >= 0" if whole else "a number >= 0"
            raise EvaluatorConfigError(f"{kind}: {name} must be {what}, got {short(raw)}", kind=kind, option=name)
        got[name] = float(raw)
    low, high, equal = got.get("min"), got.get("max"), got.get("equals")
    if low is None and high is None and equal is None:
        raise EvaluatorConfigError(f"{kind}: give {' or '.join(bounds)}, e.g. {{{kind}: {{max: 2}}}}", kind=kind)
    if equal is not None and (low is not None or high is not None):
        raise EvaluatorConfigError(f"{kind}: `equals` cannot be combined with min or max; keep one", kind=kind,
                                   option="equals")
    if low is not None and high is not None and low > high:
        raise EvaluatorConfigError(f"{kind}: min {low:g} is above max {high:g}; swap them", kind=kind, option="min")
    return _Range(low, high, equal)


def _seconds(value: float) -> str:
    return f"{value:.3g} s"


def _dollars(value: float) -> str:
    return f"${value:.6g}"


def _budget(kind: str, label: str, rng: _Range, unit: Callable[[float], str],
            read: Callable[[Record], tuple[float | None, str]]) -> Scorer:
    """A scorer holding the recorded figure `read` gives (or, for None, why there is none) within `rng`."""
    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        record = ctx.record
        if record is None:
            return _unmeasured(kind)
        got, missing = read(record)
        if got is None:
            return error(f"{kind}: {missing}", kind)
        if rng.holds(got):
            return verdict(1.0, f"{label} {unit(got)}, {rng.words(unit)} allowed", kind)
        return verdict(0.0, f"{label} {unit(got)}, outside the budget: {rng.words(unit)}", kind)

    return score


_CACHED = "the response cache answered, so nothing was timed; run with --no-cache to time it"


def latency_s(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The call's latency (an agent test: the whole conversation) within `{min, max}` seconds."""
    rng = _range("latency_s", value, (), exact=False, whole=False)

    def read(record: Record) -> tuple[float | None, str]:
        if record.cached:
            return None, _CACHED
        return record.latency_s, "the run recorded no latency for this call"

    return _budget("latency_s", "latency", rng, _seconds, read)


_TTFT_KINDS = ("visible", "provider")


def ttft_s(value: Any, options: Mapping[str, Any]) -> Scorer:
    """Time to first token within `{min, max}` seconds: `kind: visible` (default; the first visible token or
    tool call, streamed replies only) or `provider` (the reply's first byte). An agent test: its first call."""
    rng = _range("ttft_s", value, ("kind",), exact=False, whole=False)
    which = str(value.get("kind", "visible"))
    if which not in _TTFT_KINDS:
        raise EvaluatorConfigError(f"ttft_s: kind must be 'visible' or 'provider', got {short(which)}",
                                   kind="ttft_s", option="kind")

    def read(record: Record) -> tuple[float | None, str]:
        if record.cached:
            return None, _CACHED
        if which == "visible":
            return record.ttft_visible_s, ("no visible first token was timed: the reply was not streamed; set "
                                           "`stream: true` for the model, or use `kind: provider`")
        return record.ttft_provider_s, "the run recorded no first byte for this call"

    return _budget("ttft_s", f"{which} TTFT", rng, _seconds, read)


_TOKEN_KINDS = ("total", "completion", "prompt")


def tokens(value: Any, options: Mapping[str, Any]) -> Scorer:
    """Tokens used within `{min, max}`: `kind: total` (default: prompt + completion), `prompt` or
    `completion`; an agent test counts every call."""
    rng = _range("tokens", value, ("kind",), exact=False, whole=True)
    which = str(value.get("kind", "total"))
    if which not in _TOKEN_KINDS:
        raise EvaluatorConfigError(f"tokens: kind must be 'total', 'completion' or 'prompt', got {short(which)}",
                                   kind="tokens", option="kind")

    def read(record: Record) -> tuple[float | None, str]:
        prompt, completion = record.prompt_tokens, record.completion_tokens
        got = {"prompt": prompt, "completion": completion,
               "total": None if prompt is None or completion is None else prompt + completion}[which]
        return (None if got is None else float(got)), ("the server reported no token counts, so the budget cannot "
                                                       "be told; use {usage_reported: true} to fail such replies")

    return _budget("tokens", f"{which} tokens:", rng, lambda n: f"{n:g}", read)


def cost(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The test's priced cost within `{min, max}` dollars (an agent test: every call)."""
    rng = _range("cost", value, (), exact=False, whole=False)

    def read(record: Record) -> tuple[float | None, str]:
        return record.cost, ("the call has no price: give the model `price: {input: ..., output: ...}` (dollars "
                             "per million tokens) in the models file, and a server that reports usage")

    return _budget("cost", "cost", rng, _dollars, read)


# ------------------------------------------------------------------------------------------ counts

def _made(answer: Answer, ctx: ScoringContext) -> list[str]:
    """The names of every tool call made: the conversation's, else the answer's."""
    transcript = ctx.transcript
    if transcript is None:
        return [call.name for call in answer.tool_calls]
    return [event.name for event in transcript.tool_events]


def _count(kind: str, label: str, rng: _Range, count: Callable[[Answer, ScoringContext], tuple[int, str]], *,
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
    rng = _range("calls", value, ("tool",), exact=True, whole=True)
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
    rng = _range("prose_turns", value, (), exact=True, whole=True)

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
    rng = _range("bad_arguments", value, (), exact=True, whole=True)

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
    rng = _range("invented_tools", value, (), exact=True, whole=True)

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
    rng = _range("turns", value, (), exact=True, whole=True)

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
    rng = _range(kind, value, (), exact=True, whole=True)

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

def _bounds(integer: bool, exact: bool, **extra: Any) -> dict[str, Any]:
    number = {"type": "integer" if integer else "number", "minimum": 0}
    props: dict[str, Any] = {"min": {**number, "description": "At least this (inclusive)."},
                             "max": {**number, "description": "At most this (inclusive)."}}
    if exact:
        props["equals"] = {**number, "description": "Exactly this."}
    return {"type": "object", "additionalProperties": False, "minProperties": 1, "properties": {**props, **extra}}


_TRUE = {"const": True}

OUTCOME = Kind("How an agent conversation ended: any of completed, escalated, capped, stuck, failed.",
               {"oneOf": [{"enum": list(OUTCOMES)},
                          {"type": "array", "minItems": 1, "items": {"enum": list(OUTCOMES)}}]},
               {}, ({"outcome": ["completed"]},), build=outcome, bounded=True)
NO_FALLBACK = Kind("The model asked for answered (its dated snapshot or a provider prefix counts as the same).",
                   _TRUE, {}, ({"no_fallback": True},), build=no_fallback, bounded=True)
NOT_TRUNCATED = Kind("No reply was cut short by the token limit.", _TRUE, {}, ({"not_truncated": True},),
                     build=not_truncated, bounded=True)
USAGE_REPORTED = Kind("The server reported token counts.", _TRUE, {}, ({"usage_reported": True},),
                      build=usage_reported, bounded=True)
LATENCY_S = Kind("The call's latency in seconds (agent: the whole conversation) within min/max.",
                 _bounds(False, False), {}, ({"latency_s": {"max": 2}},), build=latency_s, bounded=True)
TTFT_S = Kind("Time to first token in seconds within min/max; kind: visible (default) or provider.",
              _bounds(False, False, kind={"enum": list(_TTFT_KINDS), "description": "visible: the first visible "
                                          "token or tool call (streamed); provider: the reply's first byte."}),
              {}, ({"ttft_s": {"max": 0.5, "kind": "visible"}},), build=ttft_s, bounded=True)
TOKENS = Kind("Tokens used (agent: every call) within min/max; kind: total (default), prompt or completion.",
              _bounds(True, False, kind={"enum": list(_TOKEN_KINDS), "description": "total (default): prompt + "
                                         "completion; or prompt, or completion."}),
              {}, ({"tokens": {"max": 800}},), build=tokens, bounded=True)
COST = Kind("The priced cost in dollars (agent: every call) within min/max.", _bounds(False, False), {},
            ({"cost": {"max": 0.01}},), build=cost, bounded=True)
CALLS = Kind("How many tool calls were made (tool: one function's only): equals, min or max.",
             _bounds(True, True, tool={"type": "string", "minLength": 1, "description": "Count only this "
                                       "function's calls."}),
             {}, ({"calls": {"tool": "find_slots", "equals": 2}},), build=calls, bounded=True)
PROSE_TURNS = Kind("How many model replies had no tool call: equals, min or max.", _bounds(True, True), {},
                   ({"prose_turns": {"max": 0}},), build=prose_turns, bounded=True)
BAD_ARGUMENTS = Kind("How many tool calls had arguments not fitting the tool: equals, min or max.",
                     _bounds(True, True), {}, ({"bad_arguments": {"max": 0}},), build=bad_arguments)
INVENTED_TOOLS = Kind("How many tool calls named a tool the test did not offer: equals, min or max.",
                      _bounds(True, True), {}, ({"invented_tools": {"max": 0}},), build=invented_tools, bounded=True)
TURNS = Kind("How many model calls the conversation took (agent tests only): equals, min or max.",
             _bounds(True, True), {}, ({"turns": {"equals": 3}},), build=turns, bounded=True)
FAILED_COMMANDS = Kind("How many of a workspace's commands failed (exited non-zero, timed out or wrote too much): "
                       "equals, min or max.", _bounds(True, True), {}, ({"failed_commands": {"max": 0}},),
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
