"""One attempt's workspace: a fresh copy of the seed, commands run in it under the sandbox, its diff at the end.

    ws = Workspace.create(spec)        # copy the folder, write inline files, run `setup` (WorkspaceError if it fails)
    ws.run("pytest -q")                # bash -c in the workspace's sandbox session (engine.harness.session.Session)
    ws.inside("src/a.py")              # a path the model named, resolved inside the workspace, or None (refused)
    ws.check(HiddenCheck(pytest=("tests",)), files={...})   # the hidden check, in an environment the model
                                                            # cannot shape (engine.workspace.check)
    ws.files(), ws.diff()              # the final file list, a compact unified diff against the seed
    ws.close()                         # the folder is deleted, its private uid given back

The engine itself reads and writes files for `read_file` / `write_file` / `list_files` (no process is needed),
but only after `inside` resolved the path with every symlink followed: `..`, absolute paths and symlinks
leading out are refused. Commands get the whole folder, as the workspace's own private uid (held until
`close`, so no other run may act as the owner of these files while the workspace is open). They run one
after another in one sandbox that lives as long as the workspace, so what a command starts in the
background (a server) is still there for later commands and for the hidden check, and is killed at `close`.
With `root:` (bubblewrap only) commands and checks see the folder at that absolute path. Walking the
folder never opens anything but regular files, and never blocks on one (a FIFO, a device, a socket are
listed, never read); the diff reads each file in pieces and keeps only small texts.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from engine.base.input_file import open_checked
from engine.errors import HarnessError
from engine.harness.interrupt import interrupt
from engine.harness.isolation import Limits, check_root
from engine.harness.oneshot import RunResult
from engine.harness.session import Session
from engine.harness.uids import give_tree, lease_uid, release_uid
from engine.model.workspace import WorkspaceSpec
from engine.workspace.check import CheckResult, HiddenCheck, run_check

__all__ = ["DIFF_CHARS", "FILE_DIFF_BYTES", "FILE_LIST_MAX", "Entry", "Workspace", "WorkspaceError",
           "open_regular", "special_kind", "unified_diff"]

DIFF_CHARS = 8000              # the stored diff is cut past this many characters (a line says what is left out)
FILE_DIFF_CHARS = 4000         # one file's part of the diff is cut past this many characters
FILE_DIFF_BYTES = 64 * 1024    # files larger than this are compared by digest, not diffed line by line
SEED_TEXT_BYTES = 4 * 1024 * 1024   # the seed's texts kept for the diff, in total; past it: compared by digest
FILE_LIST_MAX = 500            # files listed at most in the final file list
WALK_MAX = 100_000             # entries looked at, at most, when the folder is walked
_CHUNK = 64 * 1024
SESSION_LIFETIME_S = 24 * 3600.0   # a workspace's sandbox ends by itself past this (or its time limit + the margin)
CHECK_MARGIN_S = 600.0             # past the task's time limit, room for the hidden checks
_groups = itertools.count(1)


class WorkspaceError(Exception):
    """The workspace could not be prepared (copy failed, `setup` exited non-zero): an error row, not a model fail."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing in the workspace, as the diff compares it.

    Args:
        kind: "file", "link", or the kind of a special file ("FIFO", "socket", "device").
        size: A file's size in bytes (0 for the others).
        digest: The SHA-256 of a file's bytes or a link's target ("" for special files).
        text: A small UTF-8 file's text, kept for the line diff; None when not kept (large, binary, or past
            the seed's budget).
    """

    kind: str
    size: int = 0
    digest: str = ""
    text: str | None = None


def special_kind(mode: int) -> str | None:
    """What a non-regular, non-folder, non-link file is ("FIFO", "socket", "device"), or None for those."""
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return None


def open_regular(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """An fd of the regular file at `path`, opened without blocking and without following a final symlink.

    Raises:
        OSError: It cannot be opened, or it is not a regular file (a FIFO, a device, a socket, a folder):
            `strerror` says which, in words for the model.
    """
    try:
        _refuse_special(os.lstat(path).st_mode)   # told apart before opening (a socket cannot be opened at all)
    except FileNotFoundError:
        pass
    return open_checked(path, _refuse_special, flags | os.O_NOFOLLOW, mode)   # and after, on what was opened


def _refuse_special(mode: int) -> None:
    if not stat.S_ISREG(mode) and not stat.S_ISLNK(mode):
        what = "a folder" if stat.S_ISDIR(mode) else f"a {special_kind(mode) or 'special file'}"
        raise OSError(0, f"it is {what}, not a regular file; the file tools act on regular files only")


class Workspace:
    """A fresh work folder for one attempt (see the module docstring)."""

    def __init__(self, spec: WorkspaceSpec, root: Path, seed: dict[str, Entry]) -> None:
        self.spec = spec
        self.root = root
        self.seed = seed
        self.uid = lease_uid()
        self.group = f"workspace-{next(_groups)}"
        self._running = threading.Lock()    # commands run one at a time: they share the workspace's uid
        self._final: tuple[list[str], str] | None = None
        lifetime = (spec.time_limit_s + CHECK_MARGIN_S) if spec.time_limit_s is not None else SESSION_LIFETIME_S
        self.session = Session(root, memory_mb=spec.memory_mb, lifetime_s=lifetime, network=spec.network,
                               uid=self.uid, group=self.group, root=spec.root)

    @classmethod
    def create(cls, spec: WorkspaceSpec, *, run_setup: bool = True) -> Workspace:
        """Copy the seed into a fresh folder and run `setup` there.

        Raises:
            WorkspaceError: The copy or the setup command failed (its exit code and output say why).
        """
        try:
            check_root(spec.root)
        except HarnessError as exc:
            raise WorkspaceError(str(exc)) from exc
        base = Path(tempfile.mkdtemp(prefix="engine-ws-"))
        root = base / "work"
        workspace: Workspace | None = None
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
            workspace.seed = _scan(root, SEED_TEXT_BYTES)
            return workspace
        except (OSError, HarnessError) as exc:
            _discard(base, workspace)
            raise WorkspaceError(f"could not prepare the workspace: {exc}") from exc
        except BaseException:
            _discard(base, workspace)
            raise

    def close(self) -> None:
        """Delete the folder (the row keeps its file list and diff) and give the private uid back."""
        _discard(self.root.parent, self)

    # -- commands --------------------------------------------------------------------------------
    def run(self, command: str, timeout_s: float | None = None) -> RunResult:
        """`bash -c command` in the workspace, under the exec sandbox, with the workspace's limits.

        Raises:
            HarnessError: The sandbox could not run it at all (not a failing command: that is a result).
        """
        limits = Limits(timeout_s=timeout_s or self.spec.timeout_s, memory_mb=self.spec.memory_mb)
        with self._running:
            return self.session.run(command, limits)

    def check(self, check: HiddenCheck | str, timeout_s: float | None = None,
              files: Mapping[str, Path] | None = None) -> CheckResult:
        """Run a hidden check once the model is done, in an environment the model cannot shape.

        The final file list and diff are taken first (the check's files are not the model's work); then
        each of `files` (a workspace path -> a file or folder of the suite) replaces whatever the model left
        at that path, and the check runs (engine.workspace.check: the engine's wrapper, start-up and pytest
        configuration, places of its own outside the workspace). It runs in a sandbox of its own, as a uid
        of its own that the folder is handed to (no longer writable by what the model left running), in the
        session's network namespace (so it reaches a server the model started).

        Raises:
            HarnessError: The sandbox could not run it, or a check file could not be copied in.
        """
        if isinstance(check, str):
            check = HiddenCheck(command=check)
        self.final_state()
        uid = lease_uid()
        try:
            with self._running:
                try:
                    if uid is not None:   # first taken from the model's uid: then nothing it left running
                        _no_group_write(self.root)   # can change the check's files once they are in
                        give_tree(self.root, uid)
                    for rel, source in (files or {}).items():
                        _replace(self.root, rel, source)
                except OSError as exc:
                    raise HarnessError(f"could not copy the check's files into the workspace: {exc}") from exc
                limits = Limits(timeout_s=timeout_s or self.spec.timeout_s, memory_mb=self.spec.memory_mb)
                return run_check(check, self.root, limits, network=self.spec.network,
                                 uid=uid if uid is not None else self.uid, group=self.group, root=self.spec.root,
                                 netns=self.session.netns())
        finally:
            release_uid(uid)

    def interrupt(self) -> None:
        """Stop this workspace's running command now (its tool call was cancelled or ran out of time)."""
        interrupt(self.group)

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
    def final_state(self) -> tuple[list[str], str]:
        """The file list and the diff of the model's final workspace, taken once (before any check runs)."""
        if self._final is None:
            final = _scan(self.root, SEED_TEXT_BYTES, self.seed)
            names = sorted(final)
            if len(names) > FILE_LIST_MAX:
                names = [*names[:FILE_LIST_MAX], f"... and {len(names) - FILE_LIST_MAX} more"]
            self._final = (names, unified_diff(self.seed, final))
        return self._final

    def files(self) -> list[str]:
        """The final workspace's files, sorted (at most FILE_LIST_MAX, then one line saying how many more)."""
        return self.final_state()[0]

    def diff(self) -> str:
        """A unified diff of the workspace against its seed (after setup), cut at DIFF_CHARS characters."""
        return self.final_state()[1]


