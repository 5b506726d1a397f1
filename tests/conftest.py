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


@pytest.fixture(autouse=True)
def _own_caches(tmp_path_factory, monkeypatch):
    """Each test its own response, judge and remote-results caches, never the user's ~/.cache ones.

    Also what makes the suite safe to run in parallel (`make test` runs pytest-xdist): two tests in two
    workers never share a cache file. A test that names its own cache (env= of a subprocess) still wins.
    """
    caches = tmp_path_factory.mktemp("caches")
    monkeypatch.setenv("ENGINE_RESPONSE_CACHE", str(caches / "responses.sqlite"))
    monkeypatch.setenv("ENGINE_JUDGE_CACHE", str(caches / "judge.sqlite"))
    monkeypatch.setenv("ENGINE_REMOTE_CACHE", str(caches / "remote"))
