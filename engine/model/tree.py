"""The compiled evaluator tree: an immutable `Node` per spec node, built once when the suite loads.

    Node(kind="all", children=(Node(kind="contains", scorer=<bound>), Node(kind="equals", must=True, ...)))

engine.evaluators compiles a spec into this tree (`compile_spec`: options checked and bound, templates
rendered) and scores it (`score`, the one walker); a node that cannot score keeps its `problem`.

A leaf whose value is itself an evaluator (`final_answer`) keeps that compiled tree in `held`, beside its scorer
(which scores it through `ScoringContext.descend`): the leaf stays a leaf (`children` empty, so scoring and the
verdict paths are unchanged), and `walk` enters the held tree, so whatever looks for a kind (a judge's model, an
embedding model, a program-running check) finds it there too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.model.answer import Answer
from engine.model.verdict import Verdict

__all__ = ["DEFAULT_MEMORY_MB", "DEFAULT_TIMEOUT_S", "LeafScorer", "Node"]

#: A check's time limit on one answer when its `timeout_s` does not say (engine.evaluators.scoring_pool).
DEFAULT_TIMEOUT_S = 10.0
#: The memory a check may take on one answer, MiB, when its `memory_mb` does not say: the sandbox's default too
#: (engine.harness.isolation.Limits); parsing the largest reply a model may send (32 MiB) takes a few hundred, and
#: ifeval's language detection (langdetect) about 60 on first use.
DEFAULT_MEMORY_MB = 1024

#: A leaf's scorer as the tree holds it: `scorer(answer, ctx)`, `ctx` being an engine.model.scoring
#: ScoringContext (typed as `Scorer` there, where the builders are checked). The context names this module's
#: Node (it holds the Test, whose tree this is, and the walker), so the tree does not name the context back.
LeafScorer = Callable[[Answer, Any], "Verdict | Awaitable[Verdict]"]


@dataclass(frozen=True, slots=True)
class Node:
    """One compiled evaluator node.

    Args:
        kind: The evaluator key (`contains`, `all`, ...); "" when the spec names no known kind.
        weight: Weight inside the parent (0 = reported, not counted).
        threshold: The score this node needs to pass, or None (leaves: a full score; root: the test's).
        name: The label the author gave, or None.
        must: The parent fails whenever this node fails.
        children: Child nodes (`all`, `any`: several; `not`: one).
        held: The compiled tree a leaf's scorer scores through `ScoringContext.descend` (`final_answer`'s child),
            or None. Not a child: the leaf's verdict is its scorer's, the held tree's verdict its one child.
        scorer: The leaf's scorer, options bound (None for compositions and for nodes with a problem).
        problem: Why this node cannot score (an unknown kind, a bad option), or None.
        is_async: This node or a descendant has an `async` scorer (a model-graded judge).
        blocking: This node or a descendant blocks while it scores (exec): score the tree off the event loop.
        timeout_s: The leaf's time limit on one answer (its `timeout_s`, else the default).
        memory_mb: The memory the leaf may take on one answer, MiB, in a scoring process (its `memory_mb`, else
            the default).
        bounded: This node and every descendant score in time a small constant per character of the answer
            (`Kind.bounded`): on a short answer the tree scores inline.
    """

    kind: str
    weight: float = 1.0
    threshold: float | None = None
    name: str | None = None
    must: bool = False
    children: tuple[Node, ...] = ()
    held: Node | None = None
    scorer: LeafScorer | None = field(default=None, compare=False, repr=False)
    problem: str | None = None
    is_async: bool = False
    blocking: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    bounded: bool = False

    def walk(self, path: tuple[Any, ...] = (), *, enter_held: bool = True) -> Iterator[tuple[tuple[Any, ...], Node]]:
        """Yield (path, node) for this node and every descendant, depth first, a leaf's held tree included.

        A path is the place in the spec as written: `()` for the root, `("all", 1, "not")` for the child
        of the second item of an `all`, `("final_answer",)` for the tree a root `final_answer` holds - the path
        the loader points diagnostics at. With `enter_held=False` a held tree is left out: its leaves score inside
        their holder, under its time and memory limits (engine.evaluators.scoring_pool counts the holder's).
        """
        yield path, self
        if self.held is not None and enter_held:
            yield from self.held.walk((*path, self.kind))
        if self.kind == "not" and self.children:
            yield from self.children[0].walk((*path, "not"), enter_held=enter_held)
            return
        for index, child in enumerate(self.children):
            yield from child.walk((*path, self.kind, index), enter_held=enter_held)

    def kinds(self) -> list[str]:
        """The kinds in the tree, held trees included, each once, in the order they appear (the `list` command's
        column)."""
        return list(dict.fromkeys(node.kind for _, node in self.walk() if node.kind))
