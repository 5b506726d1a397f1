"""The schema of an `mcp:` block (one MCP server or a list), declared alike in a suite, a test and a models-file
entry; engine.suite.mcp compiles it."""

from __future__ import annotations

MCP_SERVER = {
    "title": "MCP server", "type": "object", "additionalProperties": False, "required": ["name"],
    "description": "A Model Context Protocol server whose tools agent tests are offered: a command this machine "
                   "starts (stdio) or a streamable HTTP endpoint. docs/agents.md, section 10.",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                 "description": "The server's name in messages and rows.", "examples": ["clock"]},
        "command": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1},
                    "description": "A stdio server: the program and its arguments (instead of `url`).",
                    "examples": [["mcp-server-time", "--local-timezone", "UTC"]]},
        "env": {"type": "object", "additionalProperties": {"type": ["string", "number"]},
                "description": "The stdio server's environment besides PATH and a private HOME; nothing else of "
                               "the engine's (no API keys) reaches it.", "examples": [{"TZ": "UTC"}]},
        "url": {"type": "string", "pattern": "^https?://", "description": "A streamable HTTP server's endpoint "
                "(instead of `command`).", "examples": ["http://127.0.0.1:8931/mcp"]},
        "headers_env": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "HTTP header -> the name of the environment variable holding its value "
                                       "(read when the server starts, never written anywhere).",
                        "examples": [{"Authorization": "CRM_TOKEN"}]},
        "tools": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1},
                  "description": "Offer only these of its tools (default: every tool it lists).",
                  "examples": [["get_current_time"]]},
        "prefix": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,32}$", "description": "Put before each of its "
                   "tools' names (two servers offering one name).", "examples": ["clock_"]},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600,
                      "description": "The limit of starting it and of each call (default 30); past it the row "
                                     "is an error row."},
        "scope": {"enum": ["attempt", "run"], "description": "`attempt` (default): a server per conversation; "
                  "`run`: one for the whole run, shared."},
        "sandbox": {"type": "boolean", "description": "Run the stdio server inside the test's workspace sandbox "
                    "(default false: on this machine, the workspace as its working folder)."},
    },
    "examples": [{"name": "clock", "command": ["mcp-server-time"], "tools": ["get_current_time"]},
                 {"name": "crm", "url": "http://127.0.0.1:8931/mcp", "headers_env": {"Authorization": "CRM_TOKEN"},
                  "scope": "run"}],
}
# One mapping or a list of them: a closed mapping whose type is also `array` (object keywords apply to the mapping,
# `items` to the list), not a oneOf, so a misspelt key is named as such.
_MCP_OBJECT = {key: MCP_SERVER[key] for key in ("additionalProperties", "required", "properties")}
MCP = {"type": ["object", "array"], "title": "server under mcp", **_MCP_OBJECT, "minItems": 1,
        "items": {"$ref": "#/$defs/mcp_server"},
        "description": "MCP servers whose tools the agent tests are offered beside the suite's own: one server or "
                       "a list. A test with `mcp:` (its own or the suite's) runs as an agent conversation.",
        "examples": MCP_SERVER["examples"]}
MCP_MODEL = {**MCP, "description": "MCP servers whose tools this model's agent tests are offered besides the "
                                     "suite's: one server or a list."}

