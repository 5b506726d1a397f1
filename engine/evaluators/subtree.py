"""How a leaf whose value is itself an evaluator (`final_answer: {contains: "18"}`) scores it.

compile_spec compiles such a child (the entry's `Kind.child`), so the builder receives a Node. Scoring it
needs scoring.py, which imports the registry, which imports every kind's family module: a family may not
import scoring back (the acyclic contract in `make lint`). scoring.py hands its functions here when it
loads (`install`, at its bottom), and the family calls them through this module:

    registry ──► trajectory ──► subtree ◄── scoring (installs score_node, score_node_async)

The package's `__init__` imports scoring, so the functions are installed before anything is scored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.evaluators.base import ScoringContext
    from engine.evaluators.node import Node
    from engine.model.answer import Answer
    from engine.model.verdict import Verdict

__all__ = ["install", "score_child", "score_child_async"]

_HOOKS: dict[str, Callable[..., Any]] = {}


def install(**functions: Callable[..., Any]) -> None:
    """Called by scoring.py with `score_node` and `score_node_async`."""
    _HOOKS.update(functions)


def _hook(name: str) -> Callable[..., Any]:
    try:
        return _HOOKS[name]
    except KeyError:
        raise RuntimeError(f"engine.evaluators.subtree: {name} is not installed; import engine.evaluators "
                           "(its __init__ loads scoring)") from None


def score_child(node: Node, answer: Answer, ctx: ScoringContext) -> Verdict:
    """`score_node` for a child evaluator."""
    verdict: Verdict = _hook("score_node")(node, answer, ctx)
    return verdict


def score_child_async(node: Node, answer: Answer, ctx: ScoringContext) -> Awaitable[Verdict]:
    """`score_node_async` for a child evaluator."""
    result: Awaitable[Verdict] = _hook("score_node_async")(node, answer, ctx)
    return result
