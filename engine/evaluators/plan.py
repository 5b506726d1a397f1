"""A spec compiled once for many rows: what `compile_spec` works out the same way for every row, worked out once.

A table-driven test compiles its evaluator once per case row (its templates see the row's variables), and a
suite repeats the same few specs over thousands of tests (`numeric: "{{ golden }}"`, `use: one_word`). Per row
`compile_spec` finds the kind, reads and checks the common options, renders every option, builds the scorer
and, for `all`/`any`/`not`, does the same for every child. `plan_spec` does the row-independent part once: the
kind and registry entry, the common options when they hold no template, the options (plain values only), and
every child without a template compiled to its Node (shared: Nodes are immutable). A row then renders its
leaves' values, builds their scorers and makes the Nodes.

A plan gives the row the Node `compile_spec` gives (equal, with a scorer built by the same builder from the same
value and options; tests/evaluators/test_plan.py compares both on generated specs and rows), or None where it
would not be a plain success (a builder raised, a template failed): the caller then compiles the row with
`compile_spec`, which builds the problem Node with its words. Specs a plan does not cover (templates in common
options or in non-scalar options, `final_answer`'s child, `use`) get no plan.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from engine.base.flat import PLAIN_TYPES
from engine.base.render import is_template, render_value, single_name
from engine.evaluators.node import Node, common_options, compile_spec, has_template, node_kind
from engine.evaluators.registry import COMPOSITIONS, KINDS

__all__ = ["Plan", "plan_spec"]

# variables -> the row's Node, or None: compile this row with `compile_spec` (it reports the problem).
Plan = Callable[[Mapping[str, Any]], Node | None]


class _Unplanned(Exception):
    """This spec (or a part of it) is not covered by a plan: compile every row as before."""


def plan_spec(spec: Any) -> Plan | None:
    """The plan of an evaluator spec with templates (`use` already inlined), or None when it has none.

    Args:
        spec: The resolved spec, as `compile_spec` takes it.
    """
    try:
        return _plan(spec)
    except _Unplanned:
        return None


def _fixed_common(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The common options as `compile_spec` reads them, when none holds a template and all are sound."""
    if any(has_template(spec[key]) for key in ("weight", "threshold", "name", "must") if key in spec):
        raise _Unplanned
    try:
        weight, threshold, name, must = common_options(spec, {})
    except Exception:  # noqa: BLE001 - a bad option: every row reports it through compile_spec
        raise _Unplanned from None
    return {"weight": weight, "threshold": threshold, "name": name, "must": must}


def _plan(spec: Any) -> Plan:
    if not isinstance(spec, Mapping):
        raise _Unplanned
    try:
        kind = node_kind(spec)
    except Exception:  # noqa: BLE001 - an unknown kind: compile_spec reports it
        raise _Unplanned from None
    common = _fixed_common(spec)
    if kind in COMPOSITIONS:
        return _composite_plan(kind, spec, common)
    return _leaf_plan(kind, spec, common)


def _composite_plan(kind: str, spec: Mapping[str, Any], common: dict[str, Any]) -> Plan:
    if kind == "use":
        raise _Unplanned
    items = [spec[kind]] if kind == "not" else spec[kind]
    if not isinstance(items, (list, tuple)) or not items:
        raise _Unplanned
    parts: list[Node | Plan] = []
    for item in items:
        if has_template(item):
            parts.append(_plan(item))
        else:
            fixed = compile_spec(item, {})   # no template: the same Node for every row
            if any(node.problem is not None for _, node in fixed.walk()):
                raise _Unplanned
            parts.append(fixed)

    def plan(variables: Mapping[str, Any]) -> Node | None:
        children: list[Node] = []
        for part in parts:
            child = part if isinstance(part, Node) else part(variables)
            if child is None:
                return None
            children.append(child)
        return Node(kind=kind, children=tuple(children), is_async=any(c.is_async for c in children),
                    blocking=any(c.blocking for c in children), **common)

    return plan


def _leaf_plan(kind: str, spec: Mapping[str, Any], common: dict[str, Any]) -> Plan:
    entry = KINDS[kind]
    build = entry.build
    if build is None or entry.child:
        raise _Unplanned
    options = {k: v for k, v in spec.items() if k != kind and k not in ("weight", "threshold", "name", "must")}
    if any(type(v) not in PLAIN_TYPES or (type(v) is str and is_template(v)) for v in options.values()):
        raise _Unplanned   # nested or templated options: rendered per row by compile_spec
    raw = spec[kind]
    # `{{ name }}` alone: the variable's value itself, as `render_value` returns it (else render_value per row).
    name = single_name(raw) if type(raw) is str else None
    blocking = entry.blocking

    def plan(variables: Mapping[str, Any]) -> Node | None:
        try:
            value = variables[name] if name is not None and name in variables else render_value(raw, variables)
            scorer = build(value, dict(options))
        except Exception:  # noqa: BLE001 - a template or builder problem: compile_spec words it for this row
            return None
        return Node(kind=kind, scorer=scorer, is_async=inspect.iscoroutinefunction(scorer), blocking=blocking,
                    **common)

    return plan
