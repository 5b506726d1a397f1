"""Compiling an evaluator spec into its tree (engine.model.tree.Node), once, when the suite loads.

    compile_spec({"all": [{"contains": "Paris"}, {"equals": "{{ golden }}", "must": True}]}, variables)
      -> Node(kind="all", children=(Node(kind="contains", scorer=<bound>), Node(kind="equals", must=True, ...)))

Compiling reads the common options (weight, threshold, name, must), renders the templates with the test's
variables (so no node renders anything per answer), and has the kind's registry entry build the scorer with
its options bound and checked. A problem never raises here: the node keeps it in `problem`, the loader
reports it as FILE:LINE:COL, and scoring such a node gives an *error* verdict with the same words (a tree
built by hand, as in the evaluator tests, behaves as it always did).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from engine.base.render import TemplateSyntaxError, UndefinedError, is_template, render_value
from engine.base.words import did_you_mean, short
from engine.errors import EvaluatorConfigError
from engine.evaluators.base import COMMON_KEYS, NO_OPTIONS, CompileOptions, Kind
from engine.evaluators.registry import COMPOSITIONS, KINDS
from engine.model.tree import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, Node

__all__ = ["LIMIT_KEYS", "MAX_MEMORY_MB", "MIN_MEMORY_MB", "common_options", "compile_spec", "has_template",
           "node_kind"]

#: The common options that are a check's own limits on one answer: on a leaf only.
LIMIT_KEYS = ("timeout_s", "memory_mb")
MIN_MEMORY_MB = 16           # below this a check's own start (its tree compiled again) may not fit
MAX_MEMORY_MB = 1024 * 1024  # 1 TiB: a number past it is a typo


def has_template(value: Any) -> bool:
    """True when `render_value` would render something inside `value` (it walks dicts and lists alike)."""
    kind = type(value)
    if kind is str:
        return "{{" in value or "{%" in value   # `is_template`, inline (it runs on every string of every spec)
    if kind is dict:
        return any(has_template(v) for v in value.values())
    if isinstance(value, str):
        return is_template(value)
    if isinstance(value, Mapping):
        return any(has_template(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_template(v) for v in value)
    return False


def node_kind(spec: Mapping[str, Any]) -> str:
    """The evaluator key of a node: the one key that names a registry entry.

    Raises:
        EvaluatorConfigError: when the node names no known evaluator, or several.
    """
    kinds = [k for k in spec if k in KINDS]
    if len(kinds) == 1:
        return str(kinds[0])
    if not kinds:
        unknown = [str(k) for k in spec if k not in COMMON_KEYS]
        guess = did_you_mean(unknown[0], KINDS) if len(unknown) == 1 else None
        hint = (f"did you mean '{guess}'?" if guess
                else "docs/evaluators.md and `engine schema` list every kind")
        raise EvaluatorConfigError(f"unknown evaluator {', '.join(map(repr, unknown)) or '(empty mapping)'}; {hint}")
    raise EvaluatorConfigError(f"one evaluator per mapping, found {', '.join(map(repr, kinds))}; "
                               "wrap several in `all: [...]`")


def common_options(spec: Mapping[str, Any],
                   variables: Mapping[str, Any]) -> tuple[float, float | None, str | None, bool, float, int]:
    """Weight, threshold, name, must, timeout_s and memory_mb, checked (they may be templates too)."""
    # An option not written is not rendered: float(render_value(1)) is 1.0 and bool(render_value(False)) False.
    weight = float(render_value(spec["weight"], variables)) if "weight" in spec else 1.0
    raw_threshold = spec.get("threshold")
    threshold = None if raw_threshold is None else float(render_value(raw_threshold, variables))
    name = spec.get("name")
    must = bool(render_value(spec["must"], variables)) if "must" in spec else False
    if weight < 0:
        raise EvaluatorConfigError(f"weight must be >= 0, got {weight:g}; use 0 to report a check without "
                                   "counting it", option="weight")
    if threshold is not None and not 0 <= threshold <= 1:
        raise EvaluatorConfigError(f"threshold must be between 0 and 1, got {threshold:g}", option="threshold")
    timeout = float(render_value(spec["timeout_s"], variables)) if "timeout_s" in spec else DEFAULT_TIMEOUT_S
    if not 0 < timeout <= 3600:
        raise EvaluatorConfigError(f"timeout_s must be more than 0 and at most 3600 seconds, got {timeout:g}",
                                   option="timeout_s")
    memory = render_value(spec["memory_mb"], variables) if "memory_mb" in spec else DEFAULT_MEMORY_MB
    if isinstance(memory, bool) or not isinstance(memory, int) or not MIN_MEMORY_MB <= memory <= MAX_MEMORY_MB:
        raise EvaluatorConfigError(f"memory_mb must be a whole number of MiB from {MIN_MEMORY_MB} to {MAX_MEMORY_MB}, "
                                   f"got {short(memory)}", option="memory_mb")
    return weight, threshold, None if name is None else str(name), must, timeout, memory


def compile_spec(spec: Any, variables: Mapping[str, Any] | None = None, suite: CompileOptions = NO_OPTIONS) -> Node:
    """Compile an evaluator spec (as written, `use` already inlined) into a Node tree. Never raises.

    Args:
        spec: A one-key mapping plus common options.
        variables: The test's template variables (`golden` included); templates anywhere in the spec are
            rendered with them now, once.
        suite: What the test's suite sets for all its evaluators (its judge prompt).

    Returns:
        The tree; a node that cannot score carries its `problem`.
    """
    values = variables if variables is not None else {}
    if not isinstance(spec, Mapping):
        return Node(kind="", problem=f"an evaluator must be a mapping like {{contains: Paris}}, got {short(spec)}")
    try:
        kind = node_kind(spec)
    except EvaluatorConfigError as exc:
        return Node(kind="", problem=str(exc))
    try:
        weight, threshold, name, must, timeout, memory = common_options(spec, values)
    except EvaluatorConfigError as exc:
        return Node(kind=kind, problem=str(exc))
    except (UndefinedError, TemplateSyntaxError) as exc:
        return Node(kind=kind, problem=f"template error in the {kind} evaluator: {exc}")
    except (TypeError, ValueError) as exc:
        return Node(kind=kind, problem=f"{kind}: weight, threshold and timeout_s must be numbers ({exc})")
    common: dict[str, Any] = {"weight": weight, "threshold": threshold, "name": name, "must": must}
    entry = KINDS[kind]
    if kind in COMPOSITIONS:
        for key in LIMIT_KEYS:
            if key in spec:
                more = "more time" if key == "timeout_s" else "more memory"
                return Node(kind=kind, problem=f"`{key}` goes on a check, not on `{kind}`: write it beside each "
                                               f"check that needs {more}", **common)
        return _composite(kind, spec, values, common, suite)
    common["timeout_s"] = timeout
    common["memory_mb"] = memory
    return _leaf(kind, entry, spec, values, common, suite)


def _composite(kind: str, spec: Mapping[str, Any], variables: Mapping[str, Any], common: dict[str, Any],
               suite: CompileOptions) -> Node:
    if kind == "use":
        # The loader replaces `use: NAME` by the named evaluator; reaching here means it did not.
        return Node(kind="use", problem=f"named evaluator {short(spec['use'])} was not resolved; define it under "
                                        "the suite's `evaluators:` and check its spelling", **common)
    items = [spec[kind]] if kind == "not" else spec[kind]
    if not isinstance(items, (list, tuple)) or not items:
        return Node(kind=kind, problem=f"`{kind}` takes a non-empty list of evaluators, got {short(items)}", **common)
    children = tuple(compile_spec(item, variables, suite) for item in items)
    return Node(kind=kind, children=children, is_async=any(c.is_async for c in children),
                blocking=any(c.blocking for c in children), bounded=all(c.bounded for c in children), **common)


def _leaf(kind: str, entry: Kind, spec: Mapping[str, Any], variables: Mapping[str, Any],
          common: dict[str, Any], suite: CompileOptions) -> Node:
    assert entry.build is not None  # every non-composition entry has a builder (test_registry checks it)
    build = entry.build if entry.build_in_suite is None else entry.build_in_suite(suite)
    try:
        # A child evaluator is compiled (its templates rendered once, here); never rendered twice.
        value = compile_spec(spec[kind], variables, suite) if entry.child else render_value(spec[kind], variables)
        options = {k: render_value(v, variables) for k, v in spec.items() if k != kind and k not in COMMON_KEYS}
        scorer = build(value, options)
    except EvaluatorConfigError as exc:
        return Node(kind=kind, problem=str(exc), **common)
    except (UndefinedError, TemplateSyntaxError) as exc:
        return Node(kind=kind, problem=f"template error in the {kind} evaluator: {exc}", **common)
    except Exception as exc:  # noqa: BLE001 - a builder bug is this node's problem, never a crashed load
        return Node(kind=kind, problem=f"{kind} evaluator could not be built: {type(exc).__name__}: {exc}",
                    **common)
    is_async = _awaits(scorer)
    for key, example in (("timeout_s", 30), ("memory_mb", 2048)):
        if key in spec and (is_async or entry.blocking):
            if not is_async and key in entry.value.get("properties", {}):
                own = (f"{kind} runs a program under its own limit: write it inside, "
                       f"{{{kind}: {{..., {key}: {example}}}}}")
            elif not is_async:
                own = f"{kind} runs a program under the limits of the test's `workspace:` block: write `{key}` there"
            elif key == "timeout_s":
                own = "a judge waits for a model call, which the judge model's `timeout_s` in the models file limits"
            else:
                own = f"{kind} waits for a model call, and its reply is read under the model's `max_response_mb`"
            return Node(kind=kind, problem=f"`{key}` beside {kind} does not apply: {own}", **common)
    # A child tree rides on its holder as `held` (walkers see its kinds); its scoring stays the holder's scorer's.
    return Node(kind=kind, scorer=scorer, held=value if entry.child else None, is_async=is_async,
                blocking=entry.blocking, bounded=entry.bounded and not entry.child, **common)


def _awaits(scorer: Any) -> bool:
    """An `async def` scorer, or a scorer object whose `__call__` is one (a judge's `JudgeScorer`)."""
    return (inspect.iscoroutinefunction(scorer)
            or inspect.iscoroutinefunction(inspect.getattr_static(type(scorer), "__call__", None)))
