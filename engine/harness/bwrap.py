"""The bubblewrap command line of the sandbox: which parts of the host a program under test sees.

Every namespace is unshared (user, PID, network, IPC, UTS, cgroup, mount) and the program gets a new root
holding only read-only /usr and /etc (and the top-level links or folders into /usr: /bin, /lib, ...), a
fresh /proc and a minimal /dev, private tmpfs /tmp, /var/tmp, /dev/shm and /run, and its work folder. So
the host's socket folders are out of view, what it writes to the temp folders vanishes with its mount
namespace, and the results, the suites, /root, /home and /work are out of reach. docs/harnesses.md says
what stays visible.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Sequence

PRIVATE_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run")


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
