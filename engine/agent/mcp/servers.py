"""The MCP servers of a run: which process answers which conversation's calls, and when each stops.

    scope: attempt   a server started for one conversation (its workspace as the working folder, or inside
                     the workspace's sandbox with `sandbox: true`) and stopped when the conversation ends
    scope: run       one server for every conversation that declares the same block, started on first use,
                     stopped at the end of the run (`McpServers.aclose`); a server that failed to start is
                     not started again (each conversation that needs it gets the same error row), one that
                     died after starting is started afresh for the next conversation

`McpServers.tools_for(servers)` is where a conversation gets its tools: every server's listed tools, named as
the model sees them, checked for clashes (two servers, or a server and the suite, offering one name).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from pathlib import Path

from engine.agent.mcp.server import McpServer
from engine.agent.mcp.tool import McpTool
from engine.errors import McpServerError
from engine.model.mcp_server import McpServerSpec

__all__ = ["McpServers", "offered_tools"]

#: Makes the argv of a `sandbox: true` server for one attempt (the workspace's sandbox wrapper), or None.
SandboxArgv = Callable[[McpServerSpec], Sequence[str]]


class McpServers:
    """The run's MCP servers (one instance per run; an instance per `engine validate` too)."""

    def __init__(self) -> None:
        self._shared: dict[str, asyncio.Task[McpServer]] = {}
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def tools_for(self, specs: Sequence[McpServerSpec], *, taken: Collection[str] = (),
                        cwd: Path | None = None, sandbox_argv: SandboxArgv | None = None
                        ) -> AsyncIterator[dict[str, McpTool]]:
        """The tools of these servers for one conversation; its `scope: attempt` servers stop on leaving.

        Args:
            specs: The servers the conversation is offered.
            taken: Names already offered (the suite's own tools): a server tool of the same name is an error.
            cwd: The conversation's workspace (its `scope: attempt` stdio servers' working folder), or None.
            sandbox_argv: Wraps a `sandbox: true` server's command in the workspace's sandbox.

        Raises:
            McpServerError: A server did not start, or its tools clash with another's.
        """
        own: list[McpServer] = []
        try:
            servers = []
            for spec in specs:
                if spec.scope == "run":
                    servers.append(await self._run_server(spec))
                    continue
                argv = None
                if spec.sandbox:
                    if sandbox_argv is None:
                        raise McpServerError(f"MCP server '{spec.name}' has `sandbox: true`, which runs it in the "
                                             "test's workspace sandbox, and this test has no `workspace:`")
                    argv = sandbox_argv(spec)
                server = McpServer(spec, cwd=cwd, argv=argv)
                own.append(server)
                await server.start()
                servers.append(server)
            yield offered_tools(servers, taken)
        finally:
            await asyncio.gather(*(server.close() for server in own))

    async def _run_server(self, spec: McpServerSpec) -> McpServer:
        key = json.dumps([spec.hashed(), spec.base_dir], sort_keys=True)
        async with self._lock:
            task = self._shared.get(key)
            if task is not None and task.done() and not task.cancelled() and task.exception() is None \
                    and task.result().broken:
                await task.result().close()   # died after it started: a fresh one for this conversation
                task = None
            if task is None:
                task = asyncio.create_task(_started(McpServer(spec)))
                self._shared[key] = task
        return await asyncio.shield(task)

    async def aclose(self) -> None:
        """Stop every `scope: run` server."""
        tasks = list(self._shared.values())
        self._shared.clear()
        for task in tasks:
            if not task.done():
                task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(r.close() for r in results if isinstance(r, McpServer)))


async def _started(server: McpServer) -> McpServer:
    await server.start()
    return server


def offered_tools(servers: Sequence[McpServer], taken: Collection[str] = ()) -> dict[str, McpTool]:
    """Every server's tools by the name the model sees; a name offered twice is an error naming both."""
    tools: dict[str, McpTool] = {}
    for server in servers:
        for listed in server.tools:
            name = server.spec.offered_name(listed.name)
            if name in taken:
                raise McpServerError(f"MCP server '{server.spec.name}' offers a tool named '{name}', as the suite's "
                                     "own `tools:` do; give the server a `prefix:`")
            other = tools.get(name)
            if other is not None:
                raise McpServerError(f"MCP servers '{other.server.spec.name}' and '{server.spec.name}' both offer a "
                                     f"tool named '{name}'; give one of them a `prefix:`")
            tools[name] = McpTool(name, listed, server)
    return tools
