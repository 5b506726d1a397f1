"""A test's `workspace:` and its built-in tools, compiled when the suite loads.

    workspace: workspaces/greet                 # a folder beside the suite, copied for every attempt
    workspace:
      folder: workspaces/greet                  # optional with `files`
      files: {notes.txt: "hello"}               # inline files, written over the folder's copy
      setup: "python3 make_data.py"             # run in the sandbox before the model starts
      network: false                            # the sandbox's network (commands, setup and checks)
      timeout_s: 30                             # per command
      memory_mb: 1024
      root: /app                                # the workspace as the task sees it (bubblewrap only)
      time_limit_s: 600                         # the whole task: conversation and commands

    tools: [run_command, read_file, {builtin: write_file, name: save}, my_declared_tool]

The built-in tools' definitions are shipped in schemas/workspace-tools.json (their one home). Compiling
never raises: problems come back as `Problem`s with a path for FILE:LINE:COL (the suite layer reports them).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

from engine.base.diagnostic import Path as Path_
from engine.base.diagnostic import Problem, unknown_keys
from engine.model.workspace import WorkspaceSpec
from engine.paths import data_dir

__all__ = ["BUILTIN_NAMES", "WORKSPACE_KEYS", "Problem", "builtin_definition", "builtin_tools", "compile_workspace",
           "hashed_block", "split_tools"]

WORKSPACE_KEYS = ("folder", "files", "setup", "network", "timeout_s", "memory_mb", "root", "time_limit_s")
MAX_TIMEOUT_S = 3600.0
MAX_TIME_LIMIT_S = 24 * 3600.0
# Where a task may not see its workspace: these hold the sandbox's own system (read-only or private mounts).
_RESERVED_ROOTS = ("/", "/usr", "/etc", "/proc", "/dev", "/tmp", "/var/tmp", "/run", "/bin", "/sbin", "/lib",
                   "/lib32", "/lib64", "/libx32", "/opt/engine-check")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@cache
def builtin_tools() -> Mapping[str, Mapping[str, Any]]:
    """The shipped built-in tools: name -> {description, parameters} (schemas/workspace-tools.json)."""
    data = json.loads((data_dir("schemas") / "workspace-tools.json").read_text(encoding="utf-8"))
    return MappingProxyType(data["tools"])


BUILTIN_NAMES = ("run_command", "read_file", "write_file", "list_files", "ask_human", "finish")


def builtin_definition(builtin: str, name: str | None = None) -> dict[str, Any]:
    """The OpenAI tool definition of a built-in tool, offered under `name` (default: its own)."""
    spec = builtin_tools()[builtin]
    return {"type": "function", "function": {"name": name or builtin, "description": spec["description"],
                                             "parameters": spec["parameters"]}}


def hashed_block(spec: WorkspaceSpec) -> dict[str, Any]:
    """What the test hash covers: the block as written, the seed folder's file names and bytes' digest."""
    return {"folder": _folder_digest(spec.folder) if spec.folder else None, "files": dict(spec.files),
            "setup": spec.setup, "network": spec.network, "timeout_s": spec.timeout_s,
            "memory_mb": spec.memory_mb, "tools": [list(t) for t in spec.tools],
            **({"root": spec.root} if spec.root else {}),
            **({"time_limit_s": spec.time_limit_s} if spec.time_limit_s is not None else {})}


def _folder_digest(folder: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    root = Path(folder)
    for path in sorted(root.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def compile_workspace(value: Any, suite_dir: Path, path: Path_ = ("workspace",)) -> tuple[WorkspaceSpec | None,
                                                                                          list[Problem]]:
    """Compile a `workspace:` value (a folder, or a mapping of WORKSPACE_KEYS) against the suite's folder."""
    problems: list[Problem] = []
    if isinstance(value, str):
        value = {"folder": value}
        folder_path = path
    else:
        folder_path = path + ("folder",)
    if not isinstance(value, Mapping):
        return None, [Problem(path, "`workspace` is a folder next to the suite (`workspace: workspaces/greet`) or "
                              "a mapping with folder, files, setup, network, timeout_s, memory_mb")]
    problems.extend(unknown_keys(value, WORKSPACE_KEYS, path, "`workspace`"))
    if "folder" not in value and "files" not in value:
        problems.append(Problem(path, "a workspace needs a `folder` to copy or inline `files` (or both)"))
    folder = _folder(value.get("folder"), suite_dir, folder_path, problems) if "folder" in value else None
    files = _files(value.get("files", {}), path + ("files",), problems)
    setup = value.get("setup")
    if setup is not None and (not isinstance(setup, str) or not setup.strip()):
        problems.append(Problem(path + ("setup",), "`setup` is a shell command (run by bash -c in the workspace)"))
    network = value.get("network", False)
    if not isinstance(network, bool):
        problems.append(Problem(path + ("network",), "`network` is true or false"))
    timeout_s = value.get("timeout_s", 30.0)
    if (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s)
            or not 0 < timeout_s <= MAX_TIMEOUT_S):
        problems.append(Problem(path + ("timeout_s",), f"`timeout_s` is seconds per command, above 0 and at most "
                                f"{MAX_TIMEOUT_S:g}"))
        timeout_s = 30.0
    memory_mb = value.get("memory_mb", 1024)
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 16:
        problems.append(Problem(path + ("memory_mb",), "`memory_mb` is a whole number of MiB, 16 or more"))
        memory_mb = 1024
    root = _root(value.get("root"), path + ("root",), problems)
    time_limit_s = value.get("time_limit_s")
    if time_limit_s is not None and (isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float))
                                     or not math.isfinite(time_limit_s) or not 0 < time_limit_s <= MAX_TIME_LIMIT_S):
        problems.append(Problem(path + ("time_limit_s",), f"`time_limit_s` is the seconds the whole task may take "
                                f"(conversation and commands), above 0 and at most {MAX_TIME_LIMIT_S:g}"))
    if problems:
        return None, problems
    return WorkspaceSpec(folder=folder, files=MappingProxyType(files), setup=setup, network=bool(network),
                         timeout_s=float(timeout_s), memory_mb=int(memory_mb), root=root,
                         time_limit_s=None if time_limit_s is None else float(time_limit_s)), []


