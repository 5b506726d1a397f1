"""The start-up of every Python process of a hidden check: shown to the check as its `sitecustomize.py`.

The check's Python runs with `PYTHONSAFEPATH=1`, so the workspace is not first on `sys.path` (a planted
`hashlib.py` or `sitecustomize.py` replaces nothing). This file, first on `PYTHONPATH` and the engine's own,
puts the workspace back *last*: a finder after every other (standard library, the check's packages) looks
for a top-level module in the script's folder (or the current one) and then the workspace's top, so
`import greet` finds the model's greet.py while `import hashlib` never finds the model's hashlib.py.
Modules found there are loaded by loaders of this file's own, which turn a `sys.exit()` while a module
is imported into an ImportError: importing the model's code never ends a check with its exit status.

In a `command:` check it also keeps a ledger for the engine's wrapper (check_runner.py) of the Python
processes whose exit status becomes the command's: those the wrapper started directly, or through shells
only. Each writes "start PID" when it starts and "end PID" when it reaches its end (its last exit handler),
and "early PID HOW" when it is about to end without reaching it: `os._exit` in the process itself (not a
forked child), an exec that replaces it, the C library's exit functions looked up through ctypes. The
wrapper fails a check whose Python process ended early, whatever its exit status.

Standard library only; run by the sandbox's python3, whatever its version (3.9 and later).
"""

from __future__ import annotations

import os
import sys
from typing import Any

_SHELLS = frozenset({"bash", "sh", "dash", "env", "timeout", "nice", "nohup", "time", "xargs"})


def _inside(path: str, top: str) -> bool:
    real = os.path.realpath(path)
    return real == top or real.startswith(top + os.sep)


def _install_finder(workspace: str) -> None:
    import importlib.machinery as machinery

    top = os.path.realpath(workspace)

    def exit_as_import_error(loader: Any, module: Any) -> None:
        try:
            loader.exec_module_unguarded(module)
        except SystemExit as exc:
            where = os.path.relpath(loader.path, top) if _inside(loader.path, top) else loader.path
            raise ImportError(f"{where} called sys.exit({exc.code!r}) while it was imported; in a hidden check "
                              "that is an import error, not the check's exit") from None

    class Source(machinery.SourceFileLoader):
        exec_module_unguarded = machinery.SourceFileLoader.exec_module
        exec_module = exit_as_import_error

    class Sourceless(machinery.SourcelessFileLoader):
        exec_module_unguarded = machinery.SourcelessFileLoader.exec_module
        exec_module = exit_as_import_error

    details = ((machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
               (Source, machinery.SOURCE_SUFFIXES), (Sourceless, machinery.BYTECODE_SUFFIXES))

    def workspace_hook(path: str) -> Any:
        if not path or not os.path.isdir(path) or not _inside(path, top):
            raise ImportError("not a folder of the workspace")
        return machinery.FileFinder(path, *details)

    class WorkspaceFinder:
        """Last on sys.meta_path: a top-level module nothing else found, from the workspace."""

        @staticmethod
        def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
            if path is not None:
                return None
            main = sys.modules.get("__main__")
            script = getattr(main, "__file__", None) if getattr(main, "__spec__", None) is None else None
            here = os.path.dirname(os.path.abspath(script)) if script else os.getcwd()
            folders = [folder for folder in dict.fromkeys((here, top)) if _inside(folder, top)]
            return machinery.PathFinder.find_spec(name, folders) if folders else None

        @staticmethod
        def invalidate_caches() -> None:
            pass

    sys.path_hooks.insert(0, workspace_hook)
    sys.meta_path.append(WorkspaceFinder)


def _reports_to(wrapper: int) -> bool:
    """True when this process's exit status reaches the wrapper through shells only."""
    pid = os.getppid()
    for _ in range(32):
        if pid == wrapper:
            return True
        try:
            with open(f"/proc/{pid}/comm") as handle:
                name = handle.read().strip()
            with open(f"/proc/{pid}/stat") as handle:
                stat = handle.read()
            parent = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if name not in _SHELLS:
            return False
        pid = parent
    return False


def _write(ledger: str, line: str) -> None:
    try:
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


_EXIT_SYMBOLS = frozenset({"_exit", "_Exit", "exit", "quick_exit", "exit_group"})


def _keep_ledger(ledger: str) -> None:
    import atexit
    import posix

    pid = os.getpid()
    _write(ledger, f"start {pid}\n")

    def reached_the_end() -> None:
        if os.getpid() == pid:   # not a forked child that inherited the handler
            _write(ledger, f"end {pid}\n")

    def early(how: str) -> None:
        if os.getpid() == pid:
            _write(ledger, f"early {pid} {how}\n")

    real_exit = os._exit

    def _exit(status: int) -> None:
        early(f"os._exit({status!r})")
        real_exit(status)

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event == "os.exec":
            early(f"exec {args[0]!r}")
        elif event == "ctypes.dlsym" and len(args) > 1 and args[1] in _EXIT_SYMBOLS:
            early(f"ctypes {args[1]}")

    os._exit = posix._exit = _exit   # type: ignore[assignment]
    sys.addaudithook(audit)
    atexit.register(reached_the_end)   # the first registered runs last


def _start() -> None:
    workspace = os.environ.get("ENGINE_CHECK_WORKSPACE")
    if workspace:
        _install_finder(workspace)
    ledger, wrapper = os.environ.get("ENGINE_CHECK_LEDGER"), os.environ.get("ENGINE_CHECK_WRAPPER", "")
    if ledger and wrapper.isdigit() and _reports_to(int(wrapper)):
        _keep_ledger(ledger)


_start()
