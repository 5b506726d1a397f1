"""Evaluators: the catalogue, the compiled tree, and the one scoring function the run and the golden
check share.

    node = compile_spec(spec, variables)       # once, when the suite loads (engine.suite.expand)
    test = Test(..., eval=spec, evaluator=node)
    verdict = score(test, answer)               # or `await score_async(test, answer)`

`KINDS` (registry.py) is the whole catalogue in one visible dict; docs/evaluators.md documents every
entry and docs/architecture.md draws the tree and the registry entry.
"""

from __future__ import annotations

from engine.evaluators.base import COMMON_KEYS, CheckSite, Kind
from engine.evaluators.node import compile_spec
from engine.evaluators.registry import COMPOSITIONS, KINDS
from engine.evaluators.scoring import context, score, score_async, score_node, score_node_async

__all__ = [
    "COMMON_KEYS",
    "COMPOSITIONS",
    "KINDS",
    "CheckSite",
    "Kind",
    "compile_spec",
    "context",
    "score",
    "score_async",
    "score_node",
    "score_node_async",
]
