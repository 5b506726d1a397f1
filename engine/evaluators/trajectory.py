"""Trajectory evaluators: what an agent did over a whole conversation, not only what it said last.

    tool_sequence    the calls' names, `order: exact | subsequence | any` (single-turn: the answer's calls)
    tool_call + at   one call of the conversation: `at: first | last | any | N` (N counts from 1)
    max_calls        at most N tool calls in all
    max_turns        at most N model calls (transcript only)
    no_invented_tools  no call to a tool the test did not offer
    parallel         these calls were issued in one turn (one model reply)
    final_answer     any answer evaluator, scoring the conversation's final answer (transcript only)
    state            the final state variables, matched like `tool_call` args (transcript only)

The transcript is `ctx.transcript` (engine.model.transcript). A single-turn test has none: `tool_sequence`,
`tool_call`, `max_calls`, `parallel` and `no_invented_tools` then read the answer's calls (one turn); the kinds
in `TRANSCRIPT_ONLY` give an error verdict saying the test needs an `agent:` block (`conversation_kinds_in` lets
the loader say it at load). Every failing verdict names each expectation that failed, not only the first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from engine.errors import EvaluatorConfigError
from engine.evaluators import tool_call as single
from engine.evaluators.base import COMMON_KEYS, Kind, error, option_choice, verdict
from engine.evaluators.conversation import CONVERSATION_ONLY
from engine.evaluators.tool_match import show
from engine.model.answer import Answer, ToolCall
from engine.model.scoring import Scorer, ScoringContext
from engine.model.tools import plain, strict_equal
from engine.model.tree import Node
from engine.model.verdict import Verdict

__all__ = [
    "FINAL_ANSWER", "MAX_CALLS", "MAX_TURNS", "NO_INVENTED_TOOLS", "PARALLEL", "STATE", "TOOL_CALL",
    "TOOL_SEQUENCE", "TRANSCRIPT_ONLY", "conversation_kinds_in", "final_answer_verdict",
]

#: Kinds that mean nothing without a conversation: on a single-turn test they are an error verdict (the record
#: kinds that read only a conversation included).
TRANSCRIPT_ONLY: frozenset[str] = frozenset({"max_turns", "final_answer", "state", *CONVERSATION_ONLY})


def _calls(answer: Answer, ctx: ScoringContext) -> list[tuple[int, ToolCall]]:
    """(turn, call) for every call: the transcript's across turns, else the answer's (all in turn 1)."""
    transcript = ctx.transcript
    if transcript is None:
        return [(1, call) for call in answer.tool_calls]
    return list(transcript.calls())


def _needs_transcript(kind: str) -> Verdict:
    return error(f"{kind} reads a multi-turn conversation, and this test has none; give the test an "
                 "`agent:` block (and its tools `returns:`), or use an answer evaluator", kind)


def _count(value: Any, kind: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EvaluatorConfigError(f"{kind} takes a whole number >= 0, got {show(value)}", kind=kind)
    return int(value)


def _names(names: list[str]) -> str:
    return " -> ".join(names) or "no calls"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# ------------------------------------------------------------------------------------------ tool_sequence

_ORDERS = ("exact", "subsequence", "any")


def tool_sequence(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The calls' names follow the list: `order: exact` (default; nothing else, in this order),
    `subsequence` (in this order, other calls between allowed), `any` (each listed call made, any order).

    `exact: true|false` is the older spelling of `order: exact|subsequence`. Partial credit: exact, the
    matching prefix over the longer list; subsequence and any, the share of listed calls found.
    """
    kind = "tool_sequence"
    if not isinstance(value, list) or not value:
        raise EvaluatorConfigError("tool_sequence takes a non-empty list of function names", kind=kind)
    want = [str(v) for v in value]
    unknown = [k for k in options if k not in ("order", "exact")]
    if unknown:
        raise EvaluatorConfigError(f"tool_sequence: unknown option {unknown[0]!r}; use order", kind=kind,
                                   option=str(unknown[0]))
    if "exact" in options:
        legacy = "exact" if bool(options["exact"]) else "subsequence"
        if "order" in options and options["order"] != legacy:
            raise EvaluatorConfigError(f"tool_sequence: exact: {bool(options['exact'])} means order: {legacy}, "
                                       f"but order is {show(options['order'])}; keep only `order`", kind=kind,
                                       option="order")
        order = legacy
    else:
        order = option_choice(options, "order", _ORDERS, kind)

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        got = [call.name for _, call in _calls(answer, ctx)]
        if order == "exact":
            return _exact(want, got, kind)
        if order == "subsequence":
            return _subsequence(want, got, kind)
        return _any_order(want, got, kind)

    return score


