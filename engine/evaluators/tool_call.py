"""Tool-call evaluators of one answer: tool_call, no_tool_call, first_tool.

(`tool_sequence`, and `tool_call`'s `at` over a conversation, are in trajectory.py.)

`tool_call` scores the list of calls the model made against one expected call (`name` + `args`)
or several (`calls`). Several calls are matched in any order by maximum bipartite matching (so a
reordered parallel answer is never failed by a greedy first fit), or position by position with
`order: exact`. Score = matched calls / max(expected calls, calls made): missing and surplus
calls both cost credit, and only a full match passes. How single values compare is in
`tool_match.py` (profiles `strict` and `bfcl`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.errors import EvaluatorConfigError
from engine.evaluators.base import CheckSite, Kind, verdict
from engine.evaluators.tool_match import ExpectedCall, check_call, show, show_json
from engine.model.answer import Answer, ToolCall
from engine.model.scoring import Scorer, ScoringContext
from engine.model.tools import plain
from engine.model.verdict import Verdict

_OPTIONS = ("name", "args", "calls", "count", "order", "extra_args", "match", "underscore_to_dot")


def describe(call: ToolCall, limit: int = 80) -> str:
    """`name(a=1, b='x')`, cut to one line; invalid JSON arguments shown raw."""
    if not call.valid_json:
        inner = f"<invalid JSON {call.raw_arguments!r}>"
    elif isinstance(call.arguments, dict):
        inner = ", ".join(f"{k}={v!r}" for k, v in call.arguments.items())
    else:
        inner = show_json(call.arguments, limit)
    text = f"{call.name}({inner})".replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bad(message: str, option: str | None = None) -> EvaluatorConfigError:
    return EvaluatorConfigError(message, kind="tool_call", option=option)


def _expected(spec: Mapping[str, Any]) -> list[ExpectedCall]:
    def one(item: Any, where: str) -> ExpectedCall:
        if not isinstance(item, Mapping) or not item.get("name"):
            raise _bad(f"tool_call: {where} needs a `name`", "name")
        args = item.get("args")
        if args is not None and not isinstance(args, Mapping):
            raise _bad(f"tool_call: {where} `args` must map each argument to a list of accepted values", "args")
        accepted = None if args is None else {str(k): (v if isinstance(v, list) else [v])
                                              for k, v in plain(args).items()}
        return ExpectedCall(name=str(item["name"]), args=accepted)

    if "calls" in spec:
        calls = spec["calls"]
        if not isinstance(calls, list) or not calls:
            raise _bad("tool_call: `calls` must be a non-empty list of {name, args}", "calls")
        expected = [one(c, f"calls[{i}]") for i, c in enumerate(calls)]
        if spec.get("count") is not None and int(spec["count"]) != len(expected):
            raise _bad(f"tool_call: count {spec['count']} differs from the {len(expected)} listed calls; remove "
                       "`count` or make them agree", "count")
        return expected
    count = int(spec.get("count", 1))
    if count < 1:
        raise _bad("tool_call: count must be at least 1 (use no_tool_call for none)", "count")
    return [one(spec, "the expected call")] * count


def max_matching(ok: Sequence[Sequence[bool]], n_right: int) -> list[int | None]:
    """Maximum bipartite matching (augmenting paths). ok[i][j]: expected i may take call j.

    Returns, for each expected call, the index of the call it got, or None.
    """
    owner: list[int | None] = [None] * n_right

    def augment(i: int, seen: set[int]) -> bool:
        for j in range(n_right):
            if ok[i][j] and j not in seen:
                seen.add(j)
                holder = owner[j]
                if holder is None or augment(holder, seen):
                    owner[j] = i
                    return True
        return False

    for row in range(len(ok)):
        augment(row, set())
    result: list[int | None] = [None] * len(ok)
    for column, holder in enumerate(owner):
        if holder is not None:
            result[holder] = column
    return result


def tool_call(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The model made the expected call(s), with accepted argument values."""
    kind = "tool_call"
    if not isinstance(value, Mapping):
        raise _bad("tool_call: give a mapping with `name` and `args`, or `calls: [...]`")
    spec = {**options, **value}
    unknown = [k for k in spec if k not in _OPTIONS]
    if unknown:
        raise _bad(f"tool_call: unknown option {unknown[0]!r}; use {', '.join(_OPTIONS)}", str(unknown[0]))
    profile = str(spec.get("match", "strict"))
    order = str(spec.get("order", "any"))
    extra = str(spec.get("extra_args", "deny"))
    if profile not in ("strict", "bfcl") or order not in ("any", "exact") or extra not in ("allow", "deny"):
        raise _bad("tool_call: match is strict|bfcl, order is any|exact, extra_args is allow|deny; got "
                   f"match={profile!r}, order={order!r}, extra_args={extra!r}")
    expected = _expected(spec)
    allow_extra = extra == "allow"
    underscore_to_dot = bool(spec.get("underscore_to_dot", False))

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        calls = list(answer.tool_calls)
        schemas = ctx.test.tool_schemas

        def check(e: ExpectedCall, c: ToolCall) -> str | None:
            return check_call(e, c, profile=profile, schemas=schemas, allow_extra=allow_extra,
                              underscore_to_dot=underscore_to_dot)

        if not calls:
            text = f"; it said {show(answer.text)}" if answer.text.strip() else ""
            return verdict(0.0, f"expected a call to {expected[0].name}, the answer made no tool call{text}", kind)
        problems = [[check(e, c) for c in calls] for e in expected]
        if order == "exact":
            assignment: list[int | None] = [i if i < len(calls) and problems[i][i] is None else None
                                            for i in range(len(expected))]
        else:
            assignment = max_matching([[p is None for p in row] for row in problems], len(calls))
        matched = sum(1 for j in assignment if j is not None)
        score_value = matched / max(len(expected), len(calls))
        if matched == len(expected) == len(calls):
            if len(calls) == 1:
                return verdict(1.0, f"called {describe(calls[0])}", kind)
            return verdict(1.0, f"all {len(calls)} calls matched", kind)
        return verdict(score_value, _why(expected, calls, assignment, problems, order), kind)

    return score


