"""An MCP server's tool with the face of a declared one, so the agent loop offers, checks and answers it alike.

Arguments are checked against the input schema the server listed before anything is sent (a call that does
not fit is `bad_args`, as for any tool). The result's text parts reach the model as the `tool` message, one
after another; other parts (images, audio, resources) as a line of JSON naming their type and size; a result
with no content but `structuredContent` as that JSON. A result the server marks `isError` is the tool's
`error` status; the server failing (gone, silent past `timeout_s`, out of protocol) is not the tool's
answer but `McpServerError`, which ends the conversation as an error row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonschema.exceptions import best_match

from engine.agent.mcp.server import ListedTool, McpServer
from engine.base.compiled_schema import schema_error, schema_validator
from engine.model.tools import ToolAnswer, error_text

__all__ = ["RESULT_MAX_CHARS", "McpTool"]

RESULT_MAX_CHARS = 256 * 1024   # the most of one result the model (and the row) gets; the rest is cut, saying so


class McpTool:
    """One tool of a running MCP server, offered under `name` (the server's name with the block's prefix)."""

    def __init__(self, name: str, listed: ListedTool, server: McpServer) -> None:
        self.name = name
        self.listed = listed
        self.server = server
        schema = dict(listed.input_schema) or {"type": "object", "properties": {}}
        self._schema = schema
        self._checkable = schema_error(schema) is None   # a schema the validator cannot read is left to the server

    @property
    def definition(self) -> dict[str, Any]:
        """The OpenAI tool definition offered to the model."""
        return {"type": "function", "function": {"name": self.name, "description": self.listed.description,
                                                 "parameters": self._schema}}

    def argument_problem(self, arguments: Any) -> str | None:
        """Why these decoded arguments do not fit the tool's input schema, or None when they do."""
        if not isinstance(arguments, Mapping):
            return f"the arguments must be a JSON object, got {json.dumps(arguments)[:80]}"
        if not self._checkable:
            return None
        error = best_match(schema_validator(self._schema).iter_errors(dict(arguments)))
        if error is None:
            return None
        where = ".".join(str(p) for p in error.absolute_path)
        return f"{where}: {error.message}" if where else error.message

    async def answer(self, arguments: Mapping[str, Any], state: Mapping[str, Any]) -> ToolAnswer:
        """The server's answer to one call (raises `McpServerError` when the server fails)."""
        result = await self.server.call(self.listed.name, arguments)
        text = _content_text(result)
        if result.is_error:
            return ToolAnswer("error", error_text(text), text, None)
        return ToolAnswer("ok", text, text, None)


def _content_text(result: Any) -> str:
    parts: list[str] = []
    for block in result.content or ():
        kind = getattr(block, "type", "?")
        if kind == "text":
            parts.append(str(block.text))
        else:
            described: dict[str, Any] = {"type": kind}
            for field in ("mime_type", "uri", "name"):
                value = getattr(block, field, None)
                if value is not None:
                    described[field] = str(value)
            data = getattr(block, "data", None)
            if isinstance(data, str):
                described["base64_chars"] = len(data)
            parts.append(json.dumps(described, ensure_ascii=False))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    if len(text) > RESULT_MAX_CHARS:
        text = text[:RESULT_MAX_CHARS] + f"\n[result cut at {RESULT_MAX_CHARS} of {len(text)} characters]"
    return text
