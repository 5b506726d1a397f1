"""Shared test configuration: paths every test area uses."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Beside the checkout (/work/main -> /work/shared), or two levels up from a worktree (/work/wt/NAME).
SHARED_DATA = next((p for p in (ROOT.parent / "shared" / "data", ROOT.parent.parent / "shared" / "data")
                    if p.exists()), ROOT.parent / "shared" / "data")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"public data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def fake_openai():
    """A fake OpenAI-compatible server on loopback (tests/fake_openai.py), fresh per test."""
    from tests.fake_openai import FakeOpenAI

    server = FakeOpenAI().start()
    yield server
    server.stop()
