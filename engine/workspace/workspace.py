"""One attempt's workspace: a fresh copy of the seed, commands run in it under the sandbox, its diff at the end.

    ws = Workspace.create(spec)        # copy the folder, write inline files, run `setup` (WorkspaceError if it fails)
    ws.run("pytest -q")                # bash -c in the sandbox (engine.harness.sandbox.run_in)
    ws.inside("src/a.py")              # a path the model named, resolved inside the workspace, or None (refused)
    ws.files(), ws.diff()              # the final file list, a compact unified diff against the seed
    ws.close()                         # the folder is deleted

The engine itself reads and writes files for `read_file` / `write_file` / `list_files` (no process is needed),
but only after `inside` resolved the path with every symlink followed: `..`, absolute paths and symlinks
leading out are refused. Commands get the whole folder (chowned to the sandbox's private uid for each run).
"""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath

from engine.errors import HarnessError
from engine.harness import sandbox
from engine.workspace.spec import WorkspaceSpec

__all__ = ["DIFF_CHARS", "FILE_LIST_MAX", "Workspace", "WorkspaceError"]

DIFF_CHARS = 8000        # the stored diff is cut past this many characters (a line says how much is left out)
FILE_LIST_MAX = 500      # files listed at most in the final file list
SEED_FILE_BYTES = 256 * 1024   # seed files larger than this are compared by size and bytes, not diffed line by line


class WorkspaceError(Exception):
    """The workspace could not be prepared (copy failed, `setup` exited non-zero): an error row, not a model fail."""


class Workspace:
    """A fresh work folder for one attempt (see the module docstring)."""

    def __init__(self, spec: WorkspaceSpec, root: Path, seed: dict[str, bytes]) -> None:
        self.spec = spec
        self.root = root
        self.seed = seed

    @classmethod
    def create(cls, spec: WorkspaceSpec, *, run_setup: bool = True) -> Workspace:
        """Copy the seed into a fresh folder and run `setup` there.

        Raises:
            WorkspaceError: The copy or the setup command failed (its exit code and output say why).
        """
        base = Path(tempfile.mkdtemp(prefix="engine-ws-"))
        root = base / "work"
        try:
            if spec.folder:
                shutil.copytree(spec.folder, root, symlinks=True)
            else:
                root.mkdir()
            for rel, text in spec.files.items():
                target = root.joinpath(*PurePosixPath(rel).parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
            os.chmod(base, 0o755)
            workspace = cls(spec, root, {})
            if run_setup and spec.setup:
                result = workspace.run(spec.setup)
                if not result.ok:
                    raise WorkspaceError(f"the workspace setup command failed ({result.describe()}): "
                                         f"{(result.stderr or result.stdout).strip()[-500:]}")
            workspace.seed = workspace.snapshot()
            return workspace
        except (OSError, HarnessError) as exc:
            shutil.rmtree(base, ignore_errors=True)
            raise WorkspaceError(f"could not prepare the workspace: {exc}") from exc
        except WorkspaceError:
            shutil.rmtree(base, ignore_errors=True)
            raise

    def close(self) -> None:
        """Delete the folder (the row keeps its file list and diff)."""
        shutil.rmtree(self.root.parent, ignore_errors=True)

    # -- commands --------------------------------------------------------------------------------
    def run(self, command: str, timeout_s: float | None = None) -> sandbox.RunResult:
        """`bash -c command` in the workspace, under the exec sandbox, with the workspace's limits.

        Raises:
            HarnessError: The sandbox could not run it at all (not a failing command: that is a result).
        """
        limits = sandbox.Limits(timeout_s=timeout_s or self.spec.timeout_s, memory_mb=self.spec.memory_mb)
        return sandbox.run_in(["bash", "-c", command], self.root, limits, network=self.spec.network)

    # -- paths -----------------------------------------------------------------------------------
    def inside(self, name: str) -> Path | None:
        """The path `name` names inside the workspace, every symlink followed; None when it leads out."""
        if not isinstance(name, str) or "\0" in name:
            return None
        pure = PurePosixPath(name or ".")
        if pure.is_absolute() or name.startswith("~"):
            return None
        real_root = os.path.realpath(self.root)
        target = os.path.realpath(os.path.join(real_root, *pure.parts))
        if target != real_root and not target.startswith(real_root + os.sep):
            return None
        return Path(target)

    def relative(self, path: Path) -> str:
        """`path` relative to the workspace, POSIX style ("." for the root)."""
        return Path(os.path.relpath(path, os.path.realpath(self.root))).as_posix()

    # -- the end of the run ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, bytes]:
        """Relative path -> bytes of every regular file (symlinks as `-> target`)."""
        out: dict[str, bytes] = {}
        for folder, dirs, names in os.walk(self.root):
            dirs.sort()
            links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]   # never followed
            for name in sorted(names + links):
                full = os.path.join(folder, name)
                rel = Path(os.path.relpath(full, self.root)).as_posix()
                if os.path.islink(full):
                    out[rel] = b"-> " + os.readlink(full).encode(errors="replace")
                elif os.path.isfile(full):
                    with open(full, "rb") as handle:
                        out[rel] = handle.read(SEED_FILE_BYTES + 1)
        return out

    def files(self) -> list[str]:
        """The final workspace's files, sorted (at most FILE_LIST_MAX, then one line saying how many more)."""
        names = sorted(self.snapshot())
        if len(names) > FILE_LIST_MAX:
            return [*names[:FILE_LIST_MAX], f"... and {len(names) - FILE_LIST_MAX} more"]
        return names

    def diff(self, limit: int = DIFF_CHARS) -> str:
        """A unified diff of the workspace against its seed (after setup), cut at `limit` characters."""
        return unified_diff(self.seed, self.snapshot(), limit)


def unified_diff(before: dict[str, bytes], after: dict[str, bytes], limit: int = DIFF_CHARS) -> str:
    """`diff -u`-style text of what changed between two snapshots; binary or large files in one line each."""
    parts: list[str] = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        old_text, new_text = _text(old), _text(new)
        if old_text is None or new_text is None:
            state = "added" if old is None else "deleted" if new is None else "changed"
            parts.append(f"Binary or large file {name} {state}\n")
            continue
        lines = difflib.unified_diff(old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                     "/dev/null" if old is None else f"a/{name}",
                                     "/dev/null" if new is None else f"b/{name}", n=2)
        parts.append("".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                             for line in lines))
    text = "".join(parts)
    if len(text) > limit:
        cut = text[:limit].rsplit("\n", 1)[0] + "\n"
        text = cut + f"... diff cut at {limit} characters ({len(text) - len(cut)} more)\n"
    return text


def _text(data: bytes | None) -> str | None:
    if data is None:
        return ""
    if len(data) > SEED_FILE_BYTES or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
