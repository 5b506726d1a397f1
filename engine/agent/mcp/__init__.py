"""MCP servers as tool sources of agent tests (docs/agents.md, "MCP servers").

    server.py    McpServer: one server (stdio process or streamable HTTP endpoint) through the `mcp` SDK
    tool.py      McpTool: one of its tools with the face of a declared tool (definition, argument check, answer)
    servers.py   McpServers: the run's servers by scope, and the tools a conversation is offered

The `mcp:` block itself is compiled by the suite loader (engine.suite.mcp); the SDK is imported only when a
server starts, so suites without `mcp:` never load it.
"""
