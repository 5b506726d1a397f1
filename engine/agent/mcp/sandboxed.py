"""`sandbox: true`: a stdio MCP server started in the test's workspace sandbox instead of on this machine.

The server runs as the model's commands do (engine/harness/isolation.py): the same isolation level, the
workspace's private uid, its limits, no network unless the workspace has `network: true`, the workspace as its
folder (at `root:` when the task has one). Its own process namespace: it is not inside the session the
commands share, so it neither sees nor is seen by what the model started. Under bubblewrap only the system's
folders, the workspace and these are visible: the server's program's own installation, read-only (the folder
holding its `bin/`, and the interpreter's, a symlink or a `#!` line leads to), and a private HOME.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from engine.agent.mcp.server import server_argv
from engine.errors import McpServerError
from engine.harness.isolation import Limits, command, isolation_report
from engine.harness.uids import give_tree
from engine.model.mcp_server import McpServerSpec
from engine.workspace.workspace import SESSION_LIFETIME_S, Workspace

__all__ = ["SandboxedStart", "installation"]

SYSTEM = ("/usr/", "/bin/", "/sbin/", "/lib", "/etc/")   # already visible in every sandbox


class SandboxedStart:
    """Makes the argv of `sandbox: true` servers for one attempt's workspace (`McpServers.tools_for`), and
    removes their private HOMEs when the attempt ends."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self._homes: list[str] = []

    def __call__(self, spec: McpServerSpec) -> list[str]:
        workspace, found = self.workspace, isolation_report()
        home = tempfile.mkdtemp(prefix=f"engine-mcp-{spec.name}-")
        self._homes.append(home)
        os.chmod(home, 0o700)
        argv = server_argv(spec, home)
        if workspace.uid is not None:
            give_tree(workspace.root, workspace.uid)
            os.chown(home, workspace.uid, workspace.uid)
        wspec = workspace.spec
        lifetime = wspec.time_limit_s if wspec.time_limit_s is not None else SESSION_LIFETIME_S
        limits = Limits(timeout_s=lifetime, memory_mb=wspec.memory_mb)
        installed = sorted(set(installation(argv[-len(spec.command)])))
        if workspace.uid is not None:
            for folder in installed:
                private = _private_on_the_way(folder)
                if private is not None:
                    raise McpServerError(
                        f"MCP server '{spec.name}' has `sandbox: true`, and its installation {folder} cannot be "
                        f"read by the sandbox's own user ({private} is private to its owner); install the server "
                        "where every user can read it (a virtual environment outside a home folder) or drop "
                        "`sandbox: true`")
        return command(found, workspace.uid, workspace.root, limits, argv, wspec.network, binds=[home],
                       root=wspec.root, ro_binds=[(folder, folder) for folder in installed])

    def close(self) -> None:
        for home in self._homes:
            shutil.rmtree(home, ignore_errors=True)


def installation(program: str) -> Iterator[str]:
    """The folders a program needs to run, outside the system's: its prefix (the folder holding its `bin/`),
    and the same for whatever it leads to (a symlink's target, a `#!` line's interpreter)."""
    seen: set[str] = set()
    todo = [program]
    while todo:
        path = todo.pop()
        if path in seen or len(seen) > 16:
            continue
        seen.add(path)
        folder = os.path.dirname(os.path.abspath(path))
        prefix = os.path.dirname(folder) if os.path.basename(folder) == "bin" else folder
        if not (prefix + "/").startswith(SYSTEM) and prefix != "/":
            yield prefix
        if os.path.islink(path):
            todo.append(os.path.realpath(path))
        interpreter = _shebang(path)
        if interpreter:
            todo.append(interpreter)


def _private_on_the_way(folder: str) -> str | None:
    """The first folder on the way to (and including) `folder` that other users cannot enter, or None."""
    path = Path(folder)
    for step in [*reversed(path.parents), path]:
        try:
            if not step.stat().st_mode & stat.S_IXOTH:
                return str(step)
        except OSError:
            return str(step)
    return None


def _shebang(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            first = handle.read(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].split(b"\n", 1)[0].split()
    if not words:
        return None
    interpreter = words[0].decode(errors="replace")
    if os.path.basename(interpreter) == "env" and len(words) > 1:
        return shutil.which(words[1].decode(errors="replace"))
    return interpreter if Path(interpreter).is_absolute() else None
