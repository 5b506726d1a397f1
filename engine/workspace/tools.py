"""The built-in tools of a workspace test, bound to one attempt's `Workspace`.

Each has the face of a declared tool (`name`, `definition`, `argument_problem`, `answer`) so the agent loop
offers and answers it the same way; `answer` is a coroutine (a command runs in a worker thread, never on the
event loop). The statuses a built-in answer adds to the declared tools' `ok` / `error`:

    failed    run_command: the command ran and exited non-zero, timed out, or wrote too much (counted)
    refused   a path outside the workspace (`..`, absolute, a symlink leading out): nothing read or written

The file tools act on regular files and folders only: a FIFO, a device or a socket is an `error` that
says so, and nothing is opened in a way that could block. Every call has a time limit (the workspace's
command limit and a margin): past it, or when the run is cancelled, its command is stopped.

`ends` says which outcome a call ends the conversation with: `finish` -> completed, `ask_human` -> escalated,
and a sandbox that cannot run a command at all (the workspace made unusable) -> failed.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from engine.errors import HarnessError
from engine.workspace.spec import builtin_definition
from engine.workspace.workspace import Workspace, open_regular

__all__ = ["READ_MAX_BYTES", "BuiltinAnswer", "BuiltinTool", "bind_tools"]

READ_MAX_BYTES = 64 * 1024    # read_file returns at most this much (and says it cut)
LIST_MAX = 300                # list_files lists at most this many entries
CALL_MARGIN_S = 30.0          # a call's time limit: the workspace's command limit plus this (handing over, sweeping)
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class BuiltinAnswer:
    """What one built-in call returns (the fields the loop reads of a declared tool's answer, and `ends`)."""

    status: str
    content: str
    value: Any = None
    rule: int | None = None
    delay_s: float = 0.0
    state_changes: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    ends: str | None = None


class BuiltinTool:
    """One built-in tool offered under `name`, acting on `workspace`."""

    def __init__(self, name: str, builtin: str, workspace: Workspace) -> None:
        self.name = name
        self.builtin = builtin
        self.workspace = workspace
        self.definition = builtin_definition(builtin, name)
        self.description = self.definition["function"]["description"]
        self.parameters = self.definition["function"]["parameters"]
        # Here, not at the top: only a workspace task binds built-in tools.
        from jsonschema import Draft202012Validator

        self._validator = Draft202012Validator(self.parameters)

    def argument_problem(self, arguments: Any) -> str | None:
        """Why these decoded arguments do not fit the tool, or None."""
        if not isinstance(arguments, Mapping):
            return f"the arguments must be a JSON object, got {json.dumps(arguments)[:80]}"
        from jsonschema.exceptions import best_match  # imported by __init__ already: a dict look-up

        error = best_match(self._validator.iter_errors(dict(arguments)))
        return None if error is None else error.message

    async def answer(self, arguments: Mapping[str, Any], state: Mapping[str, Any]) -> BuiltinAnswer:
        """Act on the workspace (in a worker thread: commands and file I/O block), within the call's time limit;
        a call cancelled or out of time stops its command."""
        limit = self.workspace.spec.timeout_s + CALL_MARGIN_S
        try:
            async with asyncio.timeout(limit):
                return await asyncio.to_thread(_ACTIONS[self.builtin], self.workspace, arguments)
        except TimeoutError:
            self.workspace.interrupt()
            message = f"the tool call did not end within {limit:g} s and was stopped"
            return BuiltinAnswer("failed" if self.builtin == "run_command" else "error", _json({"error": message}),
                                 message)
        except asyncio.CancelledError:
            self.workspace.interrupt()
            raise


def bind_tools(offered: tuple[tuple[str, str], ...], workspace: Workspace) -> dict[str, BuiltinTool]:
    """The offered built-ins, (name, built-in) pairs, bound to this attempt's workspace, by name."""
    return {name: BuiltinTool(name, builtin, workspace) for name, builtin in offered}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _refused(path: Any) -> BuiltinAnswer:
    message = f"refused: {str(path)!r} is outside the workspace; use a path relative to the workspace folder"
    return BuiltinAnswer("refused", _json({"error": message}), message)


def run_command(workspace: Workspace, arguments: Mapping[str, Any]) -> BuiltinAnswer:
    """`bash -c` in the workspace: exit code, stdout, stderr (status `failed` unless it exited 0)."""
    try:
        result = workspace.run(str(arguments["command"]))
    except HarnessError as exc:
        message = f"the sandbox could not run the command: {exc}"
        return BuiltinAnswer("error", _json({"error": message}), message, ends="failed")
    body: dict[str, Any] = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}
    if not result.ok:
        body["error"] = result.describe()
    if result.truncated:
        body["truncated"] = True
    return BuiltinAnswer("ok" if result.ok else "failed", _json(body), body)


