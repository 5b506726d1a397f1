"""Scoring a compiled tree: one pass rule for the run, the golden self-check and rescore.

`score(test, answer)` is the sync entry (the golden check, the inline path of `ScoringPool.score`, which the
run and rescore use, and the scoring processes); `score_async(test, answer)` awaits async scorers, the children
of a composition concurrently. Both give the same Verdict for the same tree, and `Verdict.passed` is the one
pass rule: the root's own threshold, else the test's; `must` gates; an error is never a pass.

Given a `Places` (a `ScoringPool`, engine.evaluators.scoring_pool), `score_async` scores inline only what
`inline` allows (bounded kinds on a short answer); a blocking scorer goes to a worker thread and every other
synchronous subtree to a scoring process, under its checks' time limits.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from engine.base.render import TemplateSyntaxError, UndefinedError
from engine.errors import EvaluatorConfigError
from engine.evaluators.base import INLINE_CHARS, error
from engine.evaluators.compose import combine, finish
from engine.evaluators.node import compile_spec
from engine.model.answer import Answer
from engine.model.scoring import GradingCaller, Record, Scorer, ScoringContext, Walker
from engine.model.test import Test
from engine.model.transcript import Transcript
from engine.model.tree import Node
from engine.model.verdict import Verdict

__all__ = ["NO_EVALUATOR", "Places", "answer_size", "context", "evaluator_of", "inline", "run_leaves_through",
           "score", "score_async", "score_node", "score_node_async"]

# A Test with no evaluator at all (the loader refuses such a test; one built by hand can have none) judges
# nothing: an error, never a pass.
NO_EVALUATOR = error("this test has no evaluator, so nothing checked its answer; give it an `eval:` "
                     "(`eval: {none: true}` records answers unscored)")


class Places(Protocol):
    """Where a run scores what may not score inline (engine.evaluators.scoring_pool.ScoringPool)."""

    async def in_thread(self, scorer: Scorer, answer: Answer, ctx: ScoringContext) -> Any:
        """A blocking scorer's result, from a worker thread."""

    async def isolated(self, node: Node, path: tuple[int, ...], answer: Answer, ctx: ScoringContext,
                       root_threshold: float | None) -> Verdict:
        """The verdict of the subtree at `path` (child indexes from the root), from a scoring process."""


def answer_size(answer: Answer) -> int:
    """The characters a scorer may read: the text and every tool call's name and arguments."""
    size = len(answer.text)
    for call in answer.tool_calls:
        size += len(call.name) + len(call.raw_arguments)
    return size


def inline(node: Node, answer: Answer) -> bool:
    """Whether the subtree scores where the call was made: every kind in it is bounded (a small constant per
    character) and the answer is short."""
    return node.bounded and answer_size(answer) <= INLINE_CHARS


# How a leaf's scorer is called: directly (empty), or, in a scoring process, through the one call here.
_LeafCall = Callable[[Node, Answer, ScoringContext], Any]
_LEAF_CALL: list[_LeafCall] = []


def run_leaves_through(call: _LeafCall) -> None:
    """Call every leaf's scorer through `call` from now on (a scoring process: under each leaf's time limit)."""
    _LEAF_CALL[:] = [call]


def evaluator_of(test: Test) -> Node | None:
    """The test's compiled tree. The loader compiles every test; a Test built by hand with only an `eval`
    spec (tests, scripts) is compiled here, on each call."""
    if test.evaluator is not None:
        return test.evaluator
    if test.eval is None:
        return None
    variables = dict(test.variables)
    variables.setdefault("golden", test.golden)
    return compile_spec(test.eval, variables)


def context(test: Test, *, transcript: Transcript | None = None, caller: GradingCaller | None = None,
            workspace: object | None = None, record: Record | None = None) -> ScoringContext:
    """The context scorers see for `test`."""
    return ScoringContext(test=test, variables=test.variables, transcript=transcript, caller=caller,
                          workspace=workspace, record=record, walker=WALKER)


def score(test: Test, answer: Answer, ctx: ScoringContext | None = None) -> Verdict:
    """Score one answer against the test's compiled tree, synchronously. Never raises.

    A tree with async scorers is run to completion on a fresh event loop: call `score_async` from
    inside a running loop instead.

    Args:
        test: The test (its `evaluator` tree, threshold, tools, variables).
        answer: The model's answer (reasoning already split off by the client).
        ctx: The scoring context; built from `test` when omitted.

    Returns:
        The root verdict; `passed` uses the root node's own threshold, else `test.threshold`.
    """
    try:
        node = evaluator_of(test)
        if node is None:
            return NO_EVALUATOR
        ctx = ctx or context(test)
        if node.is_async:
            return asyncio.run(score_node_async(node, answer, ctx, test.threshold))
        return score_node(node, answer, ctx, test.threshold)
    except Exception as exc:  # noqa: BLE001 - scoring never raises: a crash is an error verdict
        return error(f"could not prepare scoring: {type(exc).__name__}: {exc}")


