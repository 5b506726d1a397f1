"""One running MCP server and the engine's session with it, through the official SDK (`mcp` on PyPI).

    McpServer(spec).start()      the process spawned (stdio) or the endpoint reached (HTTP), the session
                                 initialised and the tools listed, all within `timeout_s`
    server.tools                 what it listed (name, description, input schema), filtered by `tools:`
    await server.call(name, a)   one tools/call within `timeout_s` -> the SDK's CallToolResult
    await server.close()         the session ended, the process stopped (stdin closed, then the tree killed)

The SDK's client holds a task group, which must be entered and left by one task: a task of its own owns
it (`_own`) for the server's whole life, and calls come from any task (the session's requests travel on
memory streams; the SDK gives each request its own JSON-RPC id and routes each answer by id, so calls of
64 conversations at once share one process safely).

A stdio server gets the environment its `env:` gives it, PATH and a private HOME, nothing else (not the
engine's API keys): it is started through `env -i`. Its working folder is the test's workspace when there
is one, else the folder of the file that declared it. Its stderr goes to a pipe the engine drains into the
last `STDERR_TAIL` bytes, which every failure message ends with.

Every failure (the command missing, the process dying, a hang, a reply that is not JSON-RPC, a listing
without a tool the block names) is an `McpServerError`, whose text names the server and never a header
value; the caller makes it an error row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import McpServerError
from engine.model.mcp_server import McpServerSpec
from engine.redact import mask_url, mask_urls

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import CallToolResult

__all__ = ["STDERR_TAIL", "ListedTool", "McpServer", "server_argv"]

STDERR_TAIL = 2000          # bytes of a server's stderr kept (the end) and shown in its errors
MAX_PAGES = 100             # tools/list pages read at most (a server that paginates for ever cannot hang a start)
MAX_TOOLS = 512             # tools a server may list
STOP_S = 8.0                # closing: the SDK's own bounded shutdown (stdin closed, TERM, KILL) and a margin
INSTALL_HINT = "MCP servers need the `mcp` package: pip install 'llm-eval-engine[mcp]'"


@dataclass(frozen=True, slots=True)
class ListedTool:
    """A tool as its server lists it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


