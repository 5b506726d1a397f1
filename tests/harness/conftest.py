"""The `sandbox_results` fixture: every RunResult the exec evaluator gets (the real sandbox, observed)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.harness import oneshot


@pytest.fixture
def sandbox_results(monkeypatch: pytest.MonkeyPatch) -> list[oneshot.RunResult]:
    """Every RunResult the exec evaluator gets during the test (the real sandbox, observed)."""
    seen: list[oneshot.RunResult] = []
    real_run = oneshot.run

    def spy(*args: Any, **kwargs: Any) -> oneshot.RunResult:
        result = real_run(*args, **kwargs)
        seen.append(result)
        return result

    monkeypatch.setattr(oneshot, "run", spy)
    return seen
