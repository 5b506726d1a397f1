"""A test whose failing rows a fallback model served is not classed on the rows left: `engine run` against a server
that answers one `no_fallback` test from another model, then `engine analyze` (in memory and in DuckDB) and
`--saturated-since` read the real Parquet. Without the rule the test reads "saturated: drop it"."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine

SUITE = """\
suite: gate
tests:
  - id: served-as-asked
    prompt: "Say ok. (the no_fallback test)"
    eval: {all: [{contains: ok}, {no_fallback: true}]}
""" + "".join(f"""  - id: easy-{i}
    prompt: "Say ok, number {i}."
    eval: {{contains: ok}}
""" for i in range(4))

MODELS = """\
models:
  routed:
    base_url: {base_url}
    model: claude-3-5-sonnet-latest
    timeout_s: 10
  direct:
    base_url: {base_url}
    model: gemini-2.0-flash
    timeout_s: 10
"""


def respond(body: dict[str, Any]) -> Reply:
    """`routed`'s no_fallback test is answered by another model; everything else by the model asked (as its
    providers name a pinned version: neither is a fallback)."""
    text = str(body["messages"][-1]["content"])
    if body["model"] == "claude-3-5-sonnet-latest":
        return Reply(content="ok", model="claude-3-5-haiku-20241022" if "no_fallback" in text
                     else "claude-3-5-sonnet-20241022")
    return Reply(content="ok", model="gemini-2.0-flash-001")


@pytest.fixture()
def run(tmp_path: Path, fake_openai: FakeOpenAI) -> Path:
    fake_openai.responder = respond
    (tmp_path / "gate.yaml").write_text(SUITE)
    (tmp_path / "models.yaml").write_text(MODELS.format(base_url=fake_openai.base_url))
    done = engine("run", str(tmp_path / "gate.yaml"), "--models", str(tmp_path / "models.yaml"), "--out",
                  str(tmp_path / "results"), "--quiet")
    assert done.returncode in (0, 1), done.stderr
    return tmp_path / "results" / "latest"


def _statuses(run: Path, *args: str) -> dict[str, tuple[str, str]]:
    done = engine("analyze", str(run), "--format", "csv", "--table", "tests", *args)
    assert done.returncode == 0, done.stderr
    return {r["test_id"]: (r["status"], r["reason"]) for r in csv.DictReader(io.StringIO(done.stdout))}


def test_a_test_whose_failing_row_was_a_fallback_is_not_classed(run: Path) -> None:
    for engine_path in ("pandas", "duckdb"):
        statuses = _statuses(run, "--engine", engine_path)
        status, reason = statuses["served-as-asked"]
        assert status == "fallback-left-out", (engine_path, statuses)
        assert reason.startswith("not classed: 1 failing row of this test was served by a fallback model and left "
                                 "out, so the rows left (mean pass rate 1.00) are not how the test went"), reason
        # the pinned versions and the -latest alias are not fallbacks: the other tests keep their class
        assert {statuses[f"easy-{i}"][0] for i in range(4)} == {"saturated"}, engine_path
    # With the fallback rows kept, the test is classed on every row.
    assert _statuses(run, "--include-fallback")["served-as-asked"][0] == "uninformative"
    shown = engine("analyze", str(run))
    assert shown.returncode == 0, shown.stderr
    saturated = shown.stdout.split("Saturated tests", 1)[1].split("Not classed:", 1)[0]
    assert "served-as-asked" not in saturated and "gate/easy-0" in saturated
    assert "Not classed: failing rows were served by a fallback model and left out" in shown.stdout
    assert ("1 test with failing rows among them is not classed (status fallback-left-out)"
            in " ".join(shown.stdout.split()))


def test_saturated_since_does_not_list_it(run: Path) -> None:
    done = engine("analyze", str(run), "--saturated-since", "2000-01-01")
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split("Saturated in every run since", 1)[1]
    assert "gate/easy-0" in listed and "served-as-asked" not in listed


def test_the_viewer_offers_its_class_and_filters_by_it(run: Path) -> None:
    from engine.view.store import Store

    store = Store(run.parent)
    shown = store.run(store.names()[0])
    assert "fallback-left-out" in shown.summary()["classes"]
    page = shown.grid(klass="fallback-left-out")
    assert [(r["test_id"], r["status"]) for r in page["rows"]] == [("served-as-asked", "fallback-left-out")]
    assert page["rows"][0]["reason"].startswith("not classed: 1 failing row")
    assert {r["test_id"] for r in shown.grid(klass="saturated")["rows"]} == {f"easy-{i}" for i in range(4)}
