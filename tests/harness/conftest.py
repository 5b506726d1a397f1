"""The `sandbox_results` fixture: every RunResult the exec evaluator gets (the real sandbox, observed)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.harness import sandbox


@pytest.fixture
def sandbox_results(monkeypatch: pytest.MonkeyPatch) -> list[sandbox.RunResult]:
    """Every RunResult the exec evaluator gets during the test (the real sandbox, observed)."""
    seen: list[sandbox.RunResult] = []
    real_run = sandbox.run

    def spy(*args: Any, **kwargs: Any) -> sandbox.RunResult:
        result = real_run(*args, **kwargs)
        seen.append(result)
        return result

    monkeypatch.setattr(sandbox, "run", spy)
    return seen
