"""`engine import terminal-bench` end to end: task folders in Terminal-Bench's format (tests/fixtures/terminal_bench)
imported, validated, and run by `engine run` with the golden model: the solution passes, an untouched workspace
fails, a sabotaged solution is caught (for the server task: a server that does not outlive its command), a
pytest config file planted in the workspace decides nothing, and a task whose symbolic links lead out of it is
refused."""

from __future__ import annotations

import copy
import os
import shutil
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
    assert by_id["log-error-summary"]["eval"] == {"workspace_check": {
        "pytest": "tests/test_outputs.py", "env": {"TEST_DIR": "/app/tests"},
        "files": {"tests": "checks/log-error-summary/tests"}, "timeout_s": 30.0}}
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
    assert golden.isolation.startswith("bwrap+")   # `root: /app` runs under bubblewrap (the wheel's on a bare machine)
    assert not bool(untouched.passed) and untouched.outcome == "completed"
    assert not bool(sabotaged.passed), sabotaged.evaluators
    assert "the check failed" in str(sabotaged.evaluators)


def test_the_task_time_limit_ends_the_conversation_as_capped(rows: pd.DataFrame) -> None:
    row = rows.loc[("timed", "sleeps-past-its-time-limit")]
    assert row.outcome == "capped" and row.turns == 1, (row.outcome, row.turns)
    assert not bool(row.passed)   # the command was stopped before it touched done.txt


# What a model that does not solve `hello-world` may write into /app instead, so that pytest collects or runs
# nothing ("collected 0 items" and "N deselected" exit 0 under a plain `python3 -m pytest`).
PLANTS = {
    "pytest-ini": ("pytest.ini", "[pytest]\naddopts = --co\n"),
    "pyproject-toml": ("pyproject.toml", "[tool.pytest.ini_options]\naddopts = \"--co\"\n"),
    "tox-ini": ("tox.ini", "[pytest]\naddopts = --co\n"),
    "setup-cfg": ("setup.cfg", "[tool:pytest]\naddopts = --co\n"),
    "ini-k-nothing": ("pytest.ini", "[pytest]\naddopts = -k nothing\n"),
    "ini-no-python": ("pytest.ini", "[pytest]\naddopts = -p no:python\n"),
    "conftest": ("conftest.py", "def pytest_collection_modifyitems(items):\n    items.clear()\n"),
}


def test_a_planted_pytest_config_decides_nothing(tmp_path: Path) -> None:
    out = tmp_path / "imported"
    done = engine("import", "terminal-bench", str(FIXTURES / "hello-world"), "-o", str(out))
    assert done.returncode == 0, done.stderr
    suite = YAML(typ="safe").load((out / "terminal_bench.yaml").read_text())
    (hello,) = [t for t in suite["tests"] if t["id"] == "hello-world"]
    tests = []
    for name, (path, text) in {**PLANTS, "honest": ("hello.txt", "Hello, world!\n")}.items():
        test = copy.deepcopy(hello)
        test["id"] = name
        test["golden"] = [{"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": text}}]},
                          {"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]}]
        tests.append(test)
    suites = tmp_path / "suites"
    shutil.copytree(out / "checks", suites / "checks")
    yaml = YAML()
    with (suites / "plants.yaml").open("w") as handle:
        yaml.dump({"suite": "plants", "tests": tests}, handle)
    (tmp_path / "models.yaml").write_text("models:\n  golden:\n    builtin: golden\n")
    done = engine("run", str(suites), "--models", str(tmp_path / "models.yaml"), "--out", str(tmp_path / "results"),
                  "--quiet")
    assert done.returncode in (0, 1), done.stderr
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir() and p.name != "latest"]
    rows = pd.read_parquet(run_dir).set_index("test_id")
    assert sorted(rows.index) == sorted([*PLANTS, "honest"])
    for name in PLANTS:
        (check,) = [n for n in rows.loc[name, "evaluators"] if n["kind"] == "workspace_check"]
        assert not bool(rows.loc[name, "passed"]) and not check["error"], (name, check["reason"])
        assert "the check failed: 2 failed of 2 tests: tests.test_outputs.test_hello_file_exists" in check["reason"]
    assert bool(rows.loc["honest", "passed"]), rows.loc["honest", "evaluators"]


