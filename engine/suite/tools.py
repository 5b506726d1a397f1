"""A declared tool's spec compiled once, when the suite loads, into an engine.model.tools `Tool`.

The loader compiles each suite's tools once (so a bad rule is reported at FILE:LINE:COL); the agent loop
asks the compiled `Tool.answer` for each call.

The YAML this compiles (the value under `tools.<name>`)::

    get_weather:
      description: Current weather for a city.
      parameters: {type: object, properties: {city: {type: string}}, required: [city]}
      returns:
        - when: {city: [Paris, Paname]}     # argument -> accepted values, as `tool_call` args
          result: {temp_c: 18, sky: cloudy}
          delay_s: 0.2                     # a slow tool
        - when: {city: [Rome]}
          result: "{{ city }}: sunny"      # a Jinja template over the call's arguments
          set: {asked_rome: true}          # state variables this call changes
        - error: "unknown city {{ city }}" # no `when`: the default; `error` simulates a failing tool

Rules are tried in order; the first whose `when` accepts the arguments answers. A `when` compares as
the `strict` profile of `tool_call` does (the same `strict_equal`): an argument not named in `when` is
free, `""` among the accepted values means the argument may be left out, strings compare trimmed and
case-insensitively, a bool never equals a number. Templates see each argument by name, `args` (the
whole argument object, for names that are not identifiers) and `state` (the state variables before
this call); `args` and `state` are reserved, so an argument of that name is reached as `args.state`.

Compiling never raises: every problem is a `Problem` with the path of the value inside the tool's
spec, so the suite loader can point at FILE:LINE:COL. Answering never raises either: a call no
rule accepts, or a template that cannot render, is a tool error the model reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from jinja2 import meta

from engine.base.compiled_schema import schema_error
from engine.base.diagnostic import Path, Problem, unknown_keys
from engine.base.render import ENV, TemplateSyntaxError, is_template
from engine.model.tools import Rule, Tool, plain

__all__ = ["MAX_DELAY_S", "compile_tool", "compile_tools"]


RULE_KEYS = ("when", "result", "error", "delay_s", "set")
TOOL_KEYS = ("name", "description", "parameters", "returns")
RESERVED_NAMES = frozenset({"args", "state"})
MAX_DELAY_S = 300.0   # a simulated tool slower than this is a typo (ms for s), not a test


# ---------------------------------------------------------------- compiling


def compile_tools(specs: Any, path: Path = ("tools",)) -> tuple[dict[str, Tool], list[Problem]]:
    """Compile a suite's `tools:` mapping.

    Args:
        specs: Tool name -> tool spec.
        path: Where `specs` sits in the suite (prefixed to every problem's path).

    Returns:
        The tools that compiled, by name, and every problem found (empty when all is well).
    """
    if not isinstance(specs, Mapping):
        return {}, [Problem(path, "`tools` must map each tool name to its definition")]
    tools: dict[str, Tool] = {}
    problems: list[Problem] = []
    for name, spec in specs.items():
        tool, found = compile_tool(str(name), spec, path + (str(name),))
        problems.extend(found)
        if tool is not None:
            tools[str(name)] = tool
    return tools, problems


def compile_tool(name: str, spec: Any, path: Path = ()) -> tuple[Tool | None, list[Problem]]:
    """Compile one tool's spec (`description`, `parameters`, `returns`).

    Args:
        name: The tool's name.
        spec: Its mapping as loaded from YAML.
        path: Where the spec sits (prefixed to every problem's path).

    Returns:
        The tool (None when there are problems) and the problems.
    """
    if not isinstance(spec, Mapping):
        return None, [Problem(path, f"tool '{name}' must be a mapping with `parameters` (and `returns`)")]
    problems = unknown_keys(spec, TOOL_KEYS, path, f"tool '{name}'")
    parameters = plain(spec.get("parameters") or {})
    if not isinstance(parameters, dict):
        problems.append(Problem(path + ("parameters",), f"the parameters of tool '{name}' must be a JSON Schema "
                                "object"))
        parameters = {}
    elif (error := schema_error(parameters)) is not None:   # checked by the draft its `$schema` names
        problems.append(Problem(path + ("parameters",) + tuple(error.absolute_path),
                                f"the parameters of tool '{name}' are not a valid JSON Schema: {error.message}"))
    properties = parameters.get("properties")
    # With declared properties, a `when` or template naming anything else is a typo worth stopping.
    known = {str(k) for k in properties} if isinstance(properties, Mapping) and properties else None
    rules = _compile_returns(name, spec.get("returns"), path + ("returns",), known, problems)
    if problems:
        return None, problems
    description = spec.get("description")
    return Tool(name, "" if description is None else str(description), parameters, rules), []


def _compile_returns(name: str, returns: Any, path: Path, known: set[str] | None,
                     problems: list[Problem]) -> tuple[Rule, ...]:
    if returns is None:
        return ()
    if not isinstance(returns, list):
        problems.append(Problem(path, f"`returns` of tool '{name}' must be a list of rules "
                                "(`- when: {...}` / `result: ...`), tried in order"))
        return ()
    rules = []
    default_at: int | None = None
    for index, raw in enumerate(returns):
        here = path + (index,)
        if default_at is not None:
            problems.append(Problem(here, f"rule {index} of tool '{name}' can never answer: rule {default_at} has "
                                    "no `when` and accepts every call; move the default rule last"))
        rule = _compile_rule(name, index, raw, here, known, problems)
        if rule is not None:
            rules.append(rule)
            if rule.when is None and default_at is None:
                default_at = index
    return tuple(rules)


def _compile_rule(name: str, index: int, raw: Any, path: Path, known: set[str] | None,
                  problems: list[Problem]) -> Rule | None:
    if not isinstance(raw, Mapping):
        problems.append(Problem(path, f"rule {index} of tool '{name}' must be a mapping with `result` or `error` "
                                "(and optional `when`, `delay_s`, `set`)"))
        return None
    before = len(problems)
    problems.extend(unknown_keys(raw, RULE_KEYS, path, f"a rule of tool '{name}'"))
    if ("result" in raw) == ("error" in raw):
        problems.append(Problem(path, f"rule {index} of tool '{name}' needs exactly one of `result` (the tool "
                                "succeeds) and `error` (the tool fails)"))
    when = _compile_when(name, raw.get("when"), path + ("when",), known, problems) if "when" in raw else None
    error = raw.get("error")
    if "error" in raw and (not isinstance(error, str) or not error.strip()):
        problems.append(Problem(path + ("error",), "`error` must be the error message (a non-empty string)"))
    delay_s = _compile_delay(raw.get("delay_s", 0.0), path + ("delay_s",), problems)
    changes = raw.get("set", {})
    if "set" in raw and (not isinstance(changes, Mapping) or not changes):
        problems.append(Problem(path + ("set",), "`set` must map state variable names to their new values, "
                                "e.g. `set: {booked: true}`"))
        changes = {}
    result = plain(raw.get("result"))
    changes = plain(changes)
    variables = (known | RESERVED_NAMES) if known is not None else None
    templated = False
    for key, value in (("result", result), ("error", error), ("set", changes)):
        templated |= _check_templates(name, value, path + (key,), variables, problems)
    if len(problems) > before:
        return None
    return Rule(index, when, result, error, delay_s, MappingProxyType(dict(changes)), templated)


def _compile_when(name: str, when: Any, path: Path, known: set[str] | None,
                  problems: list[Problem]) -> Mapping[str, tuple[Any, ...]] | None:
    if not isinstance(when, Mapping) or not when:
        problems.append(Problem(path, "`when` must map argument names to accepted values, e.g. "
                                "`when: {city: [Paris]}`; leave `when` out to write the default rule"))
        return None
    out: dict[str, tuple[Any, ...]] = {}
    for arg, accepted in when.items():
        if known is not None and arg not in known:
            listed = ", ".join(sorted(known)) or "none"
            problems.append(Problem(path + (str(arg),), f"tool '{name}' has no parameter '{arg}' (its parameters: "
                                    f"{listed})", key=True))
            continue
        values = plain(accepted) if isinstance(accepted, list) else [plain(accepted)]
        if not values:
            problems.append(Problem(path + (str(arg),), f"`when.{arg}` lists no accepted value"))
            continue
        out[str(arg)] = tuple(values)
    return MappingProxyType(out)


def _compile_delay(raw: Any, path: Path, problems: list[Problem]) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or raw < 0:
        problems.append(Problem(path, "`delay_s` must be a number of seconds, 0 or more"))
        return 0.0
    if raw > MAX_DELAY_S:
        problems.append(Problem(path, f"`delay_s` is {raw:g} s, above the {MAX_DELAY_S:g} s limit; "
                                "a simulated tool needs only to be slower than the others"))
        return 0.0
    return float(raw)


def _check_templates(name: str, value: Any, path: Path, variables: set[str] | None,
                     problems: list[Problem]) -> bool:
    """Parse every template inside `value`; True when there is at least one."""
    if isinstance(value, str):
        if not is_template(value):
            return False
        try:
            used = meta.find_undeclared_variables(ENV.parse(value))
        except TemplateSyntaxError as exc:
            problems.append(Problem(path, f"template syntax error: {exc.message}"))
            return True
        unknown = sorted(used - variables) if variables is not None else []
        if unknown and variables is not None:
            problems.append(Problem(path, f"the template uses {', '.join(unknown)}, which tool '{name}' does not "
                                    f"have; it sees its parameters ({', '.join(sorted(variables - RESERVED_NAMES))}),"
                                    " `args` and `state`"))
        return True
    if isinstance(value, Mapping):
        return any([_check_templates(name, v, path + (str(k),), variables, problems) for k, v in value.items()])
    if isinstance(value, list):
        return any([_check_templates(name, v, path + (i,), variables, problems) for i, v in enumerate(value)])
    return False