async def score_async(test: Test, answer: Answer, ctx: ScoringContext | None = None, *,
                      places: Places | None = None) -> Verdict:
    """`score`, awaiting async scorers (children of a composition concurrently). Never raises.

    With `places`, what may not score inline scores there (a thread, a scoring process: see the module doc).
    """
    try:
        node = evaluator_of(test)
        if node is None:
            return NO_EVALUATOR
        return await score_node_async(node, answer, ctx or context(test), test.threshold, places=places)
    except Exception as exc:  # noqa: BLE001 - scoring never raises: a crash is an error verdict
        return error(f"could not prepare scoring: {type(exc).__name__}: {exc}")


def _failure(node: Node, exc: Exception) -> Verdict:
    if isinstance(exc, (UndefinedError, TemplateSyntaxError)):
        return error(f"template error in the {node.kind} evaluator: {exc}", kind=node.kind)
    if isinstance(exc, EvaluatorConfigError):
        return error(str(exc), kind=node.kind)
    return error(f"{node.kind} evaluator could not judge: {type(exc).__name__}: {exc}", kind=node.kind)


def _checked(node: Node, verdict: Any) -> Verdict:
    if not isinstance(verdict, Verdict):
        return error(f"{node.kind} evaluator returned {type(verdict).__name__}, not a Verdict", kind=node.kind)
    return verdict


def score_node(node: Node, answer: Answer, ctx: ScoringContext, root_threshold: float | None = None) -> Verdict:
    """Score one node and its subtree, synchronously. Never raises.

    Args:
        node: The compiled node.
        answer: The answer.
        ctx: The scoring context.
        root_threshold: For the root node only: the test's threshold, used when the node has none.
    """
    if node.problem is not None:
        return error(node.problem, kind=node.kind)
    if ctx.walker is None:
        ctx = ctx._replace(walker=WALKER)
    try:
        if node.scorer is not None:
            result = node.scorer(answer, ctx) if not _LEAF_CALL else _LEAF_CALL[0](node, answer, ctx)
            if node.is_async and inspect.isawaitable(result):
                result = asyncio.run(_await(result))
            if type(result) is not Verdict:
                result = _checked(node, result)
        else:
            result = combine(node, tuple(score_node(child, answer, ctx) for child in node.children))
    except Exception as exc:  # noqa: BLE001 - a crash becomes an error verdict, never a stopped run
        return _failure(node, exc)
    return finish(node, result, root_threshold)


async def _await(result: Awaitable[Any]) -> Any:
    return await result


async def score_node_async(node: Node, answer: Answer, ctx: ScoringContext, root_threshold: float | None = None,
                           *, places: Places | None = None, path: tuple[int, ...] = ()) -> Verdict:
    """Score one node and its subtree, awaiting async scorers; the children of a composition are scored
    concurrently. Never raises.

    Blocking scorers (exec) run in a worker thread (`places.in_thread`, else `asyncio.to_thread`). With
    `places`, a synchronous subtree that may not score `inline` scores in a scoring process (`places.isolated`,
    `path` being its place in the tree).
    """
    if node.problem is not None:
        return error(node.problem, kind=node.kind)
    if ctx.walker is None:
        ctx = ctx._replace(walker=WALKER)
    if places is not None and not node.is_async and not node.blocking and not inline(node, answer):
        return await places.isolated(node, path, answer, ctx, root_threshold)
    try:
        if node.scorer is not None:
            if node.blocking:
                result = await (asyncio.to_thread(node.scorer, answer, ctx) if places is None
                                else places.in_thread(node.scorer, answer, ctx))
            else:
                result = node.scorer(answer, ctx)
            if inspect.isawaitable(result):
                result = await result
            result = _checked(node, result)
        elif node.is_async or node.blocking:
            children = await asyncio.gather(*(score_node_async(child, answer, ctx, places=places, path=(*path, i))
                                              for i, child in enumerate(node.children)))
            result = combine(node, tuple(children))
        else:
            result = combine(node, tuple(score_node(child, answer, ctx) for child in node.children))
    except Exception as exc:  # noqa: BLE001 - a crash becomes an error verdict, never a stopped run
        return _failure(node, exc)
    return finish(node, result, root_threshold)


#: How a scorer descends into a child tree it holds (`ScoringContext.descend`: final_answer scores its child).
WALKER = Walker(score_node, score_node_async)
