"""Workspace tests run end to end: `engine run` subprocesses, a scripted agent on a loopback server, Parquet read.

The scripted model acts on a real workspace through the built-in tools (every command runs in the exec
sandbox); each conversation is one row with its outcome, counts, final file list and diff. The agent that
writes outside its workspace is checked on the file system too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.agent.scripted_server import Turn, latest_tool_results, model_turns
from tests.run.agent_project import scripted_server_thread
from tests.run.e2e import engine

GREET = 'def greet():\n    return "helo"\n'

SUITE = """\
suite: workspace-e2e
tests:
  # docs/agents.md's example, as written
  - id: fix-the-greeting
    prompt: greet.py returns a misspelled greeting. Fix it.
    workspace: workspaces/greet
    tools: [run_command, read_file, write_file, list_files]
    agent: {max_turns: 8}
    eval:
      all:
        - workspace_check:
            command: python3 -c 'import greet; assert greet.greet() == "hello"'
        - no_invented_tools: true
        - failed_commands: {max: 0}
        - tool_status: {all: ok}
        - turns: {equals: 5}
  - id: failing-command
    prompt: "TASK failing: run the tests"
    workspace: workspaces/greet
    tools: [run_command]
    eval: {failed_commands: {max: 0}}
  - id: escape
    prompt: "TASK escape: OUTSIDE"
    workspace: workspaces/greet
    tools: [run_command, read_file, write_file, list_files]
    eval: {tool_status: {none: [refused]}}
  - id: loop
    prompt: "TASK loop: keep going"
    workspace: workspaces/greet
    tools: [{builtin: run_command, name: shell}]
    agent: {max_turns: 3}
    eval: {no_invented_tools: true}
  - id: escalate
    prompt: "TASK escalate: which greeting?"
    workspace: workspaces/greet
    tools: [read_file, ask_human]
    eval: {no_invented_tools: true}
  - id: chatty
    prompt: "TASK chatty: talk only"
    workspace: workspaces/greet
    tools: [list_files, finish]
    agent: {max_prose_turns: 2}
    eval: {no_invented_tools: true}
  - id: finish-partial
    prompt: "TASK finish: write notes"
    workspace: {files: {README.md: "notes go here\\n"}}
    tools: [write_file, finish]
    eval:
      workspace_check: {command: "echo '{\\"score\\": 0.5}'; test -f notes.txt"}
  - id: broken-setup
    prompt: "TASK solve: never asked"
    workspace: {folder: workspaces/greet, setup: "echo setup broke >&2; exit 4"}
    tools: [run_command]
    eval: {no_invented_tools: true}
"""

MODELS = """\
models:
  scripted:
    base_url: {base_url}
    model: scripted-1
    timeout_s: 20
    max_retries: 0
