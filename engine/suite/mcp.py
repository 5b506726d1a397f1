"""An `mcp:` block: a Model Context Protocol server whose tools an agent test offers, compiled at load.

    mcp:                                   # at the top of a suite, in a test, or in a model's entry
      - name: clock
        command: [mcp-server-time, --local-timezone, Europe/Paris]   # stdio: a command, its own env
        env: {TZ_DATA: /usr/share/zoneinfo}
        tools: [get_current_time]          # offer only these (default: every tool it lists)
        prefix: clock_                     # the model sees clock_get_current_time
        timeout_s: 20                      # starting it, and each call
        scope: attempt                     # one process per attempt (default) or per run
        sandbox: false                     # true: inside the workspace's sandbox
      - name: crm
        url: http://127.0.0.1:8931/mcp     # streamable HTTP
        headers_env: {Authorization: CRM_TOKEN}   # header -> the environment variable holding its value

A block is one mapping or a list of them. Compiling never raises: problems come back as `Problem`s with
their path, so the loader reports them at FILE:LINE:COL. The running side (starting, listing, calling) is
engine.agent.mcp, above this layer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from engine.base.diagnostic import Path, Problem, unknown_keys
from engine.model.mcp_server import DEFAULT_TIMEOUT_S, McpServerSpec

__all__ = ["MAX_TIMEOUT_S", "MCP_KEYS", "compile_mcp", "merge_servers"]

MCP_KEYS = ("name", "command", "env", "url", "headers_env", "tools", "prefix", "timeout_s", "scope", "sandbox")
MAX_TIMEOUT_S = 3600.0
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
PREFIX_PATTERN = r"^[A-Za-z0-9_.-]{1,32}$"


def compile_mcp(value: Any, path: Path, base_dir: str) -> tuple[tuple[McpServerSpec, ...], list[Problem]]:
    """Compile an `mcp:` block (one mapping or a list of them).

    Args:
        value: The block as loaded.
        path: Where it sits (prefixed to every problem's path).
        base_dir: The folder of the file that declares it.

    Returns:
        The servers (empty when there are problems) and the problems.
    """
    items = [(value, path)] if isinstance(value, Mapping) else (
        [(item, path + (i,)) for i, item in enumerate(value)] if isinstance(value, list) else None)
    if items is None or not items:
        return (), [Problem(path, "`mcp` is an MCP server `{name, command: [...]}` or `{name, url}`, or a list "
                            "of them")]
    servers: list[McpServerSpec] = []
    problems: list[Problem] = []
    seen: dict[str, Path] = {}
    for item, here in items:
        spec = _server(item, here, base_dir, problems)
        if spec is None:
            continue
        if spec.name in seen:
            problems.append(Problem(here + ("name",), f"two MCP servers are named '{spec.name}'; give each its own "
                                    "`name`"))
            continue
        seen[spec.name] = here
        servers.append(spec)
    return (tuple(servers) if not problems else ()), problems


def _server(raw: Any, path: Path, base_dir: str, problems: list[Problem]) -> McpServerSpec | None:
    if not isinstance(raw, Mapping):
        problems.append(Problem(path, "an MCP server is a mapping: `{name: NAME, command: [program, args...]}` "
                                "(stdio) or `{name: NAME, url: http://...}` (streamable HTTP)"))
        return None
    before = len(problems)
    problems.extend(unknown_keys(raw, MCP_KEYS, path, "an MCP server"))
    name = raw.get("name")
    if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        problems.append(Problem(path + ("name",) if "name" in raw else path,
                                "an MCP server needs a `name`: letters, digits, _ . - (at most 64), e.g. "
                                "`name: clock`"))
    command, url = raw.get("command"), raw.get("url")
    if (command is None) == (url is None):
        problems.append(Problem(path, "an MCP server needs exactly one of `command: [program, args...]` (a stdio "
                                "server this machine starts) and `url: http://...` (a streamable HTTP server)"))
    if command is not None and (not isinstance(command, list) or not command
                                or not all(isinstance(part, str) and part and "\0" not in part for part in command)):
        problems.append(Problem(path + ("command",), "`command` is the program and its arguments as a list of "
                                "non-empty strings, e.g. `[mcp-server-time, --local-timezone, UTC]`"))
    if url is not None and (not isinstance(url, str) or not re.match(r"^https?://[^\s]+$", url)):
        problems.append(Problem(path + ("url",), "`url` is the server's streamable HTTP endpoint, "
                                "http:// or https://, e.g. `http://127.0.0.1:8931/mcp`"))
    if isinstance(url, str) and re.match(r"^https?://[^/@\s]*@", url):
        problems.append(Problem(path + ("url",), "`url` must not hold credentials (user:secret@): send them in a "
                                "header whose value comes from the environment, `headers_env: {Authorization: "
                                "MY_TOKEN_VAR}`"))
    env = _string_map(raw, "env", path, problems, "`env` maps variable names to their values (text), e.g. "
                      "`env: {TZ: UTC}`", ENV_NAME_PATTERN, "a variable name: letters, digits and _")
    headers_env = _string_map(raw, "headers_env", path, problems, "`headers_env` maps an HTTP header to the name "
                              "of the environment variable that holds its value, e.g. `{Authorization: "
                              "CRM_TOKEN}`", r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$", "an HTTP header name")
    for header, variable in headers_env.items():
        if not re.match(ENV_NAME_PATTERN, variable):
            problems.append(Problem(path + ("headers_env", header), f"the value for {header} is not an environment "
                                    "variable name: write the variable's name (its value is read when the run "
                                    "starts), never the secret itself"))
    if command is not None and headers_env:
        problems.append(Problem(path + ("headers_env",), "`headers_env` is for a `url:` server; a stdio server "
                                "gets its settings through `env`", key=True))
    if url is not None and env:
        problems.append(Problem(path + ("env",), "`env` is for a `command:` server (the process it starts); an "
                                "HTTP server takes `headers_env`", key=True))
    tools = raw.get("tools")
    if tools is not None and (not isinstance(tools, list) or not tools
                              or not all(isinstance(t, str) and t for t in tools)):
        problems.append(Problem(path + ("tools",), "`tools` lists the server's tools to offer, by the names the "
                                "server gives them, e.g. `tools: [get_current_time]`"))
    prefix = raw.get("prefix", "")
    if not isinstance(prefix, str) or (prefix and not re.match(PREFIX_PATTERN, prefix)):
        problems.append(Problem(path + ("prefix",), "`prefix` is put before each tool's name: letters, digits, "
                                "_ . - (at most 32), e.g. `prefix: clock_`"))
    timeout = raw.get("timeout_s", DEFAULT_TIMEOUT_S)
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout)
            or timeout <= 0 or timeout > MAX_TIMEOUT_S):
        problems.append(Problem(path + ("timeout_s",), f"`timeout_s` is seconds, above 0 and at most "
                                f"{MAX_TIMEOUT_S:g} (the limit of starting the server and of each call)"))
    scope = raw.get("scope", "attempt")
    if scope not in ("attempt", "run"):
        problems.append(Problem(path + ("scope",), "`scope` is `attempt` (a server per attempt, the default) or "
                                "`run` (one server for the whole run)"))
    sandbox = raw.get("sandbox", False)
    if not isinstance(sandbox, bool):
        problems.append(Problem(path + ("sandbox",), "`sandbox` is true or false"))
    elif sandbox and url is not None:
        problems.append(Problem(path + ("sandbox",), "`sandbox: true` runs a `command:` server in the workspace's "
                                "sandbox; an HTTP server is not started by the engine"))
    elif sandbox and scope == "run":
        problems.append(Problem(path + ("sandbox",), "`sandbox: true` runs the server in one attempt's workspace "
                                "sandbox, so it needs `scope: attempt`"))
    if len(problems) > before:
        return None
    return McpServerSpec(name=str(name), command=tuple(command or ()), env=env,
                         url=url, headers_env=headers_env,
                         tools=tuple(tools) if tools is not None else None, prefix=str(prefix),
                         timeout_s=float(timeout), scope=scope, sandbox=bool(sandbox), base_dir=base_dir)


def _string_map(raw: Mapping[str, Any], key: str, path: Path, problems: list[Problem], shape: str,
                key_pattern: str, key_words: str) -> dict[str, str]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(Problem(path + (key,), shape))
        return {}
    out: dict[str, str] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not re.match(key_pattern, name):
            problems.append(Problem(path + (key, str(name)), f"'{name}' is not {key_words}", key=True))
            continue
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            problems.append(Problem(path + (key, name), shape))
            continue
        out[name] = str(item)
    return out


def merge_servers(*levels: tuple[McpServerSpec, ...]) -> tuple[McpServerSpec, ...]:
    """The servers a test is offered: each level's servers, a later level's replacing an earlier one of the
    same name (suite, then test; the model's are added when the run starts)."""
    merged: dict[str, McpServerSpec] = {}
    for level in levels:
        for spec in level:
            merged[spec.name] = spec
    return tuple(merged.values())
