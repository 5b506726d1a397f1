"""`engine validate`'s look at the MCP servers: each started once (within its `timeout_s`), its tools listed, and
every tool name a check refers to looked up among the tools its test is offered.

A server that does not start is an error at its `mcp:` block (the run would give every conversation that needs
it an error row); one that starts is a note listing its tools. A check naming a tool no server, declared tool
or built-in of its test offers is an error at the test (it could only ever see that name as invented); names
under `not:` are left alone (a check that a tool was *not* called may name one nobody offers). `sandbox: true`
servers start inside an attempt's workspace sandbox only, so they are noted, not started.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from engine.agent.mcp.server import McpServer
from engine.errors import Diagnostic, McpServerError
from engine.model.mcp_server import McpServerSpec
from engine.model.test import Test

__all__ = ["check_servers", "named_tools"]

STARTS_AT_ONCE = 4   # servers started together (each is a process; the machine may be small)


def check_servers(tests: Sequence[Test], model_servers: Iterable[McpServerSpec] = ()) -> list[Diagnostic]:
    """Start every distinct server of `tests` and of the models once, list its tools, check the checks' names.

    Args:
        tests: The loaded tests.
        model_servers: The servers of the models file's entries (offered to every agent test of those models).
    """
    specs: dict[str, McpServerSpec] = {}
    for spec in [*(s for test in tests for s in test.mcp), *model_servers]:
        specs.setdefault(_key(spec), spec)
    if not specs:
        return []
    listed = asyncio.run(_list_all(list(specs.values())))
    out: list[Diagnostic] = []
    for key, spec in specs.items():
        file, line, col = spec.declared
        result = listed[key]
        if isinstance(result, str):
            out.append(Diagnostic(file, line, col, result, severity="note" if spec.sandbox else "error"))
        else:
            names = ", ".join(result) or "none"
            out.append(Diagnostic(file, line, col, f"MCP server '{spec.name}' lists {len(result)} tool(s): {names}",
                                  severity="note"))
    model_tools = {spec.offered_name(name) for spec in model_servers for name in _names(listed.get(_key(spec)))}
    seen: set[tuple[str, str]] = set()
    for test in tests:
        if not test.mcp or (test.file, test.id) in seen:
            continue
        seen.add((test.file, test.id))
        offered = set(test.tool_schemas) | model_tools
        unknown = False
        for spec in test.mcp:
            found = listed.get(_key(spec))
            unknown |= not isinstance(found, list)   # not listed: the names cannot be checked
            offered |= {spec.offered_name(name) for name in _names(found)}
        if unknown:
            continue
        missing = sorted({name for name in named_tools(test.eval) if name not in offered})
        if missing:
            out.append(Diagnostic(test.file, test.line, 1, f"test '{test.id}': its checks name "
                                  f"{', '.join(map(repr, missing))}, which it is not offered (its tools: "
                                  f"{', '.join(sorted(offered)) or 'none'}); a call to it could only be invented"))
    return out


def named_tools(spec: Any) -> Iterator[str]:
    """The tool names an evaluator spec refers to (`tool_call`, `tool_sequence`, `parallel`), outside `not:`."""
    if isinstance(spec, list):
        for item in spec:
            yield from named_tools(item)
        return
    if not isinstance(spec, Mapping):
        return
    for kind, value in spec.items():
        if kind == "not":
            continue
        if kind == "tool_call" and isinstance(value, Mapping):
            calls = value["calls"] if isinstance(value.get("calls"), list) else [value]
            yield from (str(call["name"]) for call in calls if isinstance(call, Mapping) and call.get("name"))
        elif kind in ("tool_sequence", "parallel"):
            names = value.get("calls", value.get("sequence")) if isinstance(value, Mapping) else value
            if isinstance(names, list):
                yield from (name for name in names if isinstance(name, str))
        elif isinstance(value, (list, Mapping)):
            yield from named_tools(value)


def _names(found: list[str] | str | None) -> list[str]:
    return found if isinstance(found, list) else []


def _key(spec: McpServerSpec) -> str:
    return json.dumps([spec.hashed(), spec.base_dir], sort_keys=True)


async def _list_all(specs: Sequence[McpServerSpec]) -> dict[str, list[str] | str]:
    gate = asyncio.Semaphore(STARTS_AT_ONCE)

    async def one(spec: McpServerSpec) -> list[str] | str:
        if spec.sandbox:
            return (f"MCP server '{spec.name}' runs in each attempt's workspace sandbox (`sandbox: true`), so "
                    "validate does not start it; its tools are listed when a run starts it")
        async with gate:
            server = McpServer(spec)
            try:
                await server.start()
                return [tool.name for tool in server.tools]
            except McpServerError as exc:
                return f"{exc}; validate started it to list its tools (`engine validate --no-start` skips that)"
            finally:
                await server.close()

    results = await asyncio.gather(*(one(spec) for spec in specs))
    return {_key(spec): result for spec, result in zip(specs, results, strict=True)}
