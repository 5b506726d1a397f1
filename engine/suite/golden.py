"""The golden self-check: score each test's golden answer with the test's own evaluator.

A golden that fails its own test means the test is broken (a typo in the golden, an evaluator that can
never pass); `engine validate` reports it before anyone pays for a model call. It calls the scoring
function the run calls and reads `Verdict.passed`, so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from engine.errors import Diagnostic
from engine.evaluators.markers import UNSCORED
from engine.evaluators.record import RUN_ONLY
from engine.model.answer import Answer
from engine.model.test import Test
from engine.model.verdict import Verdict

__all__ = ["ConversationCheck", "GoldenCheck"]

_EPSILON = 1e-9


@lru_cache(maxsize=64)
def _lines(file: str) -> tuple[str, ...]:
    try:
        return tuple(Path(file).read_text(encoding="utf-8-sig").splitlines())
    except (OSError, UnicodeDecodeError):
        return ()


def _column(file: str, line: int) -> int:
    """The column where the test's first key starts on its line (after `- `)."""
    lines = _lines(file)
    if not 0 < line <= len(lines):
        return 1
    text = lines[line - 1]
    stripped = text.lstrip()
    col = len(text) - len(stripped) + 1
    return col + 2 if stripped.startswith("- ") else col


# Scores an agent test's golden conversation: replays it through the agent loop with the declared tool
# results and scores the transcript as the run would (engine.agent.golden.score_golden_conversation).
# The agent loop sits above the suite layer, so the caller hands it in.
ConversationCheck = Callable[[Test], Verdict | None]   # None: this golden is not replayed (left unchecked)


class GoldenCheck:
    """The golden self-check of one suite, test by test as the loader expands them (no test is read twice).

    `see(test)` scores `Answer.from_golden(test.golden)` for a test that has a golden and an evaluator;
    `diagnostics()` is then the suite's warning about checks no golden can judge, and an error per test whose
    golden does not pass (`Verdict.passed`: the root's own threshold, else the test's; `must` gates) or gets an
    error verdict. Tests whose tree holds a model-graded evaluator (`judge`) are left out: grading calls a model.

    Args:
        score: The run's scoring function (`engine.evaluators.score`), handed in by the loader.
        conversation: Scores an agent test's golden conversation; None leaves agent goldens unchecked.
    """

    def __init__(self, score: Callable[[Test, Answer], Verdict], conversation: ConversationCheck | None = None) -> None:
        self._score = score
        self._conversation = conversation
        self._checked: set[tuple[str, int | None]] = set()   # a test's variants share its golden and evaluator
        self._run_only = _RunOnly()
        self._problems: list[Diagnostic] = []

    def see(self, test: Test) -> None:
        """Check `test`'s golden (a problem is kept for `diagnostics`)."""
        self._run_only.see(test)
        if test.golden is None or test.eval is None or (test.evaluator is not None
                                                        and test.evaluator.kind == UNSCORED):
            return   # no golden, or nothing to check it by (`none: true` records answers unscored)
        if test.variant is not None:
            if (test.id, test.case_index) in self._checked:
                return
            self._checked.add((test.id, test.case_index))
        conversation = self._conversation
        if test.agent is not None and conversation is None:
            return
        if test.evaluator is not None and test.evaluator.is_async:
            # A model-graded tree (`judge`) cannot grade the golden without calling a model; validate
            # calls none (checking judges against labels is an opt-in command of its own).
            return
        try:
            if test.agent is not None and conversation is not None:
                # An agent test's golden is a conversation: replayed through the loop, not one answer.
                replayed = conversation(test)
                if replayed is None:
                    return   # this golden is not replayed (left unchecked)
                verdict = replayed
            else:
                verdict = self._score(test, Answer.from_golden(test.golden))
        except Exception as exc:  # noqa: BLE001 - score() promises not to raise; a bug must not hide the others
            self._problems.append(_problem(test, f"the golden check crashed: {type(exc).__name__}: {exc}"))
            return
        if verdict.error:
            self._problems.append(_problem(test, f"its evaluator could not judge the golden answer: {verdict.reason}"))
        elif not verdict.passed:
            self._problems.append(_problem(test, _why(test, verdict)))

    def diagnostics(self) -> list[Diagnostic]:
        """What the tests seen so far found: the run-only warning first, then each failing golden."""
        return self._run_only.warning() + self._problems


class _RunOnly:
    """The checks of a suite no golden can judge (they read what a run records), seen test by test: one warning
    per suite names them; the golden check scores them as neutral, the run scores them."""

    def __init__(self) -> None:
        self.kinds: dict[str, None] = {}
        self.first: Test | None = None

    def see(self, test: Test) -> None:
        if test.evaluator is None or test.golden is None:
            return
        found = [node.kind for _, node in test.evaluator.walk() if node.kind in RUN_ONLY]
        if found:
            self.first = self.first or test
            self.kinds.update(dict.fromkeys(found))

    def warning(self) -> list[Diagnostic]:
        first = self.first
        if first is None:
            return []
        names = ", ".join(f"`{kind}`" for kind in self.kinds)
        return [Diagnostic(first.file, first.line, _column(first.file, first.line),
                           f"{names} cannot be checked without a run (they read what the run records: served model, "
                           "finish reason, usage, times, cost); the goldens are checked without them, the run "
                           "scores them", severity="warning")]


def _problem(test: Test, message: str) -> Diagnostic:
    if test.case_origin is not None:   # a `cases_from` row: point at its golden cell
        return test.case_origin.diagnostic(f"test '{test.id}' (defined at {test.file}:{test.line}): {message}",
                                           test.case_origin.golden_col)
    return Diagnostic(test.file, test.line, _column(test.file, test.line), f"test '{test.id}': {message}")


def _why(test: Test, verdict: Verdict) -> str:
    root = test.evaluator
    threshold = root.threshold if root is not None and root.threshold is not None else test.threshold
    if verdict.score < threshold - _EPSILON:
        return (f"the golden answer scores {verdict.score:.2f}, below the threshold {threshold:g}: "
                f"{verdict.reason}; fix the golden or the evaluator")
    return (f"the golden answer scores {verdict.score:.2f} but fails: {verdict.reason}; "
            "fix the golden or the evaluator")
