"""An evaluator's judgement of one answer, with its children's for a composition."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Verdict:
    """An evaluator's judgement of one answer.

    Args:
        score: In [0, 1]. 0 for an error verdict.
        passed: Whether the node passed (its threshold, or score == 1 for leaves without one).
        reason: One line a person can read: "expected 'Paris', got 'Lyon'".
        kind: The evaluator key (`contains`, `all`, ...).
        name: The optional `name:` the author gave the node.
        weight: The node's weight inside its parent (0 = reported, not counted).
        error: True when the evaluator could not judge (bad config at run time, a crash) - not a fail.
        children: Verdicts of child nodes, for compositions.
        details: Extra facts for the results row (e.g. {"isolation": "pidns+netns"} from exec).
    """

    score: float
    passed: bool
    reason: str
    kind: str = ""
    name: str | None = None
    weight: float = 1.0
    error: bool = False
    children: tuple[Verdict, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    def walk(self, path: str = "") -> Iterator[tuple[str, Verdict]]:
        """Yield (path, verdict) for this node and every descendant, depth first.

        Paths look like `all`, `all/0.contains`, `all/1.not/0.regex`.
        """
        here = path or self.kind
        yield here, self
        for i, child in enumerate(self.children):
            yield from child.walk(f"{here}/{i}.{child.kind}")