def _exact(want: list[str], got: list[str], kind: str) -> Verdict:
    if want == got:
        return verdict(1.0, f"called {_names(got)}", kind)
    prefix = 0
    while prefix < min(len(want), len(got)) and want[prefix] == got[prefix]:
        prefix += 1
    wrong = [f"call {i + 1} is {got[i]!r}, expected {want[i]!r}" for i in range(prefix, min(len(want), len(got)))
             if got[i] != want[i]]
    if len(got) < len(want):
        wrong.append(f"missing {_names(want[len(got):])}")
    elif len(got) > len(want):
        wrong.append(f"extra {_names(got[len(want):])}")
    return verdict(prefix / max(len(want), len(got)),
                   f"expected {_names(want)}, got {_names(got)}: {'; '.join(wrong)}", kind)


def _subsequence(want: list[str], got: list[str], kind: str) -> Verdict:
    found = 0
    for name in got:
        if found < len(want) and name == want[found]:
            found += 1
    if found == len(want):
        return verdict(1.0, f"called {_names(want)} in order", kind)
    missing = ", ".join(f"{name!r} (step {i + 1})" for i, name in enumerate(want) if i >= found)
    return verdict(found / len(want), f"expected {_names(want)} in order; not found after {found} step(s): "
                                      f"{missing} in {_names(got)}", kind)


def _any_order(want: list[str], got: list[str], kind: str) -> Verdict:
    short_by = Counter(want) - Counter(got)
    if not short_by:
        return verdict(1.0, f"called {', '.join(want)} (any order)", kind)
    missing = [f"{name!r}" + (f" x{n}" if n > 1 else "") for name, n in short_by.items()]
    found = len(want) - sum(short_by.values())
    return verdict(found / len(want), f"expected calls to {', '.join(want)} in any order; missing "
                                      f"{_and(missing)} in {_names(got)}", kind)


# ------------------------------------------------------------------------------------------ tool_call at

def tool_call(value: Any, options: Mapping[str, Any]) -> Scorer:
    """`tool_call` as before (the answer's calls; over a transcript, every call of the conversation),
    or aimed at one call with `at: first | last | any | N`. Over a transcript, the one-call form
    (`name`, no `count`) without `at` reads as `at: any`: the call was made at some point."""
    if not isinstance(value, Mapping):
        return single.tool_call(value, options)
    spec = {**options, **value}
    at = spec.pop("at", None)
    implicit_any = at is None and "calls" not in spec and "count" not in spec
    if at is None:
        whole = single.tool_call(spec, {})
        # The same pure checks: one build serves both (it was built twice, half of compiling a tool_call).
        aimed = _aimed("any", whole) if implicit_any else None
        return _whole_or_aimed(whole, aimed)
    if "calls" in spec or "count" in spec:
        raise EvaluatorConfigError("tool_call: `at` aims at one call; use `name` and `args` with it, not "
                                   "`calls` or `count`", kind="tool_call", option="at")
    if not (at in ("first", "last", "any") or (isinstance(at, int) and not isinstance(at, bool) and at >= 1)):
        raise EvaluatorConfigError(f"tool_call: at is first, last, any or a call number from 1, got {show(at)}",
                                   kind="tool_call", option="at")
    return _aimed(at, single.tool_call(spec, {}))


