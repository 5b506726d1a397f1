"""A fake Anthropic Messages API on loopback, speaking the wire format as Anthropic documents it.

`POST /v1/messages`: a whole `message` object, or (with `"stream": true`) the named SSE events in their
documented order: message_start (usage with cache tokens), ping, one content_block_start / content_block_delta /
content_block_stop run per block (thinking_delta + signature_delta, text_delta, input_json_delta with the
arguments split over `arg_chunks` events, the first one empty), message_delta (stop_reason, output usage),
message_stop. Each event is written on its own, so a client meets them in separate reads. As the API does, a request
with `thinking` enabled is refused (400) when its last assistant turn with a tool_use does not start with the
thinking blocks this server sent in that turn, unchanged (signature included). Faults answer a status
with Anthropic's error body (`{"type": "error", "error": {"type": ..., "message": ...}}`) and `retry-after`.

    server = FakeAnthropic().start()
    server.responder = lambda body: Reply(text="Paris")      # or server.script(Reply(...), ...)
    server.requests, server.keys                              # bodies in order; x-api-key values seen
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


@dataclass
class Reply:
    """One answer.

    Args:
        text: The answer text (streamed in `text_chunks` pieces).
        thinking: A thinking block's text before the answer, or "" (signed by the server, one signature per reply).
        redacted: A redacted_thinking block's data after it, or "".
        tool_calls: [{"name": ..., "arguments": {...}}] as tool_use blocks after the text.
        stop: The stop_reason (default: tool_use with calls, else end_turn).
        model: The served model (default: the one asked for).
        usage: input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens.
        status: Answer this HTTP status with an error body instead (429, 529, 400, ...).
        message: The error's message.
        retry_after: A `retry-after` header for the error.
        arg_chunks: How many input_json_delta events carry each call's arguments.
        text_chunks: How many text_delta events carry the text.
        raw: Send these bytes as the whole body, verbatim (an SSE stream when the request streams).
    """

    text: str = ""
    thinking: str = ""
    redacted: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    stop: str | None = None
    model: str | None = None
    usage: dict[str, int] = field(default_factory=lambda: {"input_tokens": 20, "output_tokens": 6,
                                                           "cache_read_input_tokens": 0,
                                                           "cache_creation_input_tokens": 0})
    status: int | None = None
    message: str = "error"
    retry_after: str | None = None
    arg_chunks: int = 3
    text_chunks: int = 3
    raw: bytes | None = None


async def send_raw(request: web.Request, raw: bytes, stream: bool) -> web.StreamResponse:
    """`raw` as the body of a 200, in two writes."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream" if stream else "application/json"})
    await resp.prepare(request)
    half = len(raw) // 2
    await resp.write(raw[:half])
    await asyncio.sleep(0.01)
    await resp.write(raw[half:])
    return resp


