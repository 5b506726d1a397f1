"""Small MCP servers made with the official SDK, for the engine's MCP tests: `python mcp_fixture_server.py MODE`.

    stdio            tools: lookup_order, whoami (its environment and folder, to check what the engine passes),
                     boom (writes to stderr, then the process dies mid-call), stall (never answers)
    raw              the same four tools, JSON-RPC written out by hand with the standard library only: it starts
                     in milliseconds where the SDK's imports take seconds, so the tests' timeouts can be short
    http PORT TOKEN  lookup_order over streamable HTTP on 127.0.0.1:PORT/mcp; every request must carry
                     `Authorization: Bearer TOKEN` (else 401)
    silent           reads its stdin and never writes: a server that never answers, not even `initialize`
    garbage          answers every line with text that is not JSON-RPC
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

ORDERS = {"A-17": "shipped", "B-4": "delayed"}


def _server() -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("fixture")

    @server.tool()
    def lookup_order(order_id: str) -> str:
        """The status of an order, by its id (e.g. A-17)."""
        status = ORDERS.get(order_id)
        if status is None:
            raise ValueError(f"no order {order_id}")
        return json.dumps({"order_id": order_id, "status": status})

    @server.tool()
    def whoami() -> str:
        """What this server sees of its environment."""
        return json.dumps({"env": sorted(os.environ), "home": os.environ.get("HOME"), "cwd": os.getcwd(),
                           "greeting": os.environ.get("GREETING")})

    @server.tool()
    def boom() -> str:
        """Dies mid-call."""
        sys.stderr.write("fixture: about to crash on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    @server.tool()
    def stall() -> str:
        """Never answers."""
        time.sleep(3600)
        return "late"

    return server


def _raw() -> None:
    tools = [{"name": name, "description": doc, "inputSchema": schema} for name, doc, schema in (
        ("lookup_order", "The status of an order, by its id (e.g. A-17).",
         {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}),
        ("whoami", "What this server sees of its environment.", {"type": "object", "properties": {}}),
        ("boom", "Dies mid-call.", {"type": "object", "properties": {}}),
        ("stall", "Never answers.", {"type": "object", "properties": {}}))]

    def send(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        request = json.loads(line)
        method, ident, params = request.get("method"), request.get("id"), request.get("params") or {}
        if ident is None:
            continue   # a notification
        if method == "initialize":
            send({"id": ident, "result": {"protocolVersion": params.get("protocolVersion"),
                                          "capabilities": {"tools": {}},
                                          "serverInfo": {"name": "raw-fixture", "version": "1"}}})
        elif method == "tools/list":
            send({"id": ident, "result": {"tools": tools}})
        elif method == "tools/call":
            name, args = params.get("name"), params.get("arguments") or {}
            if name == "boom":
                sys.stderr.write("fixture: about to crash on purpose\n")
                sys.stderr.flush()
                os._exit(3)
            if name == "stall":
                continue
            if name == "whoami":
                text = json.dumps({"env": sorted(os.environ), "home": os.environ.get("HOME"), "cwd": os.getcwd(),
                                   "greeting": os.environ.get("GREETING"), "pid": os.getpid(), "uid": os.getuid(),
                                   "sees": os.path.exists(os.environ.get("PROBE") or "/nonexistent")})
            else:
                status = ORDERS.get(str(args.get("order_id")))
                text = json.dumps({"order_id": args.get("order_id"), "status": status})
            send({"id": ident, "result": {"content": [{"type": "text", "text": text}], "isError": status is None
                                          if name == "lookup_order" else False}})
        else:
            send({"id": ident, "error": {"code": -32601, "message": f"no method {method}"}})


def _http(port: int, token: str) -> None:
    import uvicorn

    app = _server().streamable_http_app(json_response=True)

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or ())
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


def main() -> None:
    mode = sys.argv[1]
    if mode == "stdio":
        _server().run()
    elif mode == "raw":
        _raw()
    elif mode == "http":
        _http(int(sys.argv[2]), sys.argv[3])
    elif mode == "silent":
        for _ in sys.stdin:
            pass
        time.sleep(3600)
    elif mode == "garbage":
        for _ in sys.stdin:
            sys.stdout.write("this is not JSON-RPC\n")
            sys.stdout.flush()
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
