"""A scripted multi-turn model behind an OpenAI-compatible endpoint on loopback.

The model is a `Script`: a function from the messages a request carries to the next `Turn`. It reads
the `tool` messages it receives, so it can act on what the declared tools returned::

    def model(messages):
        results = latest_tool_results(messages)
        if not results:
            return Turn(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
        return Turn(content=f"It is {results[0]['temp_c']} degrees.")

    async with ScriptedServer(model, faults={2: 500}) as server:   # the 2nd request gets a 500
        ... call server.base_url ...
        server.requests   # every request body, in arrival order

The server runs on the test's own event loop; it answers in SSE when the request asks for a stream
(content in small chunks, each tool call's arguments split in pieces) and in one JSON body otherwise.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Turn:
    """One reply of the scripted model.

    Args:
        content: The answer text.
        tool_calls: [{"name": ..., "arguments": dict or raw str, "id": optional}].
        model: The served model to report (a gateway answering as another model); None: the one asked.
        usage: The usage object; None sends none.
    """

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    usage: dict[str, Any] | None = field(default_factory=lambda: {"prompt_tokens": 20, "completion_tokens": 6})


Script = Callable[[list[dict[str, Any]]], Turn]


def latest_tool_results(messages: list[dict[str, Any]]) -> list[Any]:
    """The `tool` messages after the last assistant message, in order, JSON-decoded when they are JSON."""
    out: list[Any] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        content = message.get("content")
        try:
            out.append(json.loads(content))
        except (TypeError, ValueError):
            out.append(content)
    return out[::-1]


def model_turns(messages: list[dict[str, Any]]) -> int:
    """How many assistant turns the conversation already has."""
    return sum(1 for message in messages if message.get("role") == "assistant")


class ScriptedServer:
    """The server.

    Args:
        script: The model.
        faults: Request number (1 = the first request) -> HTTP status to answer instead of the script.
        fault: A request body -> an HTTP status to answer instead, or None; for faults that must hit one
            conversation whatever the order requests arrive in (concurrent runs).
        hold: A request body -> whether to hold it back still (asked every 10 ms, the other requests going on
            meanwhile; it is recorded as it arrives): a test holds a conversation until it has seen what it waits for.
    """

    def __init__(self, script: Script, faults: dict[int, int] | None = None,
                 fault: Callable[[dict[str, Any]], int | None] | None = None,
                 hold: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.script = script
        self.faults = dict(faults or {})
        self.fault = fault
        self.hold = hold
        self.requests: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> ScriptedServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        number = len(self.requests)
        while self.hold is not None and self.hold(body):
            await asyncio.sleep(0.01)
        status = self.faults.get(number)
        if status is None and self.fault is not None:
            status = self.fault(body)
        if status is not None:
            return web.json_response({"error": {"message": f"scripted {status}", "code": status}}, status=status,
                                     headers={"retry-after-ms": "10"})   # a quick retry
        turn = self.script(body["messages"])
        served = turn.model or body["model"]
        calls = [{"id": call.get("id", f"srv_{len(self.requests)}_{i}"), "type": "function",
                  "function": {"name": call["name"], "arguments": _raw(call["arguments"])}}
                 for i, call in enumerate(turn.tool_calls)]
        finish = "tool_calls" if calls else "stop"
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": turn.content or None}
            if calls:
                message["tool_calls"] = calls
            out: dict[str, Any] = {"id": "cmpl-scripted", "object": "chat.completion", "model": served,
                                   "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
            if turn.usage is not None:
                out["usage"] = turn.usage
            return web.json_response(out)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(delta: dict[str, Any] | None, finish_reason: str | None = None, **extra: Any) -> None:
            choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
            event = {"id": "cmpl-scripted", "object": "chat.completion.chunk", "model": served, "choices": choices,
                     **extra}
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")

        await send({"role": "assistant", "content": ""})
        for start in range(0, len(turn.content), 5):
            await send({"content": turn.content[start:start + 5]})
        for i, call in enumerate(calls):
            raw = call["function"]["arguments"]
            half = len(raw) // 2
            await send({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                        "function": {"name": call["function"]["name"], "arguments": raw[:half]}}]})
            await send({"tool_calls": [{"index": i, "function": {"arguments": raw[half:]}}]})
        await send({}, finish)
        if turn.usage is not None:
            await send(None, usage=turn.usage)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def _raw(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)