def _why(expected: list[ExpectedCall], calls: list[ToolCall], assignment: list[int | None],
         problems: list[list[str | None]], order: str) -> str:
    """One line naming the first thing that went wrong."""
    count = "" if len(expected) == len(calls) else f"expected {len(expected)} call(s), got {len(calls)}; "
    missing = [i for i, j in enumerate(assignment) if j is None]
    if not missing:
        used = {j for j in assignment if j is not None}
        extra = [c for j, c in enumerate(calls) if j not in used]
        return f"{count}unexpected extra call {describe(extra[0])}"
    i = missing[0]
    if order == "exact":
        if i >= len(calls):
            return f"{count}call {i + 1} ({expected[i].name}) is missing"
        return f"{count}call {i + 1}: {problems[i][i]}"
    used = {j for j in assignment if j is not None}
    free = [j for j in range(len(calls)) if j not in used]
    if not free:
        return f"{count}no call left for expected call {i + 1} of {len(expected)} ({expected[i].name})"
    same_name = [j for j in free if calls[j].name == expected[i].name]
    j = (same_name or free)[0]
    reason = problems[i][j] or "its matching calls are taken by other expected calls"
    if len(expected) == 1:
        return f"{count}{reason}"
    return f"{count}expected call {i + 1} of {len(expected)} ({expected[i].name}) not matched: {reason}"


