"""The golden self-check: score each test's golden answer with the test's own evaluator.

A golden that fails its own test means the test is broken (a typo in the golden, an evaluator that can
never pass); `engine validate` reports it before anyone pays for a model call.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from engine.errors import Diagnostic
from engine.model import Answer, Suite

__all__ = ["check_goldens"]

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


def check_goldens(suites: list[Suite]) -> list[Diagnostic]:
    """Score `Answer.from_golden(test.golden)` for every test that has a golden and an evaluator.

    Args:
        suites: Loaded suites.

    Returns:
        An error per test whose golden scores below the test's threshold or gets an error verdict.
        Nothing when the evaluators are not installed in this build (the check cannot run).
    """
    try:
        from engine.evaluators import evaluate
    except ImportError:
        return []
    out: list[Diagnostic] = []
    for suite in suites:
        for test in suite.tests:
            if test.golden is None or test.eval is None:
                continue
            column = _column(test.file, test.line)
            try:
                verdict = evaluate(test.eval, Answer.from_golden(test.golden), test)
            except Exception as exc:  # noqa: BLE001 - evaluate() promises not to raise; a bug must not hide the others
                out.append(Diagnostic(test.file, test.line, column, f"test '{test.id}': the golden check crashed: "
                                      f"{type(exc).__name__}: {exc}"))
                continue
            if verdict.error:
                out.append(Diagnostic(test.file, test.line, column, f"test '{test.id}': its evaluator could not "
                                      f"judge the golden answer: {verdict.reason}"))
            elif verdict.score < test.threshold - _EPSILON:
                out.append(Diagnostic(test.file, test.line, column, f"test '{test.id}': the golden answer scores "
                                      f"{verdict.score:.2f}, below the threshold {test.threshold:g}: "
                                      f"{verdict.reason}; fix the golden or the evaluator"))
    return out
