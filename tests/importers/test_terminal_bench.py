"""`engine import terminal-bench` end to end: task folders in Terminal-Bench's format (tests/fixtures/terminal_bench)
imported, validated, and run by `engine run` with the golden model: the solution passes, an untouched workspace
fails, a sabotaged solution is caught (for the server task: a server that does not outlive its command)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from ruamel.yaml import YAML

from tests.run.e2e import engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "terminal_bench"
TASKS = ["fibonacci-server", "hello-world", "log-error-summary"]
SABOTAGE = {   # task -> (text in solution.sh, replacement)
    "hello-world": ('"Hello, world!"', '"Hello world"'),
    "fibonacci-server": ("for _ in $(seq 50)", "kill $!\nfor _ in $(seq 50)"),
    "log-error-summary": (r"\S+ ERROR \[", r"\S+ (?:ERROR|WARNING) \["),
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("tb")
    done = engine("import", "terminal-bench", str(FIXTURES), "-o", str(out))
    assert done.returncode == 0, done.stderr
    return out, done


def test_importable_tasks_are_written_and_the_others_reported_with_the_reason(imported: Any) -> None:
    out, done = imported
    suite = YAML(typ="safe").load((out / "terminal_bench.yaml").read_text())
    assert [t["id"] for t in suite["tests"]] == TASKS
    assert "not importable: needs-apt: " in done.stderr and "RUN is not imported" in done.stderr
    assert "not importable: needs-network: " in done.stderr and "needs the network" in done.stderr
    by_id = {t["id"]: t for t in suite["tests"]}
    assert by_id["log-error-summary"]["workspace"] == {"folder": "workspaces/log-error-summary", "root": "/app",
                                                       "time_limit_s": 120.0, "timeout_s": 120.0}
    assert (out / "workspaces" / "log-error-summary" / "logs" / "app.log").is_file()
    assert not (out / "workspaces" / "log-error-summary" / "tests").exists()   # the tests stay hidden
    assert (out / "checks" / "fibonacci-server" / "tests" / "test_outputs.py").is_file()
    solution = by_id["hello-world"]["golden"][0]["tool_calls"][0]
    assert solution == {"name": "run_command",
                        "arguments": {"command": (FIXTURES / "hello-world" / "solution.sh").read_text()}}


def test_the_imported_suite_validates_golden_passing_and_untouched_failing(imported: Any) -> None:
    out, _ = imported
    done = engine("validate", str(out / "terminal_bench.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 errors" in done.stdout + done.stderr


def _variant(out: Path, name: str, change: Any) -> None:
    yaml = YAML()
    suite = yaml.load((out / "terminal_bench.yaml").read_text())
    suite["suite"] = name
    for test in suite["tests"]:
        change(test)
    with (out / f"{name}.yaml").open("w") as handle:
        yaml.dump(suite, handle)


def _untouched(test: Any) -> None:
    test["golden"] = test["golden"][1:]


def _sabotaged(test: Any) -> None:
    old, new = SABOTAGE[test["id"]]
    call = test["golden"][0]["tool_calls"][0]["arguments"]
    assert old in call["command"]
    call["command"] = call["command"].replace(old, new)


TIMED = """\
suite: timed
tests:
  - id: sleeps-past-its-time-limit
    prompt: Wait.
    workspace: {files: {a.txt: ""}, time_limit_s: 2, timeout_s: 60}
    tools: [run_command, finish]
    eval: {workspace_check: {command: "test -f done.txt"}}
    golden:
      - tool_calls: [{name: run_command, arguments: {command: "sleep 30; touch done.txt"}}]
      - tool_calls: [{name: finish, arguments: {summary: done}}]
"""


@pytest.fixture(scope="module")
def rows(imported: Any, tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    out, _ = imported
    _variant(out, "golden", lambda test: None)
    _variant(out, "untouched", _untouched)
    _variant(out, "sabotaged", _sabotaged)
    (out / "terminal_bench.yaml").unlink()
    (out / "timed.yaml").write_text(TIMED)
    root = tmp_path_factory.mktemp("tb-run")
    (root / "models.yaml").write_text("models:\n  golden:\n    builtin: golden\n")
    done = engine("run", str(out), "--models", str(root / "models.yaml"), "--out", str(root / "results"), "--quiet")
    assert done.returncode in (0, 1), done.stderr
    (run_dir,) = [p for p in (root / "results").iterdir() if p.is_dir() and p.name != "latest"]
    return pd.read_parquet(run_dir).set_index(["suite", "test_id"])


@pytest.mark.parametrize("task", TASKS)
def test_golden_passes_untouched_fails_sabotage_is_caught(rows: pd.DataFrame, task: str) -> None:
    golden, untouched, sabotaged = (rows.loc[(suite, task)] for suite in ("golden", "untouched", "sabotaged"))
    assert bool(golden.passed), golden.evaluators
    assert golden.outcome == "completed"
    assert not bool(untouched.passed) and untouched.outcome == "completed"
    assert not bool(sabotaged.passed), sabotaged.evaluators
    assert "the check failed" in str(sabotaged.evaluators)


def test_the_task_time_limit_ends_the_conversation_as_capped(rows: pd.DataFrame) -> None:
    row = rows.loc[("timed", "sleeps-past-its-time-limit")]
    assert row.outcome == "capped" and row.turns == 1, (row.outcome, row.turns)
    assert not bool(row.passed)   # the command was stopped before it touched done.txt
