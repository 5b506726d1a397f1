"""A fake OpenAI-compatible server on loopback, with faults on demand.

It runs an aiohttp server in a background thread (its own event loop), so synchronous tests,
async tests and `engine run` subprocesses can all talk to it. Script it per request::

    server = FakeOpenAI().start()            # or the `fake_openai` fixture
    server.script(Reply(fault="http_429", retry_after="0.01"), Reply(content="Paris"))
    server.responder = lambda body: Reply(content="Paris")   # used when the script is empty
    ... call server.base_url ...
    assert server.max_in_flight <= 4
    server.requests  # every request body, in arrival order (headers are never kept)
    server.paths     # every request's path and query string (`/v1/chat/completions?api-version=...`), in order
    server.stop()

Fault kinds (`Reply.fault`):
    "http_<status>"  answer with that status (e.g. http_429 with `retry_after`, http_500, http_400)
    "reset"          send part of the stream, then drop the connection
    "drop"           drop the connection before any reply (no status, no byte)
    "stall"          send headers and one chunk, then wait `stall_s` (default 60 s)
    "malformed"      send a data line that is not JSON
    "huge_line"      the content arrives as one ~5 MB data line
    "no_done"        end the stream without [DONE] and without a finish reason
    "trickle"        stream the content one chunk every `stall_s` seconds (a reply still coming when time runs out)
    "cut_body"       a whole (non-streamed) 200 reply whose Content-Length promises more than is sent, then close
    "echo"           answer `echo_status` (default 400) with the request line and every header in the body,
                     as a server that echoes what it got (the Authorization header included)
    "echo_answer"    a 200 answer whose content echoes the request: its request line as sent, as decoded (`%2B`
                     read back as `+`, and `+` as a space, as a form decoder does), every header, and those
                     headers again base64-encoded (as a server that echoes what it got inside an answer)
A hostile reply: `Reply(raw=b"...")` sends those bytes as the whole body, verbatim (as an SSE stream when
the request streams, as JSON otherwise), in 64 KB writes.
Embeddings (`POST /v1/embeddings`): each input's vector is `server.embedder(text)`, by default
`bag_of_words` (word counts hashed into `EMBEDDING_DIM` buckets), so a test can hand-compute cosines from word
counts; usage.prompt_tokens = the inputs' word count. Requests are recorded and take scripted replies like
chat: http_* faults, `delay_s`, `raw` (any other field of the Reply is ignored).
A reply held until the test says: `Reply(hold=...)`, or `HoldAfter(count, answer)` as the responder (a run
killed part-way is still part-way when killed). A different served model: `Reply(model="other-model")`. Tool
calls: `Reply(tool_calls=[...])` with each call's arguments streamed in `arg_chunks` pieces.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import ssl
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote, unquote_plus

from aiohttp import web

EMBEDDING_DIM = 1024


def bag_of_words(text: str) -> list[float]:
    """The fake's embedding: counts of the text's lower-cased words, each in bucket crc32(word) % EMBEDDING_DIM."""
    vector = [0.0] * EMBEDDING_DIM
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        vector[zlib.crc32(word.encode()) % EMBEDDING_DIM] += 1.0
    return vector


@dataclass
class Reply:
    """What the server answers to one request.

    Args:
        content: The answer text.
        reasoning: Text sent as `reasoning_content` deltas before the content.
        tool_calls: [{"name": ..., "arguments": <dict or raw str>, "id": optional}]; in a whole (not
            streamed) reply, `"function": {...}` instead sends that object as the call's `function` verbatim
            (arguments as JSON null, as an object, or left out).
        finish_reason: Defaults to "tool_calls" when there are calls, else "stop".
        model: The served model (default: the one asked for).
        usage: The usage object; None sends no usage at all.
        fault: One of the fault kinds in the module docstring, or None.
        retry_after: `Retry-After` header value for http_* faults.
        retry_after_ms: `retry-after-ms` header value.
        should_retry: `x-should-retry` header value ("true"/"false").
        location: `Location` header value for http_3xx faults.
        delay_s: Wait this long before answering (for concurrency tests).
        hold: Answer (after `delay_s`) only once this returns False, asked every 10 ms on the server's loop
            (other requests go on meanwhile): a test holds a reply until it has seen what it waits for.
        chunk_chars: Content characters per streamed chunk.
        arg_chunks: Pieces each tool call's arguments are split into.
        stall_s: How long a "stall" fault waits.
        tool_index: False sends tool-call deltas without `index` (ids only).
        error_message: The message of an http_* fault's error body.
        raw: The exact body to send instead of a well-formed reply (hostile-server tests).
    """

    content: str = "ok"
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    model: str | None = None
    usage: dict[str, Any] | None = field(
        default_factory=lambda: {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    fault: str | None = None
    retry_after: str | None = None
    retry_after_ms: str | None = None
    should_retry: str | None = None
    location: str | None = None
    delay_s: float = 0.0
    hold: Callable[[], bool] | None = None
    chunk_chars: int = 4
    arg_chunks: int = 3
    stall_s: float = 60.0
    tool_index: bool = True
    error_message: str | None = None
    raw: bytes | None = None
    echo_status: int = 400


class HoldAfter:
    """A responder that answers as `answer` does, but holds every request after the first `count` (in arrival
    order) until `release()`: a test that stops a run part-way finds it stopped before its end, whatever the
    machine's load, instead of racing the run to its end."""

    def __init__(self, count: int, answer: Callable[[dict[str, Any]], Reply]) -> None:
        self.count = count
        self.answer = answer
        self.released = threading.Event()
        self.arrived = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.arrived += 1   # the server's loop asks, one request at a time
        reply = self.answer(body)
        if self.arrived <= self.count:
            return reply
        return replace(reply, hold=lambda: not self.released.is_set())

    def release(self) -> None:
        """Answer the held requests and every later one."""
        self.released.set()


