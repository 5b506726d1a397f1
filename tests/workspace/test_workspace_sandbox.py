"""The evil-program set (tests/harness/test_evil_programs.py) through `run_command`: the same isolation,
limits, output caps and group kill as the exec harness, in a workspace that outlives each command."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

import pytest

from engine.harness.isolation import Limits, isolation
from engine.model.workspace import WorkspaceSpec
from engine.workspace.tools import run_command, write_file
from engine.workspace.workspace import Workspace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from harness_helpers import live_processes
from test_evil_programs import CANARY_VAR, EVIL, EXPECTED_REASON, HANG_GUARD_S, timeout_for

# Where the exec harness fails a program on its stdout (the harness expected the child's line too), the
# command itself exits 0: run_command shows the stdout, the child's line missing. Its child lives on in the
# workspace's sandbox (a background process) until the workspace is closed.
STDOUT = {"fork_once_and_exit": "parent\n", "setsid_child_outlives_parent": "parent\n"}


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    value = f"canary-{secrets.token_hex(12)}"
    monkeypatch.setenv(CANARY_VAR, value)
    return value


@pytest.fixture
def workspace(request: pytest.FixtureRequest) -> Workspace:
    # An evil program's test gets that program's deadline (1 s for one that never ends, see test_evil_programs);
    # any other test's commands end by themselves, so their deadline is only a hang guard.
    name = getattr(getattr(request.node, "callspec", None), "params", {}).get("name")
    timeout_s = timeout_for(name) if name in EVIL else HANG_GUARD_S
    ws = Workspace.create(WorkspaceSpec(files={"keep.txt": "kept\n"}, timeout_s=timeout_s, memory_mb=256))
    yield ws
    ws.close()


@pytest.mark.parametrize("name", sorted(EVIL))
def test_evil_program_through_run_command(name: str, canary: str, workspace: Workspace) -> None:
    code, _ = EVIL[name]
    token = f"evil-ws-{name}-{secrets.token_hex(6)}"
    assert write_file(workspace, {"path": "main.py", "content": code}).status == "ok"
    answer = run_command(workspace, {"command": f"python3 main.py {token}"})
    body = json.loads(answer.content)
    if name in STDOUT:   # the parent exits 0; the child that would outlive it is killed before it prints
        assert (answer.status, body["stdout"]) == ("ok", STDOUT[name]), body
    else:
        assert answer.status == "failed", body
        shown = f"{body.get('error', '')} {body['stderr']} exit code {body['exit_code']}"
        assert EXPECTED_REASON[name].replace(", expected 0", "") in shown.replace("killed: it wrote too much output",
                                                                                  "too much output"), body
    if name not in STDOUT:   # a command that had to be killed took everything it started with it
        assert live_processes(token=token) == []
    assert canary not in answer.content
    # the workspace stays usable: the next command runs, and sees what the earlier ones left (under a hang guard,
    # not the 1 s deadline a never-ending program's workspace has)
    assert workspace.run("cat keep.txt", timeout_s=HANG_GUARD_S).stdout == "kept\n"
    assert not (Path(workspace.root) / "big.bin").exists() or (Path(workspace.root) / "big.bin").stat().st_size <= (
        Limits().file_mb * 1024 * 1024)
    workspace.close()
    assert live_processes(token=token) == []


def test_the_network_is_off_unless_the_test_allows_it() -> None:
    if "netns" not in isolation():
        pytest.skip(f"no network namespace here (isolation {isolation()!r})")
    probe = "python3 -c 'import socket; print(len(socket.if_nameindex()))'"
    closed = Workspace.create(WorkspaceSpec(files={"a": ""}))
    opened = Workspace.create(WorkspaceSpec(files={"a": ""}, network=True))
    try:
        shut = json.loads(run_command(closed, {"command": probe}).content)
        shared = json.loads(run_command(opened, {"command": probe}).content)
    finally:
        closed.close()
        opened.close()
    assert shut["stdout"] == "1\n"                  # only a down loopback in its own namespace
    assert int(shared["stdout"]) >= 1 and shared["exit_code"] == 0
    import socket
    assert int(shared["stdout"]) == len(socket.if_nameindex())   # the host's interfaces


def test_files_written_by_a_command_are_readable_by_the_next_one_and_by_the_engine(workspace: Workspace) -> None:
    first = run_command(workspace, {"command": "mkdir -p out && echo 42 > out/n.txt"})
    assert first.status == "ok", first.content
    second = run_command(workspace, {"command": "echo $(( $(cat out/n.txt) + 1 )) >> out/n.txt"})
    assert second.status == "ok", second.content
    assert (workspace.root / "out" / "n.txt").read_text() == "42\n43\n"
    assert workspace.files() == ["keep.txt", "out/n.txt"]