def _discard(base: Path, workspace: Workspace | None) -> None:
    if workspace is not None:
        workspace.session.close()
    shutil.rmtree(base, ignore_errors=True)
    if workspace is not None:
        uid, workspace.uid = workspace.uid, None
        release_uid(uid)


def _no_group_write(root: Path) -> None:
    """Take group and other write bits off everything under `root` (symlinks untouched), so once the folder
    belongs to the check's uid nothing the model left running can change it."""
    for folder, dirs, names in os.walk(root):
        for full in [os.path.join(folder, name) for name in [*dirs, *names]] + ([folder] if folder == str(root)
                                                                               else []):
            try:
                info = os.lstat(full)
            except OSError:
                continue
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022:
                os.chmod(full, stat.S_IMODE(info.st_mode) & ~0o022)


def _replace(root: Path, rel: str, source: Path) -> None:
    """Put the suite's `source` (a file or folder) at `rel` in the workspace, over whatever is there.

    Every folder on the way is made a real folder (a symlink or a file the model put there is removed), so
    nothing is written outside the workspace.
    """
    parts = PurePosixPath(rel).parts
    here = root
    for part in parts[:-1]:
        here = here / part
        if os.path.islink(here) or (os.path.lexists(here) and not os.path.isdir(here)):
            os.unlink(here)
        if not os.path.lexists(here):
            os.mkdir(here)
    target = here / parts[-1]
    if os.path.isdir(target) and not os.path.islink(target):
        shutil.rmtree(target)
    elif os.path.lexists(target):
        os.unlink(target)
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copyfile(source, target)


