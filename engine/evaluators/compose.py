"""Composition: `all`, `any`, `not`, weights, thresholds and `must` gates. The only place they live.

Every node of a compiled tree becomes one Verdict; compositions keep their children's verdicts so
results can show the breakdown. Leaves never see negation, weights or thresholds.

Scoring rules (docs/evaluators.md has the full story):

- `all`: weighted mean of the children whose weight is > 0 (weights default 1; `weight: 0` is
  reported, never counted). Without a threshold it passes when every counted child passed.
- `any`: the best counted child. Without a threshold it passes when one counted child passed.
- `not`: 1 - the child's score; passes when the child did not.
- `threshold` on any node: passed = score >= threshold; the root uses the test's threshold when it
  has none of its own.
- `must: true` on a child: when that child fails, the parent fails whatever its score (a gate).
- A child that could not judge (an error verdict) makes its parent an error too: its score is
  not trustworthy, and errors are kept apart from fails.
"""

from __future__ import annotations

from typing import Any

from engine.evaluators.base import Kind
from engine.model.tree import Node
from engine.model.verdict import Verdict

__all__ = ["ALL", "ANY", "NOT", "USE", "combine", "finish"]

_CHILDREN = {"type": "array", "items": {"$ref": "#/$defs/evaluator"}, "minItems": 1}

ALL = Kind("Every child check; the score is the weighted mean of the children.", _CHILDREN, {},
           ({"all": [{"contains": "Paris"}, {"length": {"max_words": 5}}]},))
ANY = Kind("At least one child check; the score is the best child's.", _CHILDREN, {},
           ({"any": [{"equals": "Paris"}, {"equals": "Paris, France"}]},))
NOT = Kind("The opposite of one check: score 1 - child.", {"$ref": "#/$defs/evaluator"}, {},
           ({"not": {"contains": "sorry"}},))
USE = Kind("A named evaluator from this suite's `evaluators:` section.", {"type": "string", "minLength": 1}, {},
           ({"use": "one_word"},))


def _label(verdict: Verdict) -> str:
    return verdict.name or verdict.kind or "check"


def combine(node: Node, children: tuple[Verdict, ...]) -> Verdict:
    """The verdict of a composition from its children's verdicts (before the node's own threshold)."""
    kind = node.kind
    counted = [c for c in children if c.weight > 0]
    errors = [c for c, child in zip(children, node.children, strict=True) if c.error and (c.weight > 0 or child.must)]
    if errors:
        first = errors[0]
        return Verdict(score=0.0, passed=False, error=True, kind=kind, children=children,
                       reason=f"could not judge {_label(first)}: {first.reason}")
    if kind == "not":
        child = children[0]
        passed = not child.passed
        reason = (f"as required, {_label(child)} did not pass ({child.reason})" if passed
                  else f"{_label(child)} passed but must not: {child.reason}")
        return Verdict(score=1.0 - child.score, passed=passed, reason=reason, kind=kind, children=children)
    if not counted:
        return Verdict(score=1.0, passed=True, reason="no counted checks (every weight is 0)", kind=kind,
                       children=children)
    if kind == "all":
        total = sum(c.weight for c in counted)
        score = sum(c.weight * c.score for c in counted) / total
        failed = [c for c in counted if not c.passed]
        ok = len(counted) - len(failed)
        if not failed:
            report_only = len(children) - len(counted)
            reason = f"all {len(counted)} checks passed" + (f" (+{report_only} report-only)" if report_only else "")
        else:
            reason = (f"{ok} of {len(counted)} checks passed (score {score:.2f}); "
                      f"{_label(failed[0])}: {failed[0].reason}")
        return Verdict(score=score, passed=not failed, reason=reason, kind=kind, children=children)
    # any
    best = max(counted, key=lambda c: (c.passed, c.score))
    passed = any(c.passed for c in counted)
    reason = (f"{_label(best)} passed: {best.reason}" if passed
              else f"none of {len(counted)} alternatives passed; best {_label(best)}: {best.reason}")
    return Verdict(score=max(c.score for c in counted), passed=passed, reason=reason, kind=kind, children=children)


def finish(node: Node, result: Verdict, root_threshold: float | None) -> Verdict:
    """Apply the node's own options to its result: threshold, `must` gates of its children, weight, name.

    Args:
        node: The node scored.
        result: What its scorer (leaf) or `combine` (composition) said.
        root_threshold: For the root only: the test's threshold, used when the node has none.
    """
    score = min(1.0, max(0.0, result.score))
    threshold = node.threshold
    effective = threshold if threshold is not None else root_threshold
    passed = result.passed if effective is None else score >= effective
    reason = result.reason
    gated = None
    if node.children and not result.error:
        gated = next((c for c, child in zip(result.children, node.children, strict=True)
                      if child.must and not c.passed), None)
        if gated is not None:
            passed = False
            reason = f"required check {gated.name or gated.kind} failed: {gated.reason}"
    if result.error:
        passed = False
    if (threshold is None and gated is None and passed is result.passed and node.kind == result.kind
            and node.name == result.name and node.weight == result.weight and score == result.score
            and type(score) is type(result.score)):
        return result   # the node adds nothing to its own verdict (the usual leaf): no copy needed
    details: dict[str, Any] = dict(result.details)
    if threshold is not None:
        details["threshold"] = threshold
    return Verdict(score=score, passed=passed, reason=reason, kind=node.kind, name=node.name, weight=node.weight,
                   error=result.error, children=result.children, details=details)
