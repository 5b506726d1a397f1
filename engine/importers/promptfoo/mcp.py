"""A promptfoo provider's `config.mcp` block as the `mcp:` of its models file entry (docs/agents.md section 10).

    config:                               ->  mcp:
      mcp:                                      - name: memory
        enabled: true                             command: [npx, -y, '@modelcontextprotocol/server-memory']
        timeout: 30000                            timeout_s: 30
        server: {command: npx, args: [-y, '@modelcontextprotocol/server-memory'], name: memory}
        # or servers: [...]; a server may be {url, headers} instead

A header's value is never copied: it becomes `headers_env` naming a variable to export (the note says which);
an `env` value whose name looks like a key is left out the same way. What has no counterpart is noted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["mcp_servers"]

_SERVER_KEYS = ("name", "command", "args", "url", "headers", "env")
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_SECRET_NAME = re.compile(r"key|token|secret|passw|auth|credential|cookie", re.IGNORECASE)   # names a secret


def mcp_servers(block: Any, model: str, note: Callable[[str], None]) -> list[dict[str, Any]]:
    """The `mcp:` entries of the model `model` from promptfoo's `config.mcp`; what is not carried goes to `note`."""
    if not isinstance(block, Mapping):
        note(f"provider {model}: `mcp` is not a mapping; not imported")
        return []
    if block.get("enabled") is not True:
        note(f"provider {model}: `mcp` is not enabled; not imported")
        return []
    listed = block.get("servers")
    raw: list[Any] = list(listed) if isinstance(listed, list) else [block.get("server")]
    timeout = block.get("timeout")
    left = sorted(str(k) for k in block if k not in ("enabled", "server", "servers", "timeout"))
    if left:
        note(f"provider {model}: mcp {', '.join(left)} not imported (no counterpart; tools: [...] in the `mcp:` "
             "entry offers only some tools)")
    out: list[dict[str, Any]] = []
    for index, server in enumerate(raw):
        if not isinstance(server, Mapping) or not (server.get("command") or server.get("url")):
            note(f"provider {model}: MCP server {index + 1} has neither `command` nor `url`; not imported")
            continue
        name = _NAME.sub("-", str(server.get("name") or f"mcp{index + 1 if len(raw) > 1 else ''}")).strip("-.")
        entry: dict[str, Any] = {"name": name or f"mcp{index + 1}"}
        if server.get("command"):
            given_args = server.get("args")
            args: list[Any] = given_args if isinstance(given_args, list) else []
            entry["command"] = [str(server["command"]), *(str(a) for a in args)]
            given_env = server.get("env")
            env: Mapping[Any, Any] = given_env if isinstance(given_env, Mapping) else {}
            kept = {str(k): str(v) for k, v in env.items() if not _SECRET_NAME.search(str(k))}
            if kept:
                entry["env"] = kept
            for variable in sorted(str(k) for k in env if _SECRET_NAME.search(str(k))):
                note(f"provider {model}: MCP server {entry['name']}: env {variable} not copied (it looks like a "
                     "secret); give the server its value another way, e.g. a wrapper script that reads it")
        else:
            entry["url"] = str(server["url"])
            given_headers = server.get("headers")
            headers: Mapping[Any, Any] = given_headers if isinstance(given_headers, Mapping) else {}
            if headers:
                entry["headers_env"] = {}
            for header in headers:
                variable = re.sub(r"[^A-Z0-9_]", "_", f"{entry['name']}_{header}".upper())
                entry["headers_env"][str(header)] = variable
                note(f"provider {model}: MCP server {entry['name']}: the {header} header's value was not copied; "
                     f"export {variable}=... (the value the config gives) before `engine run`")
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
            entry["timeout_s"] = min(round(timeout / 1000, 3), 3600)
        unread = sorted(str(k) for k in server if k not in _SERVER_KEYS)
        if unread:
            note(f"provider {model}: MCP server {entry['name']}: {', '.join(unread)} not imported")
        out.append(entry)
    return out
