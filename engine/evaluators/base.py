"""What every leaf evaluator shares: its signature, its context, and verdict helpers.

A leaf evaluator is a plain function::

    def contains(value, options, answer, ctx) -> Verdict

- `value`   the (rendered) value under the evaluator's key: `contains: Paris` -> "Paris";
- `options` the other keys of the node, rendered, minus the common keys that composition owns
            (`weight`, `threshold`, `name`, `must`);
- `answer`  the model's Answer (text already normalised: a leading <think> block removed);
- `ctx`     the EvalContext (the test, its variables).

Leaves return a Verdict and never raise to signal a failure; they never see `not`, weights or
thresholds (engine.evaluators.compose owns those). A leaf that raises is turned into an *error*
verdict by compose, so a crash never stops a run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.model import Answer, Test, Verdict

COMMON_KEYS = frozenset({"weight", "threshold", "name", "must"})


@dataclass(frozen=True)
class EvalContext:
    """What a leaf may know besides the answer.

    Args:
        test: The test being scored (tools, golden, suite_dir for harness files).
        variables: Template variables (case values, golden, test_id, suite).
    """

    test: Test
    variables: Mapping[str, Any] = field(default_factory=dict)


Leaf = Callable[[Any, Mapping[str, Any], Answer, EvalContext], Verdict]


def verdict(score: float, reason: str, kind: str = "", **details: Any) -> Verdict:
    """A leaf verdict: passed means a full score, the parent's threshold may say otherwise."""
    score = min(1.0, max(0.0, float(score)))
    return Verdict(score=score, passed=score >= 1.0, reason=reason, kind=kind, details=details)


def error(reason: str, kind: str = "") -> Verdict:
    """An error verdict: the evaluator could not judge. Kept apart from a fail."""
    return Verdict(score=0.0, passed=False, reason=reason, kind=kind, error=True)
