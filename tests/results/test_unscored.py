"""No test passes by omission: a test without an evaluator is refused before any call, and `eval: {none: true}`
records answers with `passed` null, counted apart from passes, fails and errors (run table, rows, analysis)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from engine.analysis import analyze, load
from tests.engine_proc import run_engine
from tests.fake_openai import FakeOpenAI, Reply

MODELS = "models:\n  m: {{base_url: '{url}', model: scripted, api_key_env: OPENAI_API_KEY}}\n"
SUITE = """\
suite: s
tests:
  - id: checked
    prompt: Capital of France?
    eval: {contains: Paris}
  - id: haiku
    prompt: Write a haiku.
    eval: {none: true}
"""


def _env() -> dict[str, str]:
    return {**os.environ, "OPENAI_API_KEY": "sk-test-not-a-real-key"}


def test_a_test_without_an_evaluator_is_refused_by_validate_and_run(tmp_path: Path,
                                                                    fake_openai: FakeOpenAI) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE.replace("    eval: {none: true}\n", ""), encoding="utf-8")
    (tmp_path / "models.yaml").write_text(MODELS.format(url=fake_openai.base_url), encoding="utf-8")
    fix = ("this test has no evaluator, so nothing would check its answers; add an `eval:` (docs/evaluators.md), "
           "or write `eval: {none: true}` to record its answers unscored")
    checked = run_engine("validate", str(suite), env=_env())
    assert checked.returncode == 1 and f"{suite}:6:5: error: {fix}" in checked.stderr
    ran = run_engine("run", str(suite), "--models", str(tmp_path / "models.yaml"), "--out", str(tmp_path / "r"),
                     env=_env())
    assert ran.returncode != 0 and f"{suite}:6:5: error: {fix}" in ran.stderr
    assert fake_openai.requests == []     # refused before a single call was paid for


def test_none_records_answers_unscored_never_passed(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="Paris, of course")
    (tmp_path / "s.yaml").write_text(SUITE, encoding="utf-8")
    (tmp_path / "models.yaml").write_text(MODELS.format(url=fake_openai.base_url), encoding="utf-8")
    done = run_engine("run", str(tmp_path / "s.yaml"), "--models", str(tmp_path / "models.yaml"), "--out",
                      str(tmp_path / "r"), env=_env())
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "r" / "latest").set_index("test_id")
    assert rows.loc["checked", "passed"] == True   # noqa: E712 - a numpy bool
    haiku = rows.loc["haiku"]
    assert haiku["answer"] == "Paris, of course"
    assert pd.isna(haiku["passed"]) and pd.isna(haiku["score"]) and pd.isna(haiku["error_kind"])
    [node] = haiku["evaluators"]
    assert node["kind"] == "none" and node["passed"] is None and node["score"] is None
    # The run's table: one pass, no fail, no error, the pass rate over the one scored row; the note says why.
    table = next(line for line in done.stdout.splitlines() if line.startswith("│ m "))
    cells = [c.strip() for c in table.strip("│").split("│")]
    assert cells[1:6] == ["2", "1 of 2", "0", "0", "100.0% of 1 scored"]
    assert "m: 1 of 2 passed, 0 errors, 1 recorded unscored (eval: {none: true})" in done.stdout
    analysis = analyze(load(tmp_path / "r"))
    model = analysis.models.set_index("model").loc["m"]
    assert model["pass_rate"] == 1.0 and model["unscored_rows"] == 1 and model["error_rows"] == 0
