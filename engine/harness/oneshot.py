"""One-shot sandboxed runs: a program started under this machine's isolation, watched to its end, nothing left.

`run(argv, files, limits)` writes harness files into a fresh temporary folder (given to the run's private uid)
and deletes it after; `run_in` runs in a folder that outlives the run (a workspace, a hidden check). Both are
blocking and thread-safe (the runner calls them from a thread pool), and both:

1. start the program as engine/harness/isolation.py's `command` builds it: its `Limits`, the isolation level's
   wrapper, a scrubbed environment (PATH, LANG, HOME and TMPDIR set to the work folder; no API keys);
2. give it a new session, stdin /dev/null, and read stdout and stderr incrementally, keeping the first
   `output_bytes` and killing the program once it writes far more;
3. at the wall-clock deadline, at too much output, at `interrupt()`, and also when the program ends normally,
   kill every process of the run with SIGKILL (its session, and everything of its private uid).

The isolation level that ran is reported on every result.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from engine.errors import HarnessError
from engine.harness.interrupt import interruptible
from engine.harness.isolation import (
    SANDBOX_PATH,
    Isolation,
    Limits,
    base_env,
    command,
    isolation_report,
    resolve_program,
)
from engine.harness.uids import give_tree, kill_uid, lease_uid, release_uid, sweep_uid

# What a hidden check adds to the environment, so the folder it judges cannot shape how it runs: Python
# without the user site folder or the current folder on sys.path (the parts of `-I` that matter when the
# environment is already an allowlist); the check's own start-up (engine/workspace/check_startup.py) puts
# the workspace back, after everything else.
CHECK_ENV = {"PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1"}
CHECK_SITE = "/opt/engine-check/site-packages"   # where bubblewrap shows the engine's pytest to a hidden check
_HARD_OUTPUT_FACTOR = 16  # kill the program once it has written this many times the kept output
# The last words of a program an allocation failed in at its address-space limit: Python, C++, Node's V8, and
# the C library's ENOMEM text (a shell's fork, a C program's perror).
_OUT_OF_MEMORY = ("MemoryError", "std::bad_alloc", "heap out of memory", "Cannot allocate memory")
_LAST_WORDS_CHARS = 2000   # the end of stderr those are looked for in


@dataclass(frozen=True)
class RunResult:
    """What happened to one sandboxed program.

    Args:
        exit_code: The exit status, or None when a signal ended it.
        signal: The signal number that ended it, or None.
        stdout: The kept start of stdout (decoded as UTF-8, bad bytes replaced).
        stderr: The kept start of stderr.
        truncated: True when stdout or stderr was longer than the kept part.
        timed_out: True when the wall-clock deadline passed and the program was killed.
        output_exceeded: True when the program was killed for writing too much.
        duration_s: Wall-clock seconds from start to the end of the program.
        isolation: The isolation level that ran (see `isolation()`).
        workdir: The temporary work folder (already deleted when the result is returned).
        uid: The private uid the program ran as, or None when privileges were not dropped.
        interrupted: True when `interrupt()` stopped the program (the run is being cancelled).
        memory_mb: The memory limit it ran under (MiB; its `Limits.memory_mb`), or None when not known.
    """

    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool
    output_exceeded: bool
    duration_s: float
    isolation: str
    workdir: str = ""
    uid: int | None = None
    interrupted: bool = False
    memory_mb: int | None = None

    @property
    def ok(self) -> bool:
        """Exited by itself with status 0."""
        return self.exit_code == 0 and not self.timed_out and not self.output_exceeded and not self.interrupted

    def describe(self) -> str:
        """How the program ended, in a few words: 'exit code 1', 'timed out after 2 s', ..."""
        if self.interrupted:
            return "stopped: the run is being cancelled"
        if self.timed_out:
            return f"timed out after {self.duration_s:.3g} s"
        if self.output_exceeded:
            return "killed: it wrote too much output"
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            hint = {"SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (file size limit)"}.get(name, "")
            return f"killed by {name}{hint}{self.memory_note()}"
        return f"exit code {self.exit_code}{self.memory_note()}"

    @property
    def out_of_memory(self) -> bool:
        """It ended by itself, not with status 0, and its last words on stderr say an allocation failed: as far as
        the engine can tell, it reached its memory limit."""
        if self.exit_code == 0 or self.timed_out or self.output_exceeded or self.interrupted:
            return False
        tail = self.stderr[-_LAST_WORDS_CHARS:]
        return any(words in tail for words in _OUT_OF_MEMORY)

    def memory_note(self) -> str:
        """' (out of memory: ...)', naming the limit and how to raise it, when `out_of_memory`; else ''."""
        if not self.out_of_memory:
            return ""
        limit = f"{self.memory_mb} MiB" if self.memory_mb is not None else "its memory limit"
        return f" (out of memory: it used more than {limit}; `memory_mb` raises the limit)"


def run(argv: Sequence[str], files: Mapping[str, str], limits: Limits = Limits()) -> RunResult:
    """Write `files` into a fresh temp dir and run `argv` there under the sandbox.

    Args:
        argv: The command; its first item is a program name (`python`, `node`, `bash`) or an absolute path.
            `python` becomes the sandbox's interpreter with `-I`.
        files: Relative path -> text, written into the work folder before the run.
        limits: Resource limits.

    Returns:
        The RunResult. A failing, crashing or hanging program is a result, not an exception.

    Raises:
        HarnessError: The program is not installed or the work folder could not be prepared.
    """
    if not argv:
        raise HarnessError("the harness command is empty; give `run: [program, args...]`")
    found, program = _isolation_and_program(argv[0])
    uid = lease_uid()
    workdir = Path(tempfile.mkdtemp(prefix="engine-exec-"))
    try:
        if uid is not None:
            os.chown(workdir, uid, uid)
        _write_files(workdir, files, uid)
        full = command(found, uid, workdir, limits, [*program, *argv[1:]])
        return _supervise(full, str(workdir), limits, found, uid, base_env(str(workdir)))
    finally:
        release_uid(uid)  # nothing of this uid may outlive the run
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass(frozen=True)
class CheckFolders:
    """A hidden check's own places outside the workspace, each shown to it at its own path.

    Args:
        home: HOME and TMPDIR; handed to the check's uid.
        out: Where the check writes its report; handed to the check's uid.
        tools: The engine's check programs, read-only; `tools/lib` goes first on PYTHONPATH.
        result_fd: An open file of the engine's the check's wrapper writes its end to (passed to it).
    """

    home: Path
    out: Path
    tools: Path
    result_fd: int


def run_in(argv: Sequence[str], workdir: Path, limits: Limits = Limits(), *, network: bool = False,
           uid: int | None = None, check: CheckFolders | None = None, env: Mapping[str, str] | None = None,
           group: str | None = None, root: str | None = None, netns: int | None = None) -> RunResult:
    """Run `argv` under the sandbox in an existing folder that outlives the run (an agent's workspace).

    The same isolation, limits, output caps and group kill as `run`; the folder is neither created nor
    deleted. When privileges are dropped, the whole folder is first given to the run's private uid, so
    the program may read and write everything in it.

    Args:
        argv: The command (`bash`, `python`... or an absolute path), run with `workdir` as its folder.
        workdir: The folder; it must exist.
        limits: Resource limits.
        network: Keep the host's network (no network namespace); off by default.
        uid: The uid to run as, leased by the caller (`lease_uid`) and kept after the run; None: a uid of
            the run's own, when privileges are dropped here.
        check: A hidden check's own folders (HOME and TMPDIR, its report, the engine's programs), with CHECK_ENV
            and the engine's pytest on PYTHONPATH.
        env: More environment variables.
        group: A name `interrupt(group)` stops this program by.
        root: Where the folder is shown to the program (bubblewrap only; HarnessError elsewhere).
        netns: An open fd of a network namespace to run in (a workspace session's, so a hidden check reaches
            the services the model left running); needs root, ignored otherwise.

    Raises:
        HarnessError: The program is not installed or the folder could not be handed over.
    """
    if not argv:
        raise HarnessError("the command is empty")
    found, program = _isolation_and_program(argv[0])
    own = lease_uid() if uid is None else None
    uid = own if uid is None else uid if found.drop_privileges else None
    try:
        if uid is not None:
            give_tree(workdir, uid)
            for folder in (check.home, check.out) if check is not None else ():
                os.chown(folder, uid, uid)
        binds = () if check is None else (str(check.home), str(check.out))
        site = check_site() if check is not None else None
        bwrap = found.level.startswith("bwrap")
        ro_binds: tuple[tuple[str, str], ...] = ()
        if check is not None and bwrap:
            ro_binds = ((str(check.tools), str(check.tools)),) + (((site, CHECK_SITE),) if site else ())
        join = netns is not None and os.geteuid() == 0
        full = command(found, uid, workdir, limits, [*program, *argv[1:]], network or join, binds, root, ro_binds)
        if join:
            full = ["nsenter", f"--net=/proc/self/fd/{netns}", "--", *full]
        full_env = base_env(root or str(workdir), None if check is None else str(check.home))
        if check is not None:
            shown_site = [CHECK_SITE if bwrap else site] if site else []
            full_env.update(CHECK_ENV, PYTHONPATH=":".join([str(check.tools / "lib"), *shown_site]))
        full_env.update(env or {})
        fds = ((netns,) if join and netns is not None else ()) + ((check.result_fd,) if check is not None else ())
        return _supervise(full, str(workdir), limits, found, uid, full_env, group=group, pass_fds=fds)
    finally:
        if own is not None:
            release_uid(own)
        elif uid is not None:
            sweep_uid(uid)


def check_python() -> str | None:
    """The interpreter a hidden check's own programs run with: `python3` on the sandbox's PATH (the one the
    task's commands ran), else the interpreter the sandbox was probed with; None when there is neither."""
    return shutil.which("python3", path=SANDBOX_PATH) or isolation_report().python


@functools.cache
def check_site() -> str | None:
    """The engine's site-packages folder that holds pytest (put on a hidden check's PYTHONPATH), or None when
    pytest is not installed with the engine."""
    spec = importlib.util.find_spec("pytest")
    if spec is None or spec.origin is None:
        return None
    return str(Path(spec.origin).resolve().parent.parent)


def _isolation_and_program(name: str) -> tuple[Isolation, list[str]]:
    """This machine's isolation and the argv prefix that runs `name` (`run` and `run_in` share it)."""
    found = isolation_report()
    program = resolve_program(name)
    if program is None:
        raise HarnessError(f"program {name!r} is not installed on this machine (searched {SANDBOX_PATH})")
    return found, program


def _write_files(workdir: Path, files: Mapping[str, str], uid: int | None) -> None:
    for rel, text in files.items():
        pure = PurePosixPath(rel)
        if pure.is_absolute() or ".." in pure.parts or not pure.parts:
            raise HarnessError(f"harness file name {rel!r} must be a relative path inside the work folder")
        target = workdir.joinpath(*pure.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        if uid is not None:
            for part in [target, *target.relative_to(workdir).parents]:
                os.chown(workdir / part, uid, uid)


def _supervise(command: list[str], workdir: str, limits: Limits, found: Isolation, uid: int | None,
               env: dict[str, str], group: str | None = None, pass_fds: Sequence[int] = ()) -> RunResult:
    """Start the command, read its output with a deadline, and kill whatever is left."""
    start = time.monotonic()
    deadline = start + limits.timeout_s
    with interruptible(group) as wake_read:
        try:
            proc = subprocess.Popen(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                                    pass_fds=tuple(pass_fds))
        except OSError as exc:
            raise HarnessError(f"could not start the sandboxed program {command[0]!r}: {exc}") from exc
        kept = {"stdout": bytearray(), "stderr": bytearray()}
        total = {"stdout": 0, "stderr": 0}
        timed_out = output_exceeded = interrupted = False
        exited_at: float | None = None
        hard_limit = limits.output_bytes * _HARD_OUTPUT_FACTOR
        pidfd = os.pidfd_open(proc.pid)
        selector = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        selector.register(proc.stdout, selectors.EVENT_READ, "stdout")
        selector.register(proc.stderr, selectors.EVENT_READ, "stderr")
        selector.register(pidfd, selectors.EVENT_READ, "exit")
        selector.register(wake_read, selectors.EVENT_READ, "stop")
        try:
            open_pipes = 2
            while open_pipes or exited_at is None:
                remaining = deadline - time.monotonic()
                if exited_at is not None:
                    # The program is gone; whatever still holds its pipes is a leftover: drain briefly.
                    remaining = min(remaining, exited_at + 1.0 - time.monotonic())
                if remaining <= 0:
                    timed_out = exited_at is None
                    break
                for key, _ in selector.select(timeout=remaining):
                    if key.data == "stop":
                        interrupted = True
                        break
                    if key.data == "exit":
                        selector.unregister(pidfd)
                        exited_at = time.monotonic()
                        _kill_all(proc, found, uid, alive=False)
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        open_pipes -= 1
                        continue
                    total[key.data] += len(chunk)
                    room = limits.output_bytes - len(kept[key.data])
                    if room > 0:
                        kept[key.data] += chunk[:room]
                    if total[key.data] > hard_limit:
                        output_exceeded = True
                if output_exceeded or interrupted:
                    break
        finally:
            _kill_all(proc, found, uid, alive=proc.poll() is None)
            selector.close()
            os.close(pidfd)
            proc.stdout.close()
            proc.stderr.close()
            returncode = proc.wait()
    duration = (exited_at or time.monotonic()) - start
    return RunResult(
        exit_code=returncode if returncode >= 0 else None,
        signal=-returncode if returncode < 0 else None,
        stdout=kept["stdout"].decode("utf-8", "replace"),
        stderr=kept["stderr"].decode("utf-8", "replace"),
        truncated=any(total[k] > limits.output_bytes for k in total),
        timed_out=timed_out,
        output_exceeded=output_exceeded and not timed_out,
        duration_s=duration,
        isolation=found.level,
        workdir=workdir,
        uid=uid,
        interrupted=interrupted,
        memory_mb=limits.memory_mb,
    )


def _kill_all(proc: subprocess.Popen[bytes], found: Isolation, uid: int | None, alive: bool) -> None:
    """SIGKILL the run's session, and every process of its private uid.

    With a PID namespace, a program that ended by itself took everything it started with it (it was
    the namespace's init), so the uid sweep is needed only when we stop it (`alive`) - it then kills
    the namespace's init, which the session kill cannot reach once it changed uid.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if uid is not None and (alive or not found.pid_namespace):
        kill_uid(uid)
