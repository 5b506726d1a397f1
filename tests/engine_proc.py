"""One home for running the `engine` CLI from tests: `run_engine(*args, ...)`, backed by a fork server.

Design: the first call in a pytest process starts a zygote (`python tests/engine_proc.py --zygote`), a
single-threaded helper that imports `engine.cli` first (it chooses Arrow's memory pool before pyarrow
loads), pre-imports the CLI and its heavy dependencies, then serves requests on a Unix
socket. Each request carries argv, cwd, the full env and three fds (stdin/stdout/stderr, sent with
`socket.send_fds`); the zygote forks a child that chdirs, replaces os.environ, dup2s the fds, sets
`sys.argv = [<path of engine/__main__.py>, *args]` (as `python -m engine` does), runs the module with
`runpy.run_module("engine", run_name="__main__", alter_sys=True)`, maps SystemExit / an uncaught exception
to the exit code and traceback a real interpreter gives, runs atexit handlers, flushes and `os._exit`s. The
child is its own process group; the zygote replies with its pid, then its exit status.

Every call's environment has this checkout first on PYTHONPATH (`checkout_env`), the zygote's too, so the
engine processes a test starts, and the ones they start (shards, sandboxes), import this tree's `engine`.

Limits: a call whose environment differs from the zygote's in what is read at start-up or by a pre-imported
module at import (`_startup_env`: PYTHON*, typer's and aiohttp's import-time switches, ARROW_*, PANDAS_*), or that says
`fresh=True`, runs a real `subprocess.run([sys.executable, "-m", "engine", ...])`; `ENGINE_TEST_FRESH=1`
makes every call real. `CompletedProcess.args` says which ran: `["engine", ...]` for a forked child,
`[python, "-m", "engine", ...]` for a real one. If the zygote cannot start or dies, calls fall back to real
subprocesses (one warning). engine/ itself reads no environment at import; what it keeps per process (the
sandbox's private uid range) is renewed after a fork (`os.register_at_fork`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["checkout_env", "run_engine"]

ROOT = Path(__file__).resolve().parents[1]
_lock = threading.Lock()
_zygote: dict[str, Any] = {}


# Read when the interpreter starts or when a module the zygote pre-imports loads (typer: TYPER_USE_RICH,
# TERMINAL_WIDTH, FORCE_COLOR, PY_COLORS, GITHUB_ACTIONS, _TYPER_FORCE_DISABLE_TERMINAL; aiohttp:
# AIOHTTP_NO_EXTENSIONS, AIOHTTP_NOSENDFILE; pyarrow: ARROW_*; pandas: PANDAS_COPY_ON_WRITE, PANDAS_FUTURE*).
# A forked child would keep the zygote's.
_STARTUP_PREFIXES = ("PYTHON", "TYPER_", "_TYPER_", "AIOHTTP_", "ARROW_", "PANDAS_")
_STARTUP_NAMES = frozenset({"TERMINAL_WIDTH", "FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS"})


def _startup_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_STARTUP_PREFIXES) or k in _STARTUP_NAMES}


def checkout_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with this checkout first on PYTHONPATH."""
    out = dict(os.environ if env is None else env)
    path = out.get("PYTHONPATH", "")
    if path.split(os.pathsep)[0] != str(ROOT):
        out["PYTHONPATH"] = str(ROOT) + os.pathsep + path
    return out


