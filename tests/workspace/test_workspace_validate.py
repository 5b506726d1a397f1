"""`engine validate` on workspace tests: load-time errors at FILE:LINE:COL, and the golden trajectory self-check
(replayed in a fresh workspace with no model: the check must pass after it and fail on the untouched seed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.agent.golden import score_golden_conversation
from engine.model.workspace import WorkspaceSpec
from engine.suite.loader import load_suites
from engine.workspace.workspace import DIFF_CHARS, FILE_DIFF_CHARS, Workspace
from tests.run.e2e import engine

HEAD = """\
suite: ws-validate
tests:
"""

GOOD = """\
  - id: fix
    prompt: Fix greet.py.
    workspace: workspaces/greet
    tools: [run_command, read_file, write_file, list_files]
    eval:
      all:
        - workspace_check:
            command: python3 -c 'import sys; sys.path.append("."); import greet; assert greet.greet() == "hello"'
        - no_invented_tools: true
    golden:
      - tool_calls: [{name: read_file, arguments: {path: greet.py}}]
      - tool_calls: [{name: run_command, arguments: {command: "sed -i s/helo/hello/ greet.py"}}]
      - Fixed.
"""


def _project(tmp_path: Path, tests: str) -> Path:
    folder = tmp_path / "workspaces" / "greet"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "greet.py").write_text('def greet():\n    return "helo"\n')
    path = tmp_path / "suite.yaml"
    path.write_text(HEAD + tests)
    return path


def _messages(path: Path) -> list[str]:
    _, diagnostics = load_suites([path], golden_check=True, conversation_check=score_golden_conversation)
    return [f"{d.line}:{d.col}: {d.message}" for d in diagnostics if d.severity == "error"]


def test_a_good_golden_trajectory_passes_the_self_check(tmp_path: Path) -> None:
    assert _messages(_project(tmp_path, GOOD)) == []


def test_a_golden_that_does_not_solve_the_task_is_reported(tmp_path: Path) -> None:
    path = _project(tmp_path, GOOD.replace("s/helo/hello/", "s/helo/hullo/"))
    [message] = _messages(path)
    assert message.startswith("3:5: test 'fix': the golden answer scores 0.50"), message
    assert "workspace_check: the check failed: exit code 1" in message


def test_a_check_that_passes_before_any_work_is_a_broken_test(tmp_path: Path) -> None:
    path = _project(tmp_path, GOOD.replace('assert greet.greet() == "hello"', "import greet"))
    [message] = _messages(path)
    assert message.startswith("3:5: test 'fix': ") and "its checks pass on the untouched workspace" in message
    assert "the test is broken" in message


def test_the_golden_may_end_with_finish(tmp_path: Path) -> None:
    tests = GOOD.replace("[run_command, read_file, write_file, list_files]", "[run_command, finish]").replace(
        "      - tool_calls: [{name: read_file, arguments: {path: greet.py}}]\n", "").replace(
        "      - Fixed.\n", "      - tool_calls: [{name: finish, arguments: {summary: fixed}}]\n")
    assert _messages(_project(tmp_path, tests)) == []


@pytest.mark.parametrize(("tests", "expected"), [
    ("  - id: a\n    prompt: p\n    workspace: workspaces/nope\n    eval: {no_invented_tools: true}\n",
     "5:16: the workspace folder 'workspaces/nope' does not exist"),
    ("  - id: a\n    prompt: p\n    workspace: /etc\n    eval: {no_invented_tools: true}\n",
     "5:16: the workspace folder '/etc' is absolute"),
    ("  - id: a\n    prompt: p\n    workspace: {files: {../up.txt: x}}\n    eval: {no_invented_tools: true}\n",
     "5:25: workspace file '../up.txt' must be a relative path inside the workspace"),
    ("  - id: a\n    prompt: p\n    workspace: {files: {/abs.txt: x}}\n    eval: {no_invented_tools: true}\n",
     "5:25: workspace file '/abs.txt' must be a relative path inside the workspace"),
    ("  - id: a\n    prompt: p\n    workspace: workspaces/greet\n    tools: [{builtin: run_cmd}]\n"
     "    eval: {no_invented_tools: true}\n",
     "6:23: 'builtin' must be one of run_command, read_file, write_file, list_files, ask_human, finish, but it "
     "is the text 'run_cmd' — did you mean 'run_command'?"),
    ("  - id: a\n    prompt: p\n    tools: [run_command]\n    eval: {no_invented_tools: true}\n",
     "5:12: built-in tool 'run_command' acts on a workspace; give the test a `workspace:`"),
    ("  - id: a\n    prompt: p\n    workspace: workspaces/greet\n    tools: [run_command, {builtin: read_file, "
     "name: run_command}]\n    eval: {no_invented_tools: true}\n",
     "6:12: the tool name 'run_command' is offered twice"),
])
def test_load_time_errors_name_the_place_and_the_fix(tmp_path: Path, tests: str, expected: str) -> None:
    messages = _messages(_project(tmp_path, tests))
    assert any(m.startswith(expected) for m in messages), messages


def test_engine_validate_reports_file_line_col(tmp_path: Path) -> None:
    path = _project(tmp_path, "  - id: a\n    prompt: p\n    workspace: workspaces/nope\n")
    done = engine("validate", str(path))
    assert done.returncode == 1
    assert f"{path}:5:16: error: the workspace folder 'workspaces/nope' does not exist" in done.stdout + done.stderr


def test_the_diff_is_capped_per_file_and_in_total_and_says_what_was_left_out() -> None:
    lines = "".join(f"line {i}\n" for i in range(2000))
    workspace = Workspace.create(WorkspaceSpec(files={"a.txt": lines, **{f"n{i}.txt": "x\n" for i in range(400)}}))
    try:
        (workspace.root / "a.txt").write_text(lines.upper())
        (workspace.root / "bin.dat").write_bytes(b"\0\1\2")
        for i in range(400):
            (workspace.root / f"n{i}.txt").write_text("y\n")
        text = workspace.diff()
    finally:
        workspace.close()
    assert len(text) <= DIFF_CHARS + 200
    assert text.startswith("--- a/a.txt\n+++ b/a.txt\n")
    assert f"... a.txt: diff cut at {FILE_DIFF_CHARS} characters (" in text
    assert "Binary or large file bin.dat added (3 bytes)\n" in text
    shown = text.count("+++ b/n")
    assert 0 < shown < 400
    assert text.endswith(f"... {400 - shown} more changed files not shown (the diff is cut at {DIFF_CHARS} "
                         "characters)\n")
