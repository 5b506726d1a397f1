"""An MCP server as an agent test declares it (`mcp:` in a suite, a test or a model's entry), compiled.

The suite loader builds these (engine.suite.mcp) and the agent loop starts them (engine.agent.mcp); this is
only the declaration, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["DEFAULT_TIMEOUT_S", "McpServerSpec"]

DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """One MCP server as declared (stdio when `command` is set, streamable HTTP when `url` is).

    Args:
        name: The server's name in messages and rows (unique among the servers a test is offered).
        command: The program and its arguments (stdio), or () for an HTTP server.
        env: The environment the stdio server gets besides PATH and a private HOME (nothing else is passed).
        url: The streamable HTTP endpoint, or None for a stdio server.
        headers_env: HTTP header -> the name of the environment variable that holds its value.
        tools: The only tools to offer (as the server names them), or None for all it lists.
        prefix: Put before each tool's name, to tell apart two servers' tools of the same name.
        timeout_s: The limit of starting it (and listing its tools) and of each tool call.
        scope: `attempt`: a process per attempt, stopped with it; `run`: one for the whole run, shared.
        sandbox: Run the stdio server inside the test's workspace sandbox instead of on this machine.
        base_dir: The folder of the file that declared it: a stdio server's working folder without a workspace.
        declared: (file, line, column) of its block, for messages; not compared.
    """

    name: str
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers_env: Mapping[str, str] = field(default_factory=dict)
    tools: tuple[str, ...] | None = None
    prefix: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    scope: Literal["attempt", "run"] = "attempt"
    sandbox: bool = False
    base_dir: str = "."
    declared: tuple[str, int, int] = field(default=("", 0, 0), compare=False)

    @property
    def transport(self) -> str:
        """`stdio` or `http`."""
        return "http" if self.url is not None else "stdio"

    def hashed(self) -> dict[str, Any]:
        """What a test's hash covers of this server: the block as written (never a secret: env names only)."""
        return {"name": self.name, "command": list(self.command), "env": dict(self.env), "url": self.url,
                "headers_env": dict(self.headers_env), "tools": None if self.tools is None else list(self.tools),
                "prefix": self.prefix, "timeout_s": self.timeout_s, "scope": self.scope, "sandbox": self.sandbox}

    def offered_name(self, tool: str) -> str:
        """The name the model sees for the server's tool `tool`."""
        return self.prefix + tool