def _whole_or_aimed(whole: Scorer, aimed: Scorer | None) -> Scorer:
    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        if aimed is not None and ctx.transcript is not None:
            return _run(aimed, answer, ctx)
        if ctx.transcript is not None:
            return _run(whole, _as_answer([c for _, c in _calls(answer, ctx)]), ctx)
        return _run(whole, answer, ctx)

    return score


def _as_answer(calls: list[ToolCall]) -> Answer:
    return Answer(tool_calls=tuple(calls))


def _run(one: Scorer, answer: Answer, ctx: ScoringContext) -> Verdict:
    """Call a single-turn `tool_call` scorer (always sync: it awaits nothing)."""
    result = one(answer, ctx)
    if not isinstance(result, Verdict):
        raise TypeError("tool_call's scorer is expected to be synchronous")
    return result


def _aimed(at: str | int, one: Scorer) -> Scorer:
    kind = "tool_call"

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        calls = _calls(answer, ctx)
        if not calls:
            return _run(one, _as_answer([]), ctx)   # "expected a call to X, the answer made no tool call"
        if at == "any":
            verdicts = [(n, _run(one, _as_answer([call]), ctx)) for n, (_, call) in enumerate(calls, 1)]
            passing = [(n, v) for n, v in verdicts if v.passed]
            if passing:
                n, good = passing[0]
                return verdict(1.0, f"call {n} of {len(calls)}: {good.reason}", kind)
            reasons = "; ".join(f"call {n}: {v.reason}" for n, v in verdicts)
            return verdict(0.0, f"no call of {len(calls)} matched: {reasons}", kind)
        index = 0 if at == "first" else len(calls) - 1 if at == "last" else int(at) - 1
        if index >= len(calls):
            return verdict(0.0, f"expected a call number {at}, only {len(calls)} call(s) were made: "
                                f"{_names([c.name for _, c in calls])}", kind)
        turn, call = calls[index]
        got = _run(one, _as_answer([call]), ctx)
        where = f"call {index + 1} ({at}, turn {turn})" if isinstance(at, str) else f"call {at} (turn {turn})"
        return verdict(got.score, f"{where}: {got.reason}", kind)

    return score


# ------------------------------------------------------------------------------------------ counts

def max_calls(value: Any, options: Mapping[str, Any]) -> Scorer:
    """At most N tool calls in all (single-turn: in the answer)."""
    limit = _count(value, "max_calls")

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        made = [call.name for _, call in _calls(answer, ctx)]
        if len(made) <= limit:
            return verdict(1.0, f"{len(made)} tool call(s), at most {limit} allowed", "max_calls")
        return verdict(0.0, f"{len(made)} tool call(s), at most {limit} allowed: {_names(made)}", "max_calls")

    return score


def max_turns(value: Any, options: Mapping[str, Any]) -> Scorer:
    """At most N model calls in the conversation."""
    limit = _count(value, "max_turns")

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        transcript = ctx.transcript
        if transcript is None:
            return _needs_transcript("max_turns")
        turns = int(transcript.turns)
        if turns <= limit:
            return verdict(1.0, f"{turns} turn(s), at most {limit} allowed", "max_turns")
        return verdict(0.0, f"{turns} turns, at most {limit} allowed (outcome {transcript.outcome})", "max_turns")

    return score


def no_invented_tools(value: Any, options: Mapping[str, Any]) -> Scorer:
    """No call to a tool the test did not offer (single-turn: the answer's calls against the test's tools)."""
    if value is not True:
        raise EvaluatorConfigError(f"no_invented_tools takes `true`, got {show(value)}", kind="no_invented_tools")

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        transcript = ctx.transcript
        if transcript is not None:
            invented = [event.name for event in transcript.tool_events if event.status == "invented"]
        else:
            offered = set(ctx.test.tool_schemas)
            invented = [call.name for call in answer.tool_calls if call.name not in offered]
        if not invented:
            return verdict(1.0, "every call was to an offered tool", "no_invented_tools")
        return verdict(0.0, f"{len(invented)} call(s) to tools that do not exist: {', '.join(map(repr, invented))}",
                       "no_invented_tools")

    return score