"""


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def agent(messages: list[dict[str, Any]]) -> Turn:
    """The scripted agent: one behaviour per test, read from the prompt."""
    user = next(m["content"] for m in messages if m.get("role") == "user")
    turns, results = model_turns(messages), latest_tool_results(messages)
    if user.startswith("greet.py returns"):
        plan = [Turn(tool_calls=[_call("list_files", path=".")]),
                Turn(tool_calls=[_call("read_file", path="greet.py")]),
                None,
                Turn(tool_calls=[_call("run_command", command="python3 -c 'import greet; print(greet.greet())'")]),
                Turn(content="Fixed: greet() now returns hello.")]
        if turns == 2:
            return Turn(tool_calls=[_call("write_file", path="greet.py", content=results[0].replace("helo", "hello"))])
        return plan[turns] or Turn(content="?")
    task, rest = user.split()[1].rstrip(":"), user.split()[2]
    if task == "failing":
        if turns == 0:
            return Turn(tool_calls=[_call("run_command", command="echo trying; python3 -c 'import sys; sys.exit(3)'")])
        return Turn(content=f"the command failed with {results[0]['exit_code']}")
    if task == "escape":
        outside = rest
        if turns == 0:
            return Turn(tool_calls=[_call("write_file", path="../escaped.txt", content="x"),
                                    _call("write_file", path=f"{outside}/absolute.txt", content="x"),
                                    _call("run_command", command=f"ln -s {outside} link")])
        if turns == 1:
            return Turn(tool_calls=[_call("write_file", path="link/via-symlink.txt", content="x"),
                                    _call("read_file", path="link/secret.txt"),
                                    _call("list_files", path=".."),
                                    _call("read_file", path="greet.py")])
        return Turn(content="done")
    if task == "loop":
        return Turn(tool_calls=[_call("shell", command=f"echo step {turns}")])
    if task == "escalate":
        return Turn(tool_calls=[_call("ask_human", question="Should it say hello or hi?")])
    if task == "chatty":
        return Turn(content="I think the task is fine as it is.")
    if task == "finish":
        if turns == 0:
            return Turn(tool_calls=[_call("write_file", path="notes.txt", content="all done\n")])
        return Turn(tool_calls=[_call("finish", summary="wrote notes.txt")])
    return Turn(content="unexpected")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path, list[dict[str, Any]], Path]:
    root = tmp_path_factory.mktemp("ws-run")
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the engine's secret")
    suites = root / "suites"
    (suites / "workspaces" / "greet").mkdir(parents=True)
    (suites / "workspaces" / "greet" / "greet.py").write_text(GREET)
    (suites / "ws.yaml").write_text(SUITE.replace("OUTSIDE", str(outside)))
    with scripted_server_thread(agent) as server:
        (root / "models.yaml").write_text(MODELS.format(base_url=server.base_url))
        out = root / "results"
        done = engine("run", str(suites), "--models", str(root / "models.yaml"), "--out", str(out), "--quiet",
                      "--concurrency", "4")
        requests = list(server.requests)
    assert done.returncode in (0, 1), done.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "latest"]
    return pd.read_parquet(run_dir).set_index("test_id"), outside, requests, run_dir


COUNTS = ["outcome", "turns", "prose_turns", "tool_calls_made", "failed_commands", "refused_paths", "invented_tools"]


def test_the_greeting_fix_is_solved_and_judged_by_its_hidden_check(results: Any) -> None:
    df, _, requests, _ = results
    row = df.loc["fix-the-greeting"]
    assert row[COUNTS].tolist() == ["completed", 5, 1, 4, 0, 0, 0]
    assert row["passed"] == True, row["evaluators"]  # noqa: E712 - numpy bool
    assert list(row["workspace_files"]) == ["greet.py"]
    assert '-    return "helo"\n+    return "hello"\n' in row["workspace_diff"]
    assert row["workspace_diff"].startswith("--- a/greet.py\n+++ b/greet.py\n")
    events = row["tool_events"]
    assert [e["name"] for e in events] == ["list_files", "read_file", "write_file", "run_command"]
    assert json.loads(events[3]["content"])["stdout"] == "hello\n"     # ran in the workspace, after the fix
    # the hidden check is never offered nor shown to the model
    sent = [r for r in requests if "misspelled" in json.dumps(r["messages"])]
    assert sent and all("assert greet.greet()" not in json.dumps(r) for r in sent)
    assert sorted(t["function"]["name"] for t in sent[0]["tools"]) == ["list_files", "read_file", "run_command",
                                                                       "write_file"]
    assert row["passed"] == True  # noqa: E712 - the hidden check, no failed command, every call ok, 5 turns
    assert [n["kind"] for n in row["evaluators"]][1:] == ["workspace_check", "no_invented_tools", "failed_commands",
                                                          "tool_status", "turns"]


def test_a_failing_command_is_a_result_the_model_reads_and_is_counted(results: Any) -> None:
    row = results[0].loc["failing-command"]
    assert row[COUNTS].tolist() == ["completed", 2, 1, 1, 1, 0, 0]
    event = row["tool_events"][0]
    assert event["status"] == "failed"
    assert json.loads(event["content"]) == {"exit_code": 3, "stdout": "trying\n", "stderr": "", "error": "exit code 3"}
    assert row["answer"] == "the command failed with 3"
    assert row["passed"] == False  # noqa: E712 - numpy's bool
    assert row["evaluators"][0]["reason"] == "1 failed command(s), at most 0 expected: run_command (turn 1)"
    assert row["workspace_diff"] == "" and list(row["workspace_files"]) == ["greet.py"]


def test_writes_outside_the_workspace_are_refused_counted_and_nothing_is_written(results: Any) -> None:
    df, outside, _, _ = results
    row = df.loc["escape"]
    assert row[COUNTS].tolist() == ["completed", 3, 1, 7, 0, 5, 0]
    statuses = [(e["name"], e["status"]) for e in row["tool_events"]]
    assert statuses == [("write_file", "refused"), ("write_file", "refused"), ("run_command", "ok"),
                        ("write_file", "refused"), ("read_file", "refused"), ("list_files", "refused"),
                        ("read_file", "ok")]
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]      # nothing written outside
    assert all("the engine's secret" not in m["content"] for m in row["transcript"] if m["content"])
    assert list(row["workspace_files"]) == ["greet.py", "link"]            # the symlink itself is the only change
    assert "refused" in row["tool_events"][0]["content"]
    assert row["passed"] == False  # noqa: E712
    assert row["evaluators"][0]["reason"].startswith("5 of 7 tool call(s) refused: write_file (turn 1) refused, ")


def test_a_model_that_never_stops_is_capped_and_a_renamed_tool_works(results: Any) -> None:
    row = results[0].loc["loop"]
    assert row[COUNTS].tolist() == ["capped", 3, 0, 3, 0, 0, 0]
    assert [json.loads(e["content"])["stdout"] for e in row["tool_events"]] == ["step 0\n", "step 1\n", "step 2\n"]


def test_ask_human_ends_the_run_as_escalated(results: Any) -> None:
    row = results[0].loc["escalate"]
    assert row[COUNTS].tolist() == ["escalated", 1, 0, 1, 0, 0, 0]


def test_prose_turns_in_a_row_while_finish_is_offered_are_stuck(results: Any) -> None:
    row = results[0].loc["chatty"]
    assert row[COUNTS].tolist() == ["stuck", 2, 2, 0, 0, 0, 0]
    reminders = [m["content"] for m in row["transcript"] if m["role"] == "user"][1:]
    assert reminders == ["You did not call a tool. Go on with the task using the tools, and call finish when it "
                         "is done."]


def test_finish_completes_and_a_score_line_gives_partial_credit(results: Any) -> None:
    row = results[0].loc["finish-partial"]
    assert row[COUNTS].tolist() == ["completed", 2, 0, 2, 0, 0, 0]
    assert (row["score"], row["passed"]) == (0.5, False)
    assert list(row["workspace_files"]) == ["README.md", "notes.txt"]
    assert row["workspace_diff"] == "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+all done\n"


def test_a_failing_setup_is_an_error_row_and_the_model_is_never_called(results: Any) -> None:
    df, _, requests, _ = results
    row = df.loc["broken-setup"]
    assert (row["outcome"], row["error_kind"], row["turns"]) == ("error", "workspace_setup", 0)
    assert pd.isna(row["passed"])
    assert "exit code 4" in row["error_message"] and "setup broke" in row["error_message"]
    assert not any("never asked" in json.dumps(r["messages"]) for r in requests)


def test_engine_report_shows_the_workspace_diff_and_counts(results: Any, tmp_path: Path) -> None:
    run_dir = results[3]
    html = tmp_path / "report.html"
    done = engine("report", str(run_dir), "-o", str(html))
    assert done.returncode == 0, done.stderr
    page = html.read_text()
    assert "--- a/greet.py" in page and '"refused_paths": 5' in page and "workspace diff" in page


def test_engine_analyze_counts_every_workspace_outcome(results: Any) -> None:
    """The Agents table counts escalated and failed in their own columns, not as 'other'."""
    from engine.analysis import load
    from engine.analysis.summary import analyze

    df, _, _, run_dir = results
    table = analyze(load(run_dir)).agents
    assert table is not None
    [figures] = table.to_dict(orient="records")
    outcomes = df["outcome"].value_counts().to_dict()
    assert figures["escalated"] == outcomes.get("escalated", 0) == 1
    assert figures["stuck"] == outcomes.get("stuck", 0) >= 1
    assert figures["other_outcome"] == 0
    assert sum(figures[k] for k in ("completed", "escalated", "capped", "stuck", "failed", "error")) == len(df)