def _real(args: tuple[str, ...], env: dict[str, str], cwd: Any, input: str | None,
          timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", *args], env=env, cwd=cwd, input=input,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _start() -> socket.socket | None:
    if _zygote.get("failed"):
        return None
    if "sock" in _zygote:
        return _zygote["sock"]
    try:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = checkout_env()
        proc = subprocess.Popen([sys.executable, __file__, "--zygote", str(child.fileno())],
                                pass_fds=(child.fileno(),), cwd=str(ROOT), env=env)
        child.close()
        ready = parent.recv(16)
        if ready != b"ready\n":
            raise RuntimeError(f"zygote said {ready!r}")
    except Exception as exc:  # noqa: BLE001
        _zygote["failed"] = True
        warnings.warn(f"engine zygote did not start ({exc}); using real subprocesses", stacklevel=3)
        return None
    _zygote.update(sock=parent, proc=proc, startup=_startup_env(env))
    atexit.register(_stop)
    return parent


def _stop() -> None:
    proc = _zygote.pop("proc", None)
    sock = _zygote.pop("sock", None)
    if sock is not None:
        sock.close()
    if proc is not None:
        proc.terminate()
        proc.wait(timeout=5)


def _recv_line(sock: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError("zygote closed")
        buf += chunk
    return buf


def run_engine(*args: str, env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
               input: str | None = None, timeout: float = 120, fresh: bool = False
               ) -> subprocess.CompletedProcess[str]:
    """Run `engine *args` like `subprocess.run([python, -m, engine, ...], capture_output=True, text=True)`."""
    args = tuple(str(a) for a in args)
    env = checkout_env(env)
    if fresh or os.environ.get("ENGINE_TEST_FRESH") == "1":
        return _real(args, env, cwd, input, timeout)
    with _lock:
        sock = _start()
        if sock is None or _startup_env(env) != _zygote["startup"]:
            return _real(args, env, cwd, input, timeout)
        with tempfile.TemporaryFile("w+b") as fin, tempfile.TemporaryFile("w+b") as fout, \
                tempfile.TemporaryFile("w+b") as ferr:
            if input is not None:
                fin.write(input.encode())
                fin.flush()
                fin.seek(0)
            req = json.dumps({"argv": list(args), "cwd": str(cwd) if cwd is not None else os.getcwd(),
                              "env": env}).encode() + b"\n"
            try:
                socket.send_fds(sock, [struct.pack("!I", len(req))], [fin.fileno(), fout.fileno(), ferr.fileno()])
                sock.sendall(req)
                pid = int(_recv_line(sock))
                sock.settimeout(timeout)
                try:
                    code = int(_recv_line(sock))
                except TimeoutError:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:  # finished (or not yet its own group) meanwhile
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    sock.settimeout(None)
                    _recv_line(sock)
                    fout.seek(0)
                    ferr.seek(0)
                    raise subprocess.TimeoutExpired(["engine", *args], timeout, fout.read(), ferr.read()) from None
                finally:
                    sock.settimeout(None)
            except (ConnectionError, OSError, ValueError) as exc:
                _zygote["failed"] = True
                _stop()
                warnings.warn(f"engine zygote died ({exc}); using real subprocesses", stacklevel=2)
                return _real(args, env, cwd, input, timeout)
            fout.seek(0)
            ferr.seek(0)
            out = fout.read().decode(errors="replace")
            err = ferr.read().decode(errors="replace")
    return subprocess.CompletedProcess(["engine", *args], code, out, err)


# ------------------------------------------------------------------ zygote side


def _child(argv: list[str], cwd: str, env: dict[str, str], fds: list[int]) -> None:
    import runpy
    import traceback

    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    os.chdir(cwd)
    sys.path[0] = cwd  # `python -m` puts the working directory first (the zygote's is its script's folder)
    os.environ.clear()
    os.environ.update(env)
    import engine

    sys.argv = [str(Path(engine.__file__).with_name("__main__.py")), *argv]
    code = 0
    try:
        runpy.run_module("engine", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def _serve(fd: int) -> None:
    import engine.cli  # noqa: F401 - first: it chooses Arrow's memory pool, which pyarrow reads as it loads
    # What `engine analyze` / `report` / `rescore` / `diff` import when they start: pre-imported, a forked
    # `engine analyze` of a small run takes 0.20 CPU-s instead of 0.52 (medians of 3). typer 0.29's pydantic
    # adapter (every command builds one) saves 0.02 more; typer 0.28, which pyproject pins, has none (skipped).
    for name in ("aiohttp", "pyarrow.parquet", "jinja2", "yaml", "jsonschema",
                 "engine.run.runner", "engine.suite.loader", "typer._adapters", "pandas", "pyarrow.dataset",
                 "engine.analysis", "engine.analysis.render", "engine.analysis.report", "engine.cli.analyze_filters",
                 "engine.results.folder", "engine.results.remote"):
        try:
            __import__(name)
        except ImportError:
            pass
    sock = socket.socket(fileno=fd)
    sock.sendall(b"ready\n")
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 4, 3)
        except OSError:
            return
        if not msg:
            return
        (n,) = struct.unpack("!I", msg)
        data = b""
        while len(data) < n:
            data += sock.recv(n - len(data))
        req = json.loads(data)
        pid = os.fork()
        if pid == 0:
            sock.close()
            _child(req["argv"], req["cwd"], req["env"], fds)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        for f in fds:
            os.close(f)
        sock.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        sock.sendall(f"{code}\n".encode())


if __name__ == "__main__" and sys.argv[1:2] == ["--zygote"]:
    _serve(int(sys.argv[2]))
