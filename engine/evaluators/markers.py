"""Evaluator kinds that judge nothing, so that no test passes by having no check.

    none         `eval: {none: true}`: the answers are recorded unscored; the row's `score` and `passed` stay
                 null (never a pass) and analysis leaves the row out of every pass rate
    not_carried  a check another tool had that an importer could not carry over, named in its value: an
                 error verdict (never a pass) until the user replaces it with a real check

A test must have an evaluator (engine.suite.expand refuses one without); `none` is how a suite says on
purpose that a test is only asked, not scored. It stands alone as a test's whole `eval`: inside `all`,
`any` or `not` it would be a check that is neither passed nor failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.errors import EvaluatorConfigError
from engine.evaluators.base import CheckSite, Kind, error, short
from engine.model.answer import Answer
from engine.model.scoring import Scorer, ScoringContext
from engine.model.verdict import Verdict

__all__ = ["NONE", "NOT_CARRIED", "UNSCORED", "is_unscored"]

#: The kind of the `none` evaluator, whose verdict leaves the row unscored.
UNSCORED = "none"
_NONE_REASON = "not scored: this test's eval is {none: true} (its answers are recorded without a verdict)"


def is_unscored(verdict: Verdict) -> bool:
    """The verdict is `none`'s: the row keeps `score` and `passed` null."""
    return verdict.kind == UNSCORED


def none(value: Any, options: Mapping[str, Any]) -> Scorer:
    """`none: true`: a verdict that records the answer and judges nothing."""
    if value is not True:
        raise EvaluatorConfigError(f"none takes `true` (write {{none: true}}), got {short(value)}", kind=UNSCORED)
    unscored = Verdict(score=0.0, passed=False, reason=_NONE_REASON, kind=UNSCORED)

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        return unscored

    return score


def not_carried(value: Any, options: Mapping[str, Any]) -> Scorer:
    """`not_carried: "what"`: an error verdict naming the check that was not carried over."""
    if not isinstance(value, str) or not value.strip():
        raise EvaluatorConfigError("not_carried takes the text of the check that was not carried over, e.g. "
                                   "not_carried: \"javascript: output.length < 100\"", kind="not_carried")
    reason = (f"a check was not carried over: {value}; replace this `not_carried` with an evaluator that does "
              "its job (docs/evaluators.md)")

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        return error(reason, "not_carried")

    return score


def _placeholder(value: Any, spec: Mapping[str, Any], site: CheckSite) -> None:
    """When the suite loads: a placeholder is shown, so it is replaced before anyone reads a pass rate."""
    if isinstance(value, str):
        site.warning(("not_carried",), f"a check was not carried over ({value}): every answer of this test is "
                                       "an error until you replace this `not_carried` with a real evaluator")


NONE = Kind("Records the answers without scoring them: the row's score and passed stay null, never a pass "
            "(the whole eval of a test, never inside all/any/not).", {"const": True}, {}, ({"none": True},),
            build=none)
NOT_CARRIED = Kind("Stands for a check an importer could not carry over (named in the value): an error verdict "
                   "until it is replaced.", {"type": "string", "minLength": 1}, {},
                   ({"not_carried": "javascript: output.length < 100 (promptfoo assert at promptfooconfig.yaml:42)"},),
                   build=not_carried, check=_placeholder)
