"""`engine rescore` of workspace rows: copied as they were, said to be not rescorable, never a changed verdict."""

from __future__ import annotations

import json
from pathlib import Path

from builders import row, write_run

from engine.analysis import load
from tests.engine_proc import run_engine

# Both tests' evaluators now pass the stored answer "done": a rescored row would flip from fail to pass.
SUITE = """\
suite: ws
tests:
  - id: fix-greeting
    prompt: "Fix greet.py so that it prints hello."
    workspace: {files: {greet.py: "print('helo')"}}
    tools: [run_command, write_file, finish]
    eval: {contains: done}
  - id: plain
    prompt: "Say done."
    eval: {contains: done}
"""


def test_workspace_rows_are_not_rescored_nor_counted_as_changed(tmp_path: Path) -> None:
    rows = [row(model=model, suite="ws", test_id=test_id, answer="done", score=0.0, passed=False, run_id="run-1",
                outcome="completed" if test_id == "fix-greeting" else None)
            for model in ("a", "b") for test_id in ("fix-greeting", "plain")]
    write_run(tmp_path / "results" / "run-1", rows)
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "ws.yaml").write_text(SUITE)

    done = run_engine("rescore", tmp_path / "results" / "run-1", "--suites", suites)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "2 workspace test row(s) not rescorable: the workspace is gone" in said
    assert "rescored 2 rows" in said
    new_run = next(p for p in (tmp_path / "results").iterdir() if p.name != "run-1")
    manifest = json.loads((new_run / "_manifest.json").read_text())
    assert manifest["flipped"] == 2 and manifest["rescored"] == 2 and manifest["unchanged"] == 2
    new = load(new_run).set_index(["model", "test_id"])
    for model in ("a", "b"):
        assert new.loc[(model, "plain"), "passed"]                 # rescored: now passes
        assert not new.loc[(model, "fix-greeting"), "passed"]      # workspace: its stored verdict kept
        assert new.loc[(model, "fix-greeting"), "score"] == 0.0
    assert "2 verdicts changed" in said