def _walk(root: Path) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, full path, lstat) of everything but folders under `root`, sorted, symlinks not
    followed, at most WALK_MAX entries."""
    seen = 0
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        dirs[:] = [d for d in dirs if d not in links]
        for name in sorted(names + links):
            seen += 1
            if seen > WALK_MAX:
                return
            full = os.path.join(folder, name)
            try:
                info = os.lstat(full)
            except OSError:
                continue
            yield Path(os.path.relpath(full, root)).as_posix(), full, info


def _scan(root: Path, text_budget: int, seed: Mapping[str, Entry] | None = None) -> dict[str, Entry]:
    """Every file, link and special file under `root`, its bytes read in pieces; texts kept for small
    UTF-8 files while `text_budget` lasts (with `seed`: only for files that changed)."""
    out: dict[str, Entry] = {}
    for rel, full, info in _walk(root):
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(full)
            out[rel] = Entry("link", 0, hashlib.sha256(target.encode(errors="replace")).hexdigest(), target)
            continue
        if not stat.S_ISREG(info.st_mode):
            out[rel] = Entry(special_kind(info.st_mode) or "special file")
            continue
        try:
            entry = _read_entry(full)
        except OSError:
            continue
        unchanged = seed is not None and _same(seed.get(rel), entry)
        if entry.text is not None and (unchanged or len(entry.text) > text_budget):
            entry = Entry(entry.kind, entry.size, entry.digest)
        text_budget -= len(entry.text or "")
        out[rel] = entry
    return out


def _read_entry(full: str) -> Entry:
    digest = hashlib.sha256()
    head = bytearray()
    size = 0
    with os.fdopen(open_regular(full), "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            if size <= FILE_DIFF_BYTES:
                head += chunk[:FILE_DIFF_BYTES + 1 - len(head)]
            size += len(chunk)
    text: str | None = None
    if size <= FILE_DIFF_BYTES and b"\0" not in head:
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    return Entry("file", size, digest.hexdigest(), text)


def unified_diff(before: Mapping[str, Entry], after: Mapping[str, Entry], limit: int = DIFF_CHARS) -> str:
    """`diff -u`-style text of what changed between two scans, each file's part cut at FILE_DIFF_CHARS and the
    whole at `limit`, then one line saying how many changed files are not shown."""
    parts: list[str] = []
    used = 0
    changed = [name for name in sorted(set(before) | set(after))
               if _same(before.get(name), after.get(name)) is False]
    for shown, name in enumerate(changed):
        part = _file_diff(name, before.get(name), after.get(name))
        if used + len(part) > limit:
            room = limit - used
            if room > 200 and shown == 0:   # one huge first part: show its start rather than nothing
                cut = part[:room].rsplit("\n", 1)[0] + "\n"
                parts.append(cut + f"... diff cut at {limit} characters ({len(part) - len(cut)} more)\n")
                shown += 1
            left = len(changed) - shown
            if left:
                parts.append(f"... {left} more changed file{'s' if left != 1 else ''} not shown (the diff is cut "
                             f"at {limit} characters)\n")
            break
        parts.append(part)
        used += len(part)
    return "".join(parts)


def _same(old: Entry | None, new: Entry | None) -> bool:
    if old is None or new is None:
        return old is new
    return (old.kind, old.size, old.digest) == (new.kind, new.size, new.digest)


def _file_diff(name: str, old: Entry | None, new: Entry | None) -> str:
    state = "added" if old is None else "deleted" if new is None else "changed"
    for entry in (old, new):
        if entry is not None and entry.kind not in ("file", "link"):
            return f"Special file {name} {state} (a {entry.kind}; never read)\n"
    if (old is not None and old.kind == "link") or (new is not None and new.kind == "link"):
        shown = " -> ".join(f"{e.kind} {e.text!r}" if e.kind == "link" else e.kind for e in (old, new) if e)
        return f"Link {name} {state} ({shown})\n"
    old_text = "" if old is None else old.text
    new_text = "" if new is None else new.text
    if old_text is None or new_text is None:
        sizes = " -> ".join(f"{e.size} bytes" for e in (old, new) if e is not None)
        return f"Binary or large file {name} {state} ({sizes})\n"
    lines = difflib.unified_diff(old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                 "/dev/null" if old is None else f"a/{name}",
                                 "/dev/null" if new is None else f"b/{name}", n=2)
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    if len(text) > FILE_DIFF_CHARS:
        cut = text[:FILE_DIFF_CHARS].rsplit("\n", 1)[0] + "\n"
        text = cut + f"... {name}: diff cut at {FILE_DIFF_CHARS} characters ({len(text) - len(cut)} more)\n"
    return text
