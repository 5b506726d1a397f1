"""An MCP stdio server made with the SDK for bench/bench_mcp.py: `echo(token)` answers its token after a random
0-20 ms (so answers leave in another order than the calls came), and appends each token it got to the file
`ECHO_LOG` names (one line each), so the bench can count the calls the server really answered."""

from __future__ import annotations

import asyncio
import os
import random

from mcp.server.mcpserver import MCPServer

server = MCPServer("echo")


@server.tool()
async def echo(token: str) -> str:
    """Answers the token it is given."""
    await asyncio.sleep(random.random() * 0.02)
    with open(os.environ["ECHO_LOG"], "a", encoding="utf-8") as log:
        log.write(token + "\n")
    return token


if __name__ == "__main__":
    server.run()
