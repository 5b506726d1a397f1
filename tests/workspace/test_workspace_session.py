"""A workspace's sandbox session: what a command starts in the background outlives it (for later commands and
the hidden check, which joins its network) and is gone once the workspace closes; `root:` shows the folder at
an absolute path; pytest is the check's, never the model's."""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
from pathlib import Path

import pytest

from engine.harness.isolation import isolation
from engine.model.workspace import WorkspaceSpec
from engine.workspace.tools import run_command
from engine.workspace.workspace import Workspace, WorkspaceError
from tests.run.e2e import engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from harness_helpers import live_processes

SERVER = """\
import http.server, socketserver, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"pong")
server = socketserver.TCPServer(("127.0.0.1", 8765), Handler)
open("listening", "w").close()
server.serve_forever()
"""
FETCH = "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8765').read().decode())\""


def _bwrap() -> None:
    if not isolation().startswith("bwrap"):
        pytest.skip(f"no bubblewrap here (isolation {isolation()!r})")


def test_a_background_server_outlives_its_command_serves_the_check_and_dies_with_the_workspace() -> None:
    _bwrap()
    token = f"bg-{secrets.token_hex(6)}"
    ws = Workspace.create(WorkspaceSpec(files={"server.py": SERVER}, root="/app", timeout_s=60))   # a hang guard
    try:
        # waits for the server to listen (a fixed `sleep 0.5` was too short on a loaded machine)
        command = f"nohup python3 server.py {token} > log 2>&1 & until [ -e listening ]; do sleep 0.05; done; pwd"
        started = json.loads(run_command(ws, {"command": command}).content)
        assert started["stdout"] == "/app\n", started
        assert json.loads(run_command(ws, {"command": FETCH}).content)["stdout"] == "pong\n"
        assert len(live_processes(token=token)) == 1
        check = ws.check(FETCH + " && pwd")
        assert check.passed and check.run.stdout == "pong\n/app\n", check
    finally:
        ws.close()
    assert live_processes(token=token) == []


def test_pytest_is_the_checks_and_not_the_models() -> None:
    _bwrap()
    ws = Workspace.create(WorkspaceSpec(files={"a.txt": ""}))
    try:
        model = json.loads(run_command(ws, {"command": "python3 -m pytest --version"}).content)
        assert model["exit_code"] != 0 and "No module named pytest" in model["stderr"], model
        assert ws.check("python3 -m pytest --version").passed
    finally:
        ws.close()


def test_a_command_that_is_killed_takes_its_background_processes_with_it() -> None:
    token = f"bg-{secrets.token_hex(6)}"
    ws = Workspace.create(WorkspaceSpec(files={"a.txt": ""}, timeout_s=1))
    try:
        body = json.loads(run_command(ws, {"command": f"setsid sleep 300 {token} & sleep 30"}).content)
        assert "timed out" in body["error"], body
        assert live_processes(token=token) == []
        # still usable (under a hang guard: the workspace's 1 s deadline is for the command above)
        assert ws.run("echo still usable", timeout_s=60).stdout == "still usable\n"
    finally:
        ws.close()


def test_root_without_bubblewrap_is_an_error_naming_bubblewrap(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("""\
suite: rooted
tests:
  - id: a
    prompt: p
    workspace: {files: {a.txt: ""}, root: /app}
    tools: [run_command]
    eval: {workspace_check: {command: "test -f /app/b.txt"}}
    golden:
      - tool_calls: [{name: run_command, arguments: {command: "touch /app/b.txt"}}]
      - done
""")
    done = engine("validate", str(tmp_path / "s.yaml"), env={"ENGINE_SANDBOX_LEVEL": "pidns+netns+uid"})
    assert done.returncode != 0
    assert "needs bubblewrap (bwrap)" in done.stdout + done.stderr


def test_root_is_validated() -> None:
    from engine.workspace.spec import compile_workspace

    for bad in ("app", "/usr/app", "/", "/tmp", "/a/../b"):
        spec, problems = compile_workspace({"files": {}, "root": bad}, Path("."))
        assert spec is None and "`root" in problems[0].message, bad
    refused = not isolation().startswith("bwrap")
    with pytest.raises(WorkspaceError, match="needs bubblewrap") if refused else contextlib.nullcontext():
        Workspace.create(WorkspaceSpec(files={}, root="/app")).close()