class _StderrTail:
    """A pipe for a server's stderr, drained on the event loop into its last `STDERR_TAIL` bytes."""

    def __init__(self) -> None:
        self._read, write = os.pipe()
        os.set_blocking(self._read, False)
        self.writer = os.fdopen(write, "w")      # handed to the process as its stderr
        self._tail = b""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._read, self._drain)
        self._open = True

    def _drain(self) -> None:
        try:
            chunk = os.read(self._read, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._stop_reading()
            return
        self._tail = (self._tail + chunk)[-STDERR_TAIL:]

    def spawned(self) -> None:
        """The process has its copy: the engine's write end is closed, so the pipe ends with the process."""
        with contextlib.suppress(OSError):
            self.writer.close()

    def text(self) -> str:
        """The tail, each line's runs of blanks made one (log frames drawn with box characters stay readable)."""
        self._drain_now()
        lines = (" ".join(line.split()) for line in self._tail.decode("utf-8", "replace").splitlines())
        return " / ".join(line for line in lines if line)[-STDERR_TAIL // 2:]

    def _drain_now(self) -> None:
        if not self._open:
            return
        for _ in range(64):   # what is already in the pipe (bounded: at most 4 MiB read, the tail kept)
            before = self._tail
            self._drain()
            if not self._open or self._tail == before:
                break

    def _stop_reading(self) -> None:
        if self._open:
            self._open = False
            self._loop.remove_reader(self._read)
            os.close(self._read)

    def close(self) -> None:
        self.spawned()
        self._stop_reading()


def server_argv(spec: McpServerSpec, home: str) -> list[str]:
    """The argv that starts a stdio server with only its own environment (`env -i`), PATH and HOME.

    The program is looked up on the engine's PATH, then beside the engine's own interpreter (a server
    installed into the engine's environment, as `pip install mcp-server-time` does, is found either way).

    Raises:
        McpServerError: The program is not found.
    """
    program = spec.command[0]
    path = os.environ.get("PATH", os.defpath)
    found = program if os.path.isabs(program) else shutil.which(
        program, path=os.pathsep.join([path, os.path.dirname(sys.executable)]))
    if program.startswith(("./", "../")):
        found = str((Path(spec.base_dir) / program).resolve())
    if not found or not os.access(found, os.X_OK):
        raise McpServerError(f"MCP server '{spec.name}': its command '{program}' is not an installed program; "
                             "install it (e.g. `pip install mcp-server-time`) or give its full path")
    env_tool = shutil.which("env") or "/usr/bin/env"
    assignments = [f"PATH={path}", f"HOME={home}", *(f"{k}={v}" for k, v in spec.env.items())]
    return [env_tool, "-i", *assignments, found, *spec.command[1:]]


class McpServer:
    """One MCP server, started once and used by any number of conversations until `close`.

    Args:
        spec: The server as declared.
        cwd: The stdio server's working folder (a workspace), or None for the folder of its declaration.
        argv: The command to start instead of the spec's own (the workspace sandbox's wrapper), or None.
    """

    def __init__(self, spec: McpServerSpec, *, cwd: Path | None = None, argv: Sequence[str] | None = None) -> None:
        self.spec = spec
        self._cwd = cwd
        self._argv = list(argv) if argv is not None else None
        self.tools: tuple[ListedTool, ...] = ()
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._stop: asyncio.Event | None = None
        self._stderr: _StderrTail | None = None
        self._home: str | None = None
        self._broken: str | None = None

    @property
    def broken(self) -> bool:
        """Whether it failed or ended after it started (its calls can only fail now)."""
        return self._broken is not None

    @property
    def home(self) -> str | None:
        """The stdio server's private HOME (made at start), or None."""
        return self._home

    async def start(self) -> None:
        """Start the server, initialise the session and list its tools, within `timeout_s`.

        Raises:
            McpServerError: It did not start, did not answer in time, or lists none of the tools named.
        """
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._stop = asyncio.Event()
        self._owner = asyncio.create_task(self._own(), name=f"mcp:{self.spec.name}")
        try:
            async with asyncio.timeout(self.spec.timeout_s):
                await asyncio.shield(self._ready)
        except TimeoutError:
            await self.close()
            raise McpServerError(self._said(f"did not start within {self.spec.timeout_s:g} s (timeout_s)")
                                 ) from None
        except McpServerError:
            await self.close()
            raise
        except BaseException:
            await self.close()
            raise

    async def call(self, name: str, arguments: Mapping[str, Any]) -> CallToolResult:
        """Call one of its tools by the name the server gives it.

        Raises:
            McpServerError: The server is gone, did not answer within `timeout_s`, or answered out of protocol.
        """
        if self._broken is not None:
            raise McpServerError(self._said(self._broken))
        client = self._client
        if client is None:
            raise McpServerError(self._said("is not running"))
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED
        try:
            async with asyncio.timeout(self.spec.timeout_s):
                return await self._racing_owner(client.call_tool(name, dict(arguments)))
        except TimeoutError:
            raise McpServerError(self._said(f"did not answer a call of {name} within {self.spec.timeout_s:g} s "
                                            "(timeout_s)")) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise McpServerError(self._said(f"closed its connection during a call of {name} (the process "
                                                "ended or crashed)")) from None
            raise McpServerError(self._said(f"answered a call of {name} with a protocol error: "
                                            f"{_short(str(exc))}")) from None
        except McpServerError:
            raise
        except Exception as exc:  # noqa: BLE001 - anything the SDK raises on a broken server is this server's error
            raise McpServerError(self._said(f"failed a call of {name}: {type(exc).__name__}: {_short(str(exc))}")
                                 ) from None

    async def _racing_owner(self, call: Any) -> Any:
        """The call's result, or an error as soon as the server's session ends (a crash mid-call)."""
        owner = self._owner
        task = asyncio.ensure_future(call)
        try:
            waited = {task} if owner is None else {task, owner}
            done, _ = await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            raise McpServerError(self._said(self._broken or "stopped while a call was waiting"))
        finally:
            if not task.done():
                task.cancel()
            task.add_done_callback(_retrieved)

    async def close(self) -> None:
        """Stop the server (bounded) and remove its private HOME. Safe to call more than once."""
        if self._stop is not None:
            self._stop.set()
        owner = self._owner
        if owner is not None and not owner.done() and self._client is None:
            owner.cancel()   # still starting (or hung starting): nothing to end politely
        if owner is not None and not owner.done():
            await asyncio.wait({owner}, timeout=STOP_S)   # never raises the owner's own end
            if not owner.done():
                owner.cancel()
                await asyncio.wait({owner}, timeout=STOP_S)
        self._client = None
        if self._stderr is not None:
            self._stderr.close()
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)

    # -- the owner task ---------------------------------------------------------------------------------

    async def _own(self) -> None:
        assert self._ready is not None and self._stop is not None
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await self._connect(stack)
                self.tools = await self._list(client)
                self._client = client
                self._ready.set_result(None)
                await self._stop.wait()
        except McpServerError as exc:
            self._fail(str(exc))
        except Exception as exc:  # noqa: BLE001 - any failure of the SDK or the process is this server's error
            self._fail(self._said(_why(exc)))
        except asyncio.CancelledError:
            self._fail(self._said("was stopped"))
            raise
        else:
            if not self._stop.is_set():
                self._fail(self._said("ended its session"))
        finally:
            if self._ready is not None and not self._ready.done():
                self._ready.set_exception(McpServerError(self._said("ended before it started")))
            if self._broken is None and not self._stop.is_set():
                self._broken = "ended its session"

    def _fail(self, message: str) -> None:
        if self._broken is None:
            self._broken = message
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(McpServerError(self._broken))
            self._ready.exception()   # retrieved: `start` raises it when it still waits, else no one needs it

    async def _on_message(self, message: Any) -> None:
        """The SDK's transport faults: a line that is not JSON-RPC ends the server at once (calls waiting on it
        fail now, not at their timeout)."""
        if isinstance(message, Exception):
            self._fail(self._said(f"answered something that is not MCP's JSON-RPC ({_short(str(message), 200)})"))
            if self._owner is not None:
                self._owner.cancel()

    async def _connect(self, stack: contextlib.AsyncExitStack) -> Client:
        try:
            from mcp import Client
        except ImportError:
            raise McpServerError(f"MCP server '{self.spec.name}': {INSTALL_HINT}") from None
        _quiet_sdk()
        if self.spec.url is not None:
            transport = await self._http_transport(stack)
            client = Client(transport, cache=None, message_handler=self._on_message)
        else:
            client = Client(self._stdio_params(), cache=None, message_handler=self._on_message)
        await stack.enter_async_context(client)
        return client

    def _stdio_params(self) -> Any:
        from mcp import StdioServerParameters
        self._home = tempfile.mkdtemp(prefix=f"engine-mcp-{self.spec.name}-")
        argv = self._argv if self._argv is not None else server_argv(self.spec, self._home)
        self._stderr = _StderrTail()
        cwd = self._cwd if self._cwd is not None else Path(self.spec.base_dir)
        params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(cwd))
        return _SpawnWatch(params, self._stderr)

    async def _http_transport(self, stack: contextlib.AsyncExitStack) -> Any:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client
        headers: dict[str, str] = {}
        for header, variable in self.spec.headers_env.items():
            value = os.environ.get(variable)
            if not value:
                raise McpServerError(f"MCP server '{self.spec.name}': the environment variable {variable} "
                                     f"(for its {header} header) is not set; export it before the run")
            headers[header] = value
        import httpx2
        http = await stack.enter_async_context(create_mcp_http_client(
            headers=headers, timeout=httpx2.Timeout(self.spec.timeout_s)))
        assert self.spec.url is not None
        return streamable_http_client(self.spec.url, http_client=http)

    async def _list(self, client: Client) -> tuple[ListedTool, ...]:
        listed: list[ListedTool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                schema = tool.input_schema if isinstance(tool.input_schema, Mapping) else {}
                listed.append(ListedTool(tool.name, tool.description or "", dict(schema)))
            if len(listed) > MAX_TOOLS:
                raise McpServerError(self._said(f"lists more than {MAX_TOOLS} tools"))
            cursor = page.next_cursor
            if cursor is None:
                break
        if self.spec.tools is None:
            return tuple(listed)
        by_name = {tool.name: tool for tool in listed}
        missing = [name for name in self.spec.tools if name not in by_name]
        if missing:
            names = ", ".join(sorted(by_name)) or "none"
            raise McpServerError(self._said(f"lists no tool named {', '.join(missing)} (its tools: {names}); fix "
                                            "`tools:`"))
        return tuple(by_name[name] for name in self.spec.tools)

    def _said(self, what: str) -> str:
        """A message about this server, ending with the tail of its stderr (stdio) when it wrote any."""
        where = self.spec.url and mask_url(self.spec.url)
        text = f"MCP server '{self.spec.name}'" + (f" ({where})" if where else "") + f" {what}"
        tail = self._stderr.text() if self._stderr is not None else ""
        if tail:
            text += f"; its stderr ends: {tail}"
        return mask_urls(text)


class _SpawnWatch:
    """The SDK's stdio transport, with the engine's stderr pipe handed over once the process exists."""

    def __init__(self, params: Any, stderr: _StderrTail) -> None:
        from mcp.client.stdio import stdio_client
        self._inner = stdio_client(params, errlog=stderr.writer)
        self._stderr = stderr

    async def __aenter__(self) -> Any:
        streams = await self._inner.__aenter__()
        self._stderr.spawned()
        return streams

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A call given up on (timed out, its server gone): its late outcome is read, so asyncio logs nothing."""
    if not task.cancelled():
        task.exception()


def _quiet_sdk() -> None:
    """The SDK logs every fault it also raises (with tracebacks); the engine reports them once, as error rows."""
    sdk = logging.getLogger("mcp")
    if not sdk.handlers:
        sdk.addHandler(logging.NullHandler())
        sdk.propagate = False


def _why(exc: BaseException) -> str:
    """A failure of the SDK or the process, in a few words (an exception group reduced to its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, OSError):
        return f"could not be started: {exc.strerror or exc}"
    name = type(exc).__name__
    text = _short(str(exc))
    if "ValidationError" in name or "JSON" in text:
        return f"answered something that is not MCP's JSON-RPC ({name}: {text})"
    return f"failed: {name}: {text}" if text else f"failed: {name}"


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " …"