def parallel(value: Any, options: Mapping[str, Any]) -> Scorer:
    """These calls were issued together, in one model reply (a name listed twice needs two calls)."""
    kind = "parallel"
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(v, str) and v for v in value):
        raise EvaluatorConfigError("parallel takes a list of at least two function names, e.g. "
                                   "[get_weather, get_time]", kind=kind)
    want = Counter(str(v) for v in value)

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        by_turn: dict[int, Counter[str]] = {}
        for turn, call in _calls(answer, ctx):
            by_turn.setdefault(turn, Counter())[call.name] += 1
        for turn, names in by_turn.items():
            if not want - names:
                return verdict(1.0, f"{_and(sorted(want))} issued together in turn {turn}", kind)
        best_turn, best = max(by_turn.items(), key=lambda item: sum((want & item[1]).values()),
                              default=(0, Counter()))
        missing = [f"{name!r}" for name in want - best]
        where = {name: sorted(t for t, names in by_turn.items() if name in names) for name in want}
        seen = "; ".join(f"{name} in turn(s) {', '.join(map(str, turns))}" if turns else f"{name} never called"
                         for name, turns in where.items())
        head = f"turn {best_turn} lacks {_and(missing)}" if best_turn else "no call was made"
        return verdict(sum((want & best).values()) / sum(want.values()),
                       f"expected {_and(sorted(want))} in one turn; {head} ({seen})", kind)

    return score


# ------------------------------------------------------------------------------------------ final_answer, state

def final_answer(value: Any, options: Mapping[str, Any]) -> Scorer:
    """Score the conversation's final answer with any answer evaluator, its verdict kept as the child.

    The child arrives compiled (the entry's `child=True`: compile_spec compiled it with the test's variables).
    """
    child: Node = value
    problem = next((n.problem for _, n in child.walk() if n.problem is not None), None)
    if problem is not None:
        raise EvaluatorConfigError(f"final_answer: {problem}", kind="final_answer")
    if child.is_async or child.blocking:
        async def score_async(answer: Answer, ctx: ScoringContext) -> Verdict:
            transcript = ctx.transcript
            if transcript is None:
                return _needs_transcript("final_answer")
            return final_answer_verdict(await ctx.descend_async(child, transcript.answer()))

        return score_async

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        transcript = ctx.transcript
        if transcript is None:
            return _needs_transcript("final_answer")
        return final_answer_verdict(ctx.descend(child, transcript.answer()))

    return score


def final_answer_verdict(child: Verdict) -> Verdict:
    """final_answer's verdict from its child's: the child's score and pass (an error child, an error), the child
    kept as its one child (engine.analysis.labels replays a labelled attempt by the same rule)."""
    reason = f"final answer: {child.reason}"
    if child.error:
        return Verdict(score=0.0, passed=False, reason=reason, kind="final_answer", error=True, children=(child,))
    return Verdict(score=child.score, passed=child.passed, reason=reason, kind="final_answer", children=(child,))