def _task_with(tmp_path: Path, name: str, change: Any) -> Path:
    tasks = tmp_path / "tasks"
    shutil.copytree(FIXTURES / "log-error-summary", tasks / name)
    change(tasks / name)
    return tasks


@pytest.mark.parametrize("where", ["tests/expected.txt", "solution.sh", "copied-folder", "task-folder"])
def test_a_task_whose_links_lead_out_is_refused_naming_the_file_the_link_and_its_target(where: str,
                                                                                         tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the secret\n")

    def plant(task: Path) -> None:
        if where == "solution.sh":
            (task / "solution.sh").unlink()
            (task / "solution.sh").symlink_to(outside / "secret.txt")
        elif where == "copied-folder":   # logs/ is what the Dockerfile copies: a link inside it
            (task / "app.log").unlink()
            (task / "app.log").mkdir()
            (task / "app.log" / "leak.txt").symlink_to(Path("..", "..", "..", "outside", "secret.txt"))
            (task / "Dockerfile").write_text((task / "Dockerfile").read_text().replace(
                "COPY app.log /app/logs/app.log", "COPY app.log /app/logs/"))
        else:
            (task / "tests" / "expected.txt").symlink_to(Path("..", "..", "..", "outside", "secret.txt"))

    if where == "task-folder":
        tasks = tmp_path / "tasks"
        tasks.mkdir()
        shutil.copytree(FIXTURES / "log-error-summary", outside / "elsewhere")
        os.symlink(outside / "elsewhere", tasks / "linked")
        link, task = tasks / "linked", "linked"
    else:
        tasks = _task_with(tmp_path, "leaky", plant)
        link, task = {"solution.sh": tasks / "leaky" / "solution.sh",
                      "copied-folder": tasks / "leaky" / "app.log" / "leak.txt"}.get(
            where, tasks / "leaky" / "tests" / "expected.txt"), "leaky"
    shutil.copytree(FIXTURES / "hello-world", tasks / "hello-world")
    out = tmp_path / "out"
    done = engine("import", "terminal-bench", str(tasks), "-o", str(out))
    assert done.returncode == 0, done.stderr
    suite = YAML(typ="safe").load((out / "terminal_bench.yaml").read_text())
    assert [t["id"] for t in suite["tests"]] == ["hello-world"]
    assert f"not importable: {task}: {link}: a symbolic link to " in done.stderr, done.stderr
    assert "the secret" not in (out / "terminal_bench.yaml").read_text()
    assert not any("the secret" in p.read_text() for p in out.rglob("*") if p.is_file() and not p.is_symlink())


def test_links_inside_the_task_are_imported_and_stay_links_in_a_copied_folder(tmp_path: Path) -> None:
    def plant(task: Path) -> None:
        (task / "logs").mkdir()
        (task / "app.log").rename(task / "logs" / "app.log")
        (task / "logs" / "latest.log").symlink_to("app.log")
        (task / "Dockerfile").write_text((task / "Dockerfile").read_text().replace(
            "COPY app.log /app/logs/app.log", "COPY logs /app/logs"))

    tasks = _task_with(tmp_path, "linked-inside", plant)
    out = tmp_path / "out"
    done = engine("import", "terminal-bench", str(tasks), "-o", str(out))
    assert done.returncode == 0 and "not importable" not in done.stderr, done.stderr
    seed = out / "workspaces" / "linked-inside" / "logs"
    assert os.readlink(seed / "latest.log") == "app.log"
    assert (seed / "latest.log").read_text().startswith("2025-01-02T10:00:01 INFO")