def read_file(workspace: Workspace, arguments: Mapping[str, Any]) -> BuiltinAnswer:
    """The file's text (the first READ_MAX_BYTES)."""
    target = workspace.inside(arguments["path"])
    if target is None:
        return _refused(arguments["path"])
    try:
        with os.fdopen(open_regular(target), "rb") as handle:
            data = handle.read(READ_MAX_BYTES + 1)
    except OSError as exc:
        message = f"cannot read {arguments['path']!r}: {exc.strerror or exc}"
        return BuiltinAnswer("error", _json({"error": message}), message)
    text = data[:READ_MAX_BYTES].decode("utf-8", "replace")
    if len(data) > READ_MAX_BYTES:
        text += f"\n[... cut at {READ_MAX_BYTES} bytes]"
    return BuiltinAnswer("ok", text, text)


def write_file(workspace: Workspace, arguments: Mapping[str, Any]) -> BuiltinAnswer:
    """Write the file (folders created); refused outside the workspace, through symlinks included."""
    name = arguments["path"]
    target = workspace.inside(name)
    if target is None or target == workspace.inside("."):
        return _refused(name)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # resolve again after mkdir: a folder created above may not change where the file lands, but check
        if workspace.inside(workspace.relative(target)) != target:
            return _refused(name)
        with os.fdopen(open_regular(target, os.O_WRONLY | os.O_CREAT), "w", encoding="utf-8") as handle:
            handle.truncate(0)
            handle.write(str(arguments["content"]))
    except OSError as exc:
        message = f"cannot write {name!r}: {exc.strerror or exc}"
        return BuiltinAnswer("error", _json({"error": message}), message)
    size = len(str(arguments["content"]).encode())
    return BuiltinAnswer("ok", _json({"written": workspace.relative(target), "bytes": size}), size)


def list_files(workspace: Workspace, arguments: Mapping[str, Any]) -> BuiltinAnswer:
    """Files and folders (ending in /) under the folder, recursively, relative to the workspace."""
    name = arguments.get("path", ".")
    target = workspace.inside(name)
    if target is None:
        return _refused(name)
    if not target.is_dir():
        message = f"{name!r} is not a folder of the workspace"
        return BuiltinAnswer("error", _json({"error": message}), message)
    entries: list[str] = []
    more = 0
    for folder, dirs, names in os.walk(target):   # names only: nothing is opened
        dirs.sort()
        for entry in sorted(dirs) + sorted(names):
            if len(entries) >= LIST_MAX:
                more += 1
                continue
            full = os.path.join(folder, entry)
            entries.append(workspace.relative(Path(full)) + ("/" if entry in dirs else ""))
        if more > 100 * LIST_MAX:
            break
    shown = list(entries)
    if more:
        shown.append(f"... and {more}{'+' if more > 100 * LIST_MAX else ''} more")
    return BuiltinAnswer("ok", "\n".join(shown) if shown else "(empty)", shown)


def ask_human(workspace: Workspace, arguments: Mapping[str, Any]) -> BuiltinAnswer:
    """Ends the run as `escalated`."""
    return BuiltinAnswer("ok", "Your question was passed on; your work ends here.", arguments["question"],
                         ends="escalated")


def finish(workspace: Workspace, arguments: Mapping[str, Any]) -> BuiltinAnswer:
    """Ends the run as `completed`."""
    return BuiltinAnswer("ok", "Done; your work ends here.", arguments["summary"], ends="completed")


_ACTIONS = {"run_command": run_command, "read_file": read_file, "write_file": write_file,
            "list_files": list_files, "ask_human": ask_human, "finish": finish}