def pieces(text: str, n: int) -> list[str]:
    """`text` cut into `n` pieces (some may be empty), in order."""
    step = max(1, -(-len(text) // max(1, n)))
    out = [text[i:i + step] for i in range(0, len(text), step)] or [""]
    return out


class ThreadServer:
    """An aiohttp app on an ephemeral loopback port, served from a thread with its own loop; scripted replies."""

    name = "fake"

    def __init__(self) -> None:
        self.responder: Callable[[dict[str, Any]], Any] = lambda body: Reply()
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.keys: set[str] = set()
        self.mounts: list[Callable[[web.Application], None]] = []   # more routes (the batch servers')
        self._script: deque[Any] = deque()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def take_reply(self, body: dict[str, Any]) -> Any:
        """The reply to a request body: the next scripted one, else the responder's (the body is recorded)."""
        with self._lock:
            self.requests.append(body)
            if self._script:
                return self._script.popleft()
        return self.responder(body)

    def script(self, *replies: Any) -> None:
        """Queue replies; each request takes the next one, then `responder` answers."""
        with self._lock:
            self._script.extend(replies)

    def next_reply(self, request: web.Request, body: dict[str, Any], key_header: str) -> Any:
        with self._lock:
            self.paths.append(request.path_qs)
            self.keys.add(request.headers.get(key_header, ""))
        return self.take_reply(body)

    def start(self) -> Self:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application(client_max_size=64 * 1024 * 1024)
            self.routes(app)
            for mount in self.mounts:
                mount(app)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name=self.name, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


class FakeAnthropic(ThreadServer):
    """The server; `base_url` is its API root (`http://127.0.0.1:PORT/v1`)."""

    name = "fake-anthropic"

    def __init__(self) -> None:
        super().__init__()
        self.signed: list[list[dict[str, Any]]] = []   # the thinking blocks of each reply, as sent

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._messages)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if request.headers.get("anthropic-version") != "2023-06-01":
            return _error(400, "anthropic-version: header is required")
        reply: Reply = self.next_reply(request, body, "x-api-key")
        refused = self._thinking_refused(body)
        if refused:
            return _error(400, refused)
        if reply.status is not None:
            return _error(reply.status, reply.message, reply.retry_after)
        if reply.raw is not None:
            return await send_raw(request, reply.raw, bool(body.get("stream")))
        model = reply.model or body["model"]
        stop = reply.stop or ("tool_use" if reply.tool_calls else "end_turn")
        signature = f"EqQBCkYIBxgCKkD-sig-{len(self.signed)}/" + "A" * 40
        thinking: list[dict[str, Any]] = []
        if reply.thinking:
            thinking.append({"type": "thinking", "thinking": reply.thinking, "signature": signature})
        if reply.redacted:
            thinking.append({"type": "redacted_thinking", "data": reply.redacted})
        if thinking:
            self.signed.append(thinking)
        if not body.get("stream"):
            return web.json_response(whole_message(reply, model, stop, thinking))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)

        async def event(name: str, data: dict[str, Any]) -> None:
            await resp.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            await asyncio.sleep(0)

        start_usage = {**reply.usage, "output_tokens": 1}
        await event("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": model,
            "stop_reason": None, "stop_sequence": None, "usage": start_usage}})
        await event("ping", {"type": "ping"})
        index = 0
        if reply.thinking:
            await event("content_block_start", {"type": "content_block_start", "index": index,
                                                 "content_block": {"type": "thinking", "thinking": ""}})
            for piece in pieces(reply.thinking, 2):
                await event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                     "delta": {"type": "thinking_delta", "thinking": piece}})
            await event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                 "delta": {"type": "signature_delta", "signature": signature}})
            await event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        if reply.redacted:
            redacted = {"type": "redacted_thinking", "data": reply.redacted}
            await event("content_block_start", {"type": "content_block_start", "index": index,
                                                 "content_block": redacted})
            await event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        if reply.text:
            await event("content_block_start", {"type": "content_block_start", "index": index,
                                                 "content_block": {"type": "text", "text": ""}})
            for piece in pieces(reply.text, reply.text_chunks):
                await event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                     "delta": {"type": "text_delta", "text": piece}})
            await event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        for i, call in enumerate(reply.tool_calls):
            await event("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": f"toolu_{i}", "name": call["name"], "input": {}}})
            await event("ping", {"type": "ping"})
            for piece in ["", *pieces(json.dumps(call["arguments"]), reply.arg_chunks)]:
                await event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                     "delta": {"type": "input_json_delta", "partial_json": piece}})
            await event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        await event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": reply.usage["output_tokens"]}})
        await event("message_stop", {"type": "message_stop"})
        return resp

    def _thinking_refused(self, body: dict[str, Any]) -> str:
        """The API's refusal of a request with thinking on whose last tool_use turn lacks its thinking blocks."""
        if (body.get("thinking") or {}).get("type") != "enabled":
            return ""
        turns = [(i, m) for i, m in enumerate(body.get("messages") or ()) if m.get("role") == "assistant"
                 and any(b.get("type") == "tool_use" for b in m.get("content") or ())]
        if not turns:
            return ""
        i, turn = turns[-1]
        content = turn["content"]
        lead = []
        for block in content:
            if block.get("type") not in ("thinking", "redacted_thinking"):
                break
            lead.append(block)
        if not lead:
            return (f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                    f"`{content[0].get('type')}`. When `thinking` is enabled, a final `assistant` message must start "
                    "with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks).")
        if lead not in self.signed:
            return f"messages.{i}.content.0: Invalid `signature` in `thinking` block"
        return ""


def whole_message(reply: Reply, model: str, stop: str, thinking: list[dict[str, Any]]) -> dict[str, Any]:
    """A whole (not streamed) `message` object: the thinking blocks, the text, the tool_use blocks."""
    content: list[dict[str, Any]] = list(thinking)
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    content += [{"type": "tool_use", "id": f"toolu_{i}", "name": c["name"], "input": c["arguments"]}
                for i, c in enumerate(reply.tool_calls)]
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": reply.usage}


def error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error body."""
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


def _error(status: int, message: str, retry_after: str | None = None) -> web.Response:
    headers = {"retry-after": retry_after} if retry_after else {}
    return web.json_response(error_body(status, message), status=status, headers=headers)
