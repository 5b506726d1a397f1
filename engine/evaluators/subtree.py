"""How a leaf whose value is itself an evaluator (`final_answer: {contains: "18"}`) compiles and scores it.

node.py and scoring.py import the registry, which imports every kind's family module, so a family may not
import them back (the acyclic contract in `make lint`). They hand their functions here when they load
(`install`, called once at the bottom of each), and the family calls them through this module:

    registry ──► trajectory ──► subtree ◄── node (installs compile_spec)
                                        ◄── scoring (installs score_node, score_node_async)

The package's `__init__` imports both, so the functions are installed before any suite compiles.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.evaluators.base import ScoringContext
    from engine.evaluators.node import Node
    from engine.model import Answer, Verdict

__all__ = ["compile_child", "install", "score_child", "score_child_async"]

_HOOKS: dict[str, Callable[..., Any]] = {}


def install(**functions: Callable[..., Any]) -> None:
    """Called by node.py (`compile_spec`) and scoring.py (`score_node`, `score_node_async`)."""
    _HOOKS.update(functions)


def _hook(name: str) -> Callable[..., Any]:
    try:
        return _HOOKS[name]
    except KeyError:
        raise RuntimeError(f"engine.evaluators.subtree: {name} is not installed; import engine.evaluators "
                           "(its __init__ loads node and scoring)") from None


def compile_child(spec: Any, variables: Mapping[str, Any] | None = None) -> Node:
    """`compile_spec` for a child evaluator."""
    node: Node = _hook("compile_spec")(spec, variables)
    return node


def score_child(node: Node, answer: Answer, ctx: ScoringContext) -> Verdict:
    """`score_node` for a child evaluator."""
    verdict: Verdict = _hook("score_node")(node, answer, ctx)
    return verdict


def score_child_async(node: Node, answer: Answer, ctx: ScoringContext) -> Awaitable[Verdict]:
    """`score_node_async` for a child evaluator."""
    result: Awaitable[Verdict] = _hook("score_node_async")(node, answer, ctx)
    return result