def _root(raw: Any, path: Path_, problems: list[Problem]) -> str | None:
    """`root:` as a normalised absolute path outside the sandbox's system folders, or None."""
    if raw is None:
        return None
    pure = PurePosixPath(raw) if isinstance(raw, str) else None
    if pure is None or not pure.is_absolute() or ".." in pure.parts or any(c in raw for c in "\0\n:"):
        problems.append(Problem(path, "`root` is the absolute path the task sees its workspace at, e.g. /app"))
        return None
    root = pure.as_posix()
    if any(root == r or (r not in ("/",) and root.startswith(r + "/")) for r in _RESERVED_ROOTS):
        problems.append(Problem(path, f"`root: {root}` would hide the sandbox's own system folders; use a folder "
                                "of its own, e.g. /app"))
        return None
    return root


def _folder(raw: Any, suite_dir: Path, path: Path_, problems: list[Problem]) -> str | None:
    if not isinstance(raw, str) or not raw.strip():
        problems.append(Problem(path, "the workspace folder is a path relative to the suite file"))
        return None
    if PurePosixPath(raw).is_absolute():
        problems.append(Problem(path, f"the workspace folder {raw!r} is absolute; write it relative to the suite "
                                "file (e.g. workspaces/greet), so the suite runs from any checkout"))
        return None
    folder = (suite_dir / raw).resolve()
    if not folder.is_dir():
        problems.append(Problem(path, f"the workspace folder {raw!r} does not exist (looked for {folder}); create "
                                "it next to the suite or fix the path"))
        return None
    return str(folder)


def _files(raw: Any, path: Path_, problems: list[Problem]) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        problems.append(Problem(path, "`files` maps a relative path to the file's text"))
        return {}
    out: dict[str, str] = {}
    for name, text in raw.items():
        here = path + (str(name),)
        pure = PurePosixPath(str(name))
        if not str(name).strip() or pure.is_absolute() or ".." in pure.parts or str(name).startswith("~"):
            problems.append(Problem(here, f"workspace file {str(name)!r} must be a relative path inside the "
                                    "workspace (no leading /, no ..)", key=True))
            continue
        if not isinstance(text, str):
            problems.append(Problem(here, f"the content of {str(name)!r} must be text (quote it)"))
            continue
        out[pure.as_posix()] = text
    return out


def split_tools(entries: Any, declared: Mapping[str, Any], path: Path_) -> tuple[list[str], list[tuple[str, str]],
                                                                                 list[Problem]]:
    """A test's `tools:` list -> (declared tool names, built-in tools as (offered name, built-in), problems).

    A name the suite declares under `tools:` is that tool (a suite may declare its own `run_command`); any
    other built-in name is the built-in; `{builtin: run_command, name: shell}` offers one under another name.
    Names not found either way are left in the first list, for the usual "unknown tool" error.
    """
    names: list[str] = []
    builtins: list[tuple[str, str]] = []
    problems: list[Problem] = []
    for i, entry in enumerate(entries or ()):
        if isinstance(entry, str):
            if entry in declared or entry not in BUILTIN_NAMES:
                names.append(entry)
            else:
                builtins.append((entry, entry))
            continue
        if not isinstance(entry, Mapping):
            problems.append(Problem(path + (i,), "a tool is a name, or `{builtin: run_command, name: shell}`"))
            continue
        builtin, name = entry.get("builtin"), entry.get("name", entry.get("builtin"))
        for key in entry:
            if key not in ("builtin", "name"):
                problems.append(Problem(path + (i, str(key)), f"unknown key '{key}'; a renamed built-in tool has "
                                        "`builtin` and `name`", key=True))
        if builtin not in BUILTIN_NAMES:
            problems.append(Problem(path + (i, "builtin"), f"unknown built-in tool {builtin!r}; the built-in tools "
                                    f"are {', '.join(BUILTIN_NAMES)}"))
        elif not isinstance(name, str) or not _NAME.match(name):
            problems.append(Problem(path + (i, "name"), "`name` is the function name the model sees (letters, "
                                    "digits, _ . -)"))
        else:
            builtins.append((name, builtin))
    offered = names + [name for name, _ in builtins]
    for name in {n for n in offered if offered.count(n) > 1}:
        problems.append(Problem(path, f"the tool name {name!r} is offered twice; rename one"))
    return names, builtins, problems