class FakeOpenAI:
    """The server. Not thread-safe to reconfigure while requests are in flight, except `script`."""

    def __init__(self) -> None:
        self.responder: Callable[[dict[str, Any]], Reply] = lambda body: Reply()
        self.embedder: Callable[[str], list[float]] = bag_of_words
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.authorizations: set[str] = set()   # distinct Authorization headers seen (to prove a key was sent)
        self.in_flight = 0
        self.max_in_flight = 0
        self.in_flight_by_model: dict[str, int] = {}
        self.max_in_flight_by_model: dict[str, int] = {}
        self.mounts: list[Callable[[web.Application], None]] = []   # more routes (the batch server's)
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in /v1."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one, then `responder` answers."""
        with self._lock:
            self._script.extend(replies)

    def reset(self) -> None:
        """Forget requests, counters and the script."""
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.paths.clear()
            self.max_in_flight = 0
            self.max_in_flight_by_model.clear()
        self.responder = lambda body: Reply()

    def start(self, ssl_context: ssl.SSLContext | None = None) -> FakeOpenAI:
        """Start serving on an ephemeral loopback port (returns when it accepts connections); HTTPS with a context."""
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_post("/v1/chat/completions", self._chat)
            app.router.add_post("/v1/completions", self._completions)
            app.router.add_get("/v1/models", self._models)
            app.router.add_post("/v1/embeddings", self._embeddings)
            for mount in self.mounts:
                mount(app)
            self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ssl_context)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="fake-openai", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        """Stop the server and its thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    # -- handlers ---------------------------------------------------------------------------------

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            if self._script:
                return self._script.popleft()
        return self.responder(body)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        with self._lock:
            self.paths.append(request.path_qs)
        if "Authorization" in request.headers:
            self.authorizations.add(request.headers["Authorization"])
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            reply = self._next_reply(body)
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            if reply.fault and reply.fault.startswith("http_"):
                return self._status(reply)
            if reply.raw is not None:
                return await self._raw(request, reply.raw, stream=False)
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            words = sum(len(re.findall(r"[a-z0-9]+", str(t).lower())) for t in texts)
            out: dict[str, Any] = {"object": "list", "model": body.get("model"), "data": [
                {"object": "embedding", "index": i, "embedding": self.embedder(str(t))} for i, t in enumerate(texts)]}
            if reply.usage is not None:
                out["usage"] = {"prompt_tokens": words, "total_tokens": words}
            return web.json_response(out)
        finally:
            with self._lock:
                self.in_flight -= 1

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, completions=False)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, completions=True)

    async def _serve(self, request: web.Request, completions: bool) -> web.StreamResponse:
        body = await request.json()
        with self._lock:
            self.paths.append(request.path_qs)
        if "Authorization" in request.headers:
            self.authorizations.add(request.headers["Authorization"])
        model = str(body.get("model"))
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            count = self.in_flight_by_model.get(model, 0) + 1
            self.in_flight_by_model[model] = count
            self.max_in_flight_by_model[model] = max(self.max_in_flight_by_model.get(model, 0), count)
        try:
            reply = self._next_reply(body)
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            while reply.hold is not None and reply.hold():
                await asyncio.sleep(0.01)
            if reply.fault and reply.fault.startswith("http_"):
                return self._status(reply)
            if reply.fault == "drop":
                assert request.transport is not None
                request.transport.close()
                return web.Response()
            if reply.fault == "echo_answer":
                reply = Reply(content=self._echo_text(request), model=reply.model)
            if reply.fault == "echo":
                lines = [f"{request.method} {request.path_qs} HTTP/{request.version.major}.{request.version.minor}"]
                lines += [f"{name}: {value}" for name, value in request.headers.items()]
                return web.Response(status=reply.echo_status, text="\n".join(lines))
            if reply.fault == "cut_body":
                return await self._cut_body(request, json.dumps(self._whole(body, reply, completions)).encode())
            if reply.raw is not None:
                return await self._raw(request, reply.raw, stream=bool(body.get("stream")))
            if body.get("stream"):
                return await self._stream(request, body, reply, completions)
            return web.json_response(self._whole(body, reply, completions))
        finally:
            with self._lock:
                self.in_flight -= 1
                self.in_flight_by_model[model] -= 1

    @staticmethod
    async def _raw(request: web.Request, raw: bytes, *, stream: bool) -> web.StreamResponse:
        kind = "text/event-stream" if stream else "application/json"
        resp = web.StreamResponse(headers={"Content-Type": kind})
        await resp.prepare(request)
        for start in range(0, len(raw), 65536):
            await resp.write(raw[start:start + 65536])
        await resp.write_eof()
        return resp

    @staticmethod
    def _echo_text(request: web.BaseRequest) -> str:
        line = f"{request.method} {request.path_qs}"
        headers = "\n".join(f"{name}: {value}" for name, value in request.headers.items())
        return "\n".join([line, unquote(line), unquote_plus(line), headers,
                          "X-Echoed: " + base64.b64encode(headers.encode()).decode()])

    @staticmethod
    async def _cut_body(request: web.Request, whole: bytes) -> web.StreamResponse:
        """The first half of `whole` under a Content-Length for all of it, then the connection closed."""
        resp = web.StreamResponse(headers={"Content-Type": "application/json", "Content-Length": str(len(whole))})
        await resp.prepare(request)
        await resp.write(whole[:len(whole) // 2])
        assert request.transport is not None
        request.transport.close()
        return resp

    @staticmethod
    def _status(reply: Reply) -> web.Response:
        status = int(reply.fault.removeprefix("http_"))  # type: ignore[union-attr]
        headers = {}
        if reply.retry_after is not None:
            headers["Retry-After"] = reply.retry_after
        if reply.retry_after_ms is not None:
            headers["retry-after-ms"] = reply.retry_after_ms
        if reply.should_retry is not None:
            headers["x-should-retry"] = reply.should_retry
        if reply.location is not None:
            headers["Location"] = reply.location
        message = reply.error_message or f"fake error {status}"
        return web.json_response({"error": {"message": message, "code": status}},
                                 status=status, headers=headers)

    @staticmethod
    def _finish(reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    @staticmethod
    def _raw_args(call: dict[str, Any]) -> str:
        args = call.get("arguments", {})
        return args if isinstance(args, str) else json.dumps(args)

    def _whole(self, body: dict[str, Any], reply: Reply, completions: bool) -> dict[str, Any]:
        served = reply.model or body.get("model")
        if completions:
            choice: dict[str, Any] = {"index": 0, "text": reply.content, "finish_reason": self._finish(reply)}
        else:
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.reasoning:
                message["reasoning_content"] = reply.reasoning
            if reply.tool_calls:
                message["tool_calls"] = [
                    {"id": c.get("id", f"call_{i}"), "type": "function",
                     "function": c["function"] if "function" in c else {"name": c["name"],
                                                                          "arguments": self._raw_args(c)}}
                    for i, c in enumerate(reply.tool_calls)]
            choice = {"index": 0, "message": message, "finish_reason": self._finish(reply)}
        out = {"id": "cmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": served,
               "system_fingerprint": "fp_fake", "choices": [choice]}
        if reply.usage is not None:
            out["usage"] = reply.usage
        return out

    async def _stream(self, request: web.Request, body: dict[str, Any], reply: Reply,
                      completions: bool) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        served = reply.model or body.get("model")
        base = {"id": "cmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": served,
                "system_fingerprint": "fp_fake"}

        async def send(choice: dict[str, Any] | None, **extra: Any) -> None:
            event = dict(base, choices=[choice] if choice else [], **extra)
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")

        def delta(**fields: Any) -> dict[str, Any]:
            if completions:
                return {"index": 0, "text": fields.get("content", ""), "finish_reason": None}
            return {"index": 0, "delta": fields, "finish_reason": None}

        await resp.write(b": ping\n\n")
        if not completions:
            await send(delta(role="assistant", content=""))
        if reply.fault == "stall":
            await send(delta(content=reply.content[:1]))
            await asyncio.sleep(reply.stall_s)
        if reply.fault == "malformed":
            await resp.write(b"data: {not json\n\n")
        if reply.reasoning and not completions:
            await send(delta(reasoning_content=reply.reasoning))
        if reply.fault == "huge_line":
            await send(delta(content="x" * (5 * 1024 * 1024)))
        else:
            text = reply.content
            step = max(1, reply.chunk_chars)
            for start in range(0, len(text), step):
                await send(delta(content=text[start:start + step]))
                if reply.fault == "trickle":
                    await asyncio.sleep(reply.stall_s)
                if reply.fault == "reset" and start >= len(text) // 2:
                    assert request.transport is not None
                    request.transport.close()
                    return resp
        if reply.fault == "reset":  # content too short to cut in the loop
            assert request.transport is not None
            request.transport.close()
            return resp
        for i, call in enumerate(reply.tool_calls):
            raw = self._raw_args(call)
            pieces = max(1, reply.arg_chunks)
            size = -(-len(raw) // pieces) or 1
            head: dict[str, Any] = {"id": call.get("id", f"call_{i}"), "type": "function",
                                    "function": {"name": call["name"], "arguments": ""}}
            if reply.tool_index:
                head["index"] = i
            await send(delta(tool_calls=[head]))
            for start in range(0, len(raw), size):
                piece: dict[str, Any] = {"function": {"arguments": raw[start:start + size]}}
                if reply.tool_index:
                    piece["index"] = i
                else:
                    piece["id"] = head["id"]
                await send(delta(tool_calls=[piece]))
        if reply.fault == "no_done":
            await resp.write_eof()
            return resp
        final = delta()
        final["finish_reason"] = self._finish(reply)
        if not completions:
            final["delta"] = {}
        await send(final)
        if reply.usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            await send(None, usage=reply.usage)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
