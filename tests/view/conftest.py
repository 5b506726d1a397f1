"""Fixtures of the `engine view` tests: real runs (tests/view/viewrun.py) and a live server over a copy."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.view.viewrun import ViewServer, make_run


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run (`other` fails Spain and the weather)."""
    return make_run(tmp_path_factory.mktemp("view"))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs in one folder: in the second, `other` answers Spain right (a fail→pass flip)."""
    folder = tmp_path_factory.mktemp("view2")
    make_run(folder)
    # Run ids name the second a run started: start the second run in a later second, so that the two sort in
    # the order they ran (two runs started in one second sort by their random suffix).
    time.sleep(1.05 - time.time() % 1)
    return make_run(folder, fixed=True)


@pytest.fixture()
def results_copy(results: Path, tmp_path: Path) -> Path:
    """A copy of the run a test may write labels into."""
    target = tmp_path / "results"
    shutil.copytree(results, target, symlinks=True)
    return target


@pytest.fixture()
def view_server(results_copy: Path) -> Iterator[ViewServer]:
    server = ViewServer(results_copy, "--reviewer", "tester")
    yield server
    server.stop()