def state(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The final state variables: each maps to its accepted values (a single value is a list of one);
    `""` among them means the variable may be unset. Variables not named are free."""
    kind = "state"
    if not isinstance(value, Mapping) or not value:
        raise EvaluatorConfigError("state takes a mapping of variable -> accepted values, e.g. "
                                   "{booked: [true]}", kind=kind)
    accepted = {str(k): (v if isinstance(v, list) else [v]) for k, v in plain(value).items()}

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        transcript = ctx.transcript
        if transcript is None:
            return _needs_transcript(kind)
        final = plain(dict(transcript.state))
        failed = list(_state_problems(final, accepted))
        if not failed:
            shown = ", ".join(f"{k}={show(final[k])}" if k in final else f"{k} unset" for k in accepted)
            return verdict(1.0, f"final state {shown}", kind)
        return verdict((len(accepted) - len(failed)) / len(accepted), "final state: " + "; ".join(failed), kind)

    return score


def _state_problems(final: Mapping[str, Any], accepted: Mapping[str, list[Any]]) -> Iterator[str]:
    for name, options in accepted.items():
        values = [a for a in options if a != ""]
        if name not in final:
            if "" not in options:
                yield f"{name} is unset, expected one of {show(values)}"
        elif not any(strict_equal(final[name], a) for a in values):
            yield f"{name} is {show(final[name])}, expected one of {show(values)}"


# ------------------------------------------------------------------------------------------ load time

def conversation_kinds_in(spec: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(path, kind) of every node of an evaluator spec as written (`use` inlined) that needs a conversation, its
    path pointing at the kind's value: for the loader to report at FILE:LINE:COL on a single-turn test."""
    if not isinstance(spec, Mapping):
        return
    kind = next((k for k in spec if k not in COMMON_KEYS), None)
    if kind in TRANSCRIPT_ONLY:
        yield path + (kind,), str(kind)
    elif kind in ("all", "any") and isinstance(spec[kind], list):
        for i, child in enumerate(spec[kind]):
            yield from conversation_kinds_in(child, path + (kind, i))
    elif kind == "not":
        yield from conversation_kinds_in(spec[kind], path + (kind,))


# ------------------------------------------------------------------------------------------ registry entries

_AT = {"description": "Aim at one call of the conversation: first, last, any, or its number (from 1). "
                      "Without `at`, a single-turn test checks the answer's calls; an agent test, any call.",
       "oneOf": [{"enum": ["first", "last", "any"]}, {"type": "integer", "minimum": 1}], "examples": ["last", 2]}

TOOL_CALL = Kind(single.TOOL_CALL.description, {
    **single.TOOL_CALL.value, "properties": {**single.TOOL_CALL.value["properties"], "at": _AT}},
    {}, (*single.TOOL_CALL.examples, {"tool_call": {"name": "book_table", "at": "last"}}), build=tool_call,
    check=single.TOOL_CALL.check)
TOOL_SEQUENCE = Kind("The model called these functions: in this order, in order with others between, or in any "
                     "order (agent tests: over every turn).",
                     {"type": "array", "items": {"type": "string"}, "minItems": 1}, {
                         "order": {"enum": list(_ORDERS), "description": "exact (default): these calls and no "
                                   "others, in order; subsequence: in order, others between allowed; any: each "
                                   "made, any order."},
                         "exact": {"type": "boolean", "description": "Older spelling: true = order: exact, "
                                   "false = order: subsequence."}},
                     ({"tool_sequence": ["search", "book"]}, {"tool_sequence": ["search", "book"],
                                                              "order": "subsequence"}), build=tool_sequence,
                     bounded=True)
MAX_CALLS = Kind("At most this many tool calls (agent tests: over the whole conversation).",
                 {"type": "integer", "minimum": 0}, {}, ({"max_calls": 3},), build=max_calls, bounded=True)
MAX_TURNS = Kind("At most this many model calls in the conversation (agent tests only).",
                 {"type": "integer", "minimum": 0}, {}, ({"max_turns": 4},), build=max_turns, bounded=True)
NO_INVENTED_TOOLS = Kind("No call to a tool the test does not offer.", {"const": True}, {},
                         ({"no_invented_tools": True},), build=no_invented_tools, bounded=True)
PARALLEL = Kind("These functions were called together, in one model reply.",
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 2}, {},
                ({"parallel": ["get_weather", "get_time"]},), build=parallel, bounded=True)
FINAL_ANSWER = Kind("Any answer evaluator, scoring the conversation's final answer (agent tests only).",
                    {"$ref": "#/$defs/evaluator"}, {}, ({"final_answer": {"contains": "18"}},), build=final_answer,
                    child=True)
STATE = Kind("The final state variables, matched like tool_call args (agent tests only).",
             {"type": "object", "minProperties": 1, "description": "Variable -> accepted values (a single value "
              "is a list of one; \"\" = may be unset)."}, {}, ({"state": {"booked": [True]}},), build=state,
             bounded=True)