def no_tool_call(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The model answered without calling any tool (BFCL irrelevance)."""
    if value is not True:
        raise EvaluatorConfigError(f"no_tool_call takes `true`, got {show(value)}", kind="no_tool_call")

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        if not answer.tool_calls:
            return verdict(1.0, "no tool call, as expected", "no_tool_call")
        first = describe(answer.tool_calls[0])
        more = f" (+{len(answer.tool_calls) - 1} more)" if len(answer.tool_calls) > 1 else ""
        return verdict(0.0, f"expected no tool call, got {first}{more}", "no_tool_call")

    return score


def first_tool(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The first call the model made is to this function."""
    name_wanted = str(value)

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        if not answer.tool_calls:
            return verdict(0.0, f"expected a first call to {value!r}, the answer made no tool call", "first_tool")
        name = answer.tool_calls[0].name
        if name == name_wanted:
            return verdict(1.0, f"first call is {name}", "first_tool")
        return verdict(0.0, f"expected the first call to be {value!r}, got {name!r}", "first_tool")

    return score


# ------------------------------------------------------------------------------------------ load-time checks

def _check_tool_call(value: Any, spec: Mapping[str, Any], site: CheckSite) -> None:
    if not isinstance(value, Mapping):
        return
    calls: list[Any] = value["calls"] if isinstance(value.get("calls"), list) else [value]
    for i, call in enumerate(calls):
        args = call.get("args") if isinstance(call, Mapping) else None
        at = ("tool_call",) + (("calls", i) if "calls" in value else ()) + ("args",)
        for arg in (k for k, v in (args if isinstance(args, Mapping) else {}).items() if v == []):
            site.warning(at + (arg,), (
                f"'{arg}' accepts no value ([]) and may not be left out (no \"\"), so no answer can pass; "
                "BFCL reads [] the same way. List the accepted values, or [\"\"] to allow leaving it out"))
    if (isinstance(value, Mapping) and "calls" in value and "count" in value and isinstance(value["count"], int)
            and isinstance(value["calls"], list) and value["count"] != len(value["calls"])):
        site.error(("tool_call", "count"), f"'count' is {value['count']} but 'calls' lists {len(value['calls'])} "
                                           "calls; remove 'count' or make them agree")


# ------------------------------------------------------------------------------------------ registry entries

TOOL_CALL = Kind("The model called a function with accepted arguments.", {
    "type": "object", "additionalProperties": False,
    "oneOf": [{"required": ["name"]}, {"required": ["calls"]}],
    "properties": {
        "name": {"type": "string", "description": "The function that must be called.", "examples": ["get_weather"]},
        "args": {"$ref": "#/$defs/tool_args"},
        "calls": {"type": "array", "minItems": 1, "description": "Several calls (parallel calls).",
                  "items": {"type": "object", "additionalProperties": False, "required": ["name"],
                            "title": "call", "properties": {
                                "name": {"type": "string", "description": "The function name."},
                                "args": {"$ref": "#/$defs/tool_args"}}}},
        "count": {"type": "integer", "minimum": 1,
                  "description": "How many calls there must be (for none, use no_tool_call)."},
        "order": {"enum": ["any", "exact"], "description": "Whether `calls` must come in this order."},
        "extra_args": {"enum": ["allow", "deny"],
                       "description": "Whether arguments not listed in `args` are allowed (default deny)."},
        "match": {"enum": ["strict", "bfcl"], "description": "Value comparison rules (default strict)."},
        "underscore_to_dot": {"type": "boolean",
                              "description": "Accept `a_b` for the function `a.b` (BFCL FC mode)."}}}, {},
    ({"tool_call": {"name": "get_weather", "args": {"city": ["Paris"], "unit": ["c", ""]}}},), build=tool_call,
    check=_check_tool_call)
NO_TOOL_CALL = Kind("The model called no function.", {"const": True}, {}, ({"no_tool_call": True},),
                    build=no_tool_call, bounded=True)
FIRST_TOOL = Kind("The first function the model called.", {"type": "string"}, {}, ({"first_tool": "search"},),
                  build=first_tool, bounded=True)
