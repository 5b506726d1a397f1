"""The viewer's snapshot written when a large run ends (`engine run`, its `--retry-errors`, `engine rescore`), so
its first `engine view` reads aggregates instead of analysing the rows; rewritten whenever the rows change, left
valid by a label, and not written at a small run's end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engine.cli import view_cmd
from engine.cli.app import app
from engine.view import cache
from engine.view.server import dumps
from engine.view.store import Store
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import write_project

CAPITALS = {"France": "Paris", "Italy": "Rome", "Spain": "Madrid"}


def _answer(body: dict[str, Any]) -> str:
    prompt = body["messages"][-1]["content"]
    return next(f"It is {capital}." for country, capital in CAPITALS.items() if country in prompt)


def _engine(*args: Any) -> Any:
    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return result


def _pages(root: Path, run: str) -> dict[str, Any]:
    store = Store(root)
    view = store.run(run)
    return json.loads(dumps({"runs": store.runs(), "summary": view.summary(), "grid": view.grid(limit=50),
                             "failed": view.grid(failed=True, tag=None, limit=50)}))


def _from_snapshot(root: Path, run: str) -> dict[str, Any]:
    """The pages as a new viewer shows them, failing if it had to analyse the rows (no snapshot for them)."""
    def no_analysis(*_: Any) -> Any:
        raise AssertionError("the viewer analysed the rows: no snapshot for them beside the run")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cache, "compute", no_analysis)
        return _pages(root, run)


def _analysed(root: Path, run: str) -> dict[str, Any]:
    """The pages analysed from the rows (the snapshot moved aside, then put back)."""
    folder = root / run / cache.CACHE_DIR
    aside = root.parent / "aside"
    folder.rename(aside)
    try:
        return _pages(root, run)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        aside.rename(folder)


@pytest.fixture()
def setup(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENGINE_TEST_KEY", "sk-test")
    write_project(tmp_path, fake_openai.base_url)   # suites/capitals.yaml (3 tests), models fast and other
    return tmp_path


def _run(tmp_path: Path, *extra: Any) -> Any:
    return _engine("run", tmp_path / "suites", "--models", tmp_path / "models.yaml", "--out", tmp_path / "results",
                   "--no-cache", "--quiet", *extra)


def test_a_large_run_leaves_its_snapshot_and_every_change_of_its_rows_rewrites_it(
        setup: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(view_cmd, "PREPARED_FROM_ROWS", 1)   # these six rows stand for a large run
    failing = {"other-1"}
    fake_openai.responder = lambda body: (Reply(fault="http_400") if body["model"] in failing
                                          else Reply(content=_answer(body)))
    results = setup / "results"
    ran = _run(setup, "--run-id", "first")
    run = results / "first"
    assert "preparing engine view's summary" not in ran.output   # --quiet
    first = _from_snapshot(results, "first")
    assert first == _analysed(results, "first") and first["runs"][0]["errors"] == 3

    # --retry-errors changes rows: the run's end writes the snapshot of the rows as they are now.
    failing.clear()
    _run(setup, "--resume", run, "--retry-errors")
    after = _from_snapshot(results, "first")
    assert after == _analysed(results, "first")
    assert (after["runs"][0]["rows"], after["runs"][0]["errors"]) == (6, 0)

    # A rescore writes a new run folder, and its snapshot with it: the rescored verdicts, not the old ones.
    suite = setup / "suites" / "capitals.yaml"
    suite.write_text(suite.read_text(encoding="utf-8").replace("{contains: Paris}", "{contains: Lyon}"),
                     encoding="utf-8")
    rescored = _engine("rescore", run, "--suites", setup / "suites")
    assert "preparing engine view's summary of 6 rows" in rescored.output
    (again,) = [p.name for p in results.iterdir() if "rescore" in p.name]
    pages = _from_snapshot(results, again)
    assert pages == _analysed(results, again)
    france = [row for row in pages["grid"]["rows"] if row["test_id"] == "france"]
    assert france and all(cell["passed"] == 0 and cell["scored"] == 1 for cell in france[0]["cells"]), france


def test_a_small_run_leaves_none_and_a_label_keeps_the_snapshot(setup: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content=_answer(body))
    _run(setup, "--run-id", "small")
    run = setup / "results" / "small"
    assert not (run / cache.CACHE_DIR).exists()   # six rows: its first viewer analyses them at once
    before = _pages(setup / "results", "small")
    assert (run / cache.CACHE_DIR).is_dir()
    # A label is not a row: the snapshot stays valid and the label is shown beside the attempt.
    view = Store(setup / "results").run("small")
    (attempt,) = [a for a in view.attempts("capitals", "france", -1)["attempts"] if a["model"] == "fast"]
    view.add_label({"model": "fast", "suite": "capitals", "test_id": "france", "case_index": None, "attempt": 0,
                    "test_hash": attempt["test_hash"], "label": "wrong", "reviewer": "ana"})
    assert _from_snapshot(setup / "results", "small") == before
    shown = Store(setup / "results").run("small").attempts("capitals", "france", -1)["attempts"]
    assert [a["review"]["label"] for a in shown if a["model"] == "fast"] == ["wrong"]
