"""A fake Gemini API on loopback, speaking generateContent as Google documents it.

`POST /v1beta/models/{model}:generateContent` answers one `GenerateContentResponse`;
`:streamGenerateContent?alt=sse` answers the same split into chunks, each `data: {...}` event ended by
`\\r\\n\\r\\n` as Google's servers send them: the text over `text_chunks` chunks (thought parts first), each
functionCall whole in one chunk, the last chunk with finishReason and usageMetadata; every chunk names its
`modelVersion`. `:batchEmbedContents` answers one `values` vector per request (tests.fake_openai.bag_of_words).
Faults answer a status with Google's error body (`{"error": {code, message, status, details}}`), a 429 with a
`google.rpc.RetryInfo` detail when `retry_delay` is set.

    server = FakeGemini().start()
    server.responder = lambda body: Reply(text="Paris")
    server.requests, server.paths, server.keys      # bodies; paths with queries; x-goog-api-key values seen
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fake_anthropic import ThreadServer, pieces, send_raw
from tests.fake_openai import bag_of_words

STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 429: "RESOURCE_EXHAUSTED",
            500: "INTERNAL", 503: "UNAVAILABLE"}


@dataclass
class Reply:
    """One answer.

    Args:
        text: The answer text.
        thought: Thought-summary text (parts with `thought: true`) before it, or "".
        tool_calls: [{"name": ..., "arguments": {...}}] as functionCall parts.
        signature: A `thoughtSignature` on the first functionCall part, or "": the server then refuses (400, as the
            API does for thinking models) a later request whose last model turn's first call lacks it.
        finish: The finishReason (default STOP).
        block: A promptFeedback.blockReason: no candidate at all.
        model: The modelVersion (default: the model of the path, with "-001").
        usage: The usageMetadata.
        status: Answer this HTTP status with an error body instead.
        message: The error's message.
        retry_delay: A RetryInfo retryDelay ("0.05s") in a 429's details.
        text_chunks: How many chunks carry the text when streamed.
        raw: Send these bytes as the whole body, verbatim.
    """

    text: str = ""
    thought: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    signature: str = ""
    finish: str = "STOP"
    block: str | None = None
    model: str | None = None
    usage: dict[str, int] = field(default_factory=lambda: {"promptTokenCount": 20, "candidatesTokenCount": 6,
                                                           "totalTokenCount": 26})
    status: int | None = None
    message: str = "error"
    retry_delay: str | None = None
    text_chunks: int = 3
    raw: bytes | None = None


class FakeGemini(ThreadServer):
    """The server; `base_url` is its API root (`http://127.0.0.1:PORT/v1beta`)."""

    name = "fake-gemini"

    def __init__(self) -> None:
        super().__init__()
        self.signed: set[str] = set()   # the thoughtSignatures this server sent
        # `:batchGenerateContent` (model, request) -> its answer, when a batch server is mounted
        self.batch_create: Callable[[str, web.Request], Awaitable[web.StreamResponse]] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1beta"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1beta/models/{call}", self._call)

    async def _call(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["call"].partition(":")
        if method == "batchGenerateContent" and self.batch_create is not None:
            return await self.batch_create(model, request)
        body = await request.json()
        reply: Reply = self.next_reply(request, body, "x-goog-api-key")
        calls = [[p for p in c.get("parts") or () if "functionCall" in p] for c in body.get("contents") or ()
                 if c.get("role") == "model"]
        calls = [c for c in calls if c]
        if self.signed and calls and calls[-1][0].get("thoughtSignature") not in self.signed:
            return _error(Reply(status=400, message="Function call is missing a thought_signature in functionCall "
                                                    "parts."))
        if isinstance(reply, Reply) and reply.signature:
            self.signed.add(reply.signature)
        if reply.status is not None:
            return _error(reply)
        if method == "batchEmbedContents":
            return web.json_response({"embeddings": [{"values": bag_of_words(r["content"]["parts"][0]["text"])}
                                                     for r in body["requests"]]})
        if reply.raw is not None:
            return await send_raw(request, reply.raw, method == "streamGenerateContent")
        version = reply.model or f"{model}-001"
        chunks = _chunks(reply, version)
        if method == "generateContent":
            return web.json_response(_merge(chunks))
        if method != "streamGenerateContent" or request.query.get("alt") != "sse":
            return _error(Reply(status=400, message=f"unknown method {method}"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in chunks:
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")
            await asyncio.sleep(0)
        return resp


def whole_reply(reply: Reply, version: str) -> dict[str, Any]:
    """A whole generateContent reply (the stream's chunks merged)."""
    return _merge(_chunks(reply, version))


def error_body(reply: Reply) -> dict[str, Any]:
    """Google's error object of a reply with a `status`."""
    status = reply.status or 500
    return {"code": status, "message": reply.message, "status": STATUSES.get(status, "UNKNOWN")}


def _chunks(reply: Reply, version: str) -> list[dict[str, Any]]:
    """The reply as stream chunks: thoughts, text pieces, calls, then the finish with usage."""
    if reply.block:
        return [{"promptFeedback": {"blockReason": reply.block}, "usageMetadata": reply.usage, "modelVersion": version}]
    parts: list[dict[str, Any]] = []
    if reply.thought:
        parts.append({"text": reply.thought, "thought": True})
    parts += [{"text": piece} for piece in pieces(reply.text, reply.text_chunks) if piece]
    calls: list[dict[str, Any]] = [{"functionCall": {"name": c["name"], "args": c["arguments"]}}
                                   for c in reply.tool_calls]
    if calls and reply.signature:
        calls[0]["thoughtSignature"] = reply.signature
    parts += calls
    parts = parts or [{"text": ""}]
    out = [{"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}], "modelVersion": version}
           for part in parts]
    last = out[-1]["candidates"][0]
    last["finishReason"] = reply.finish
    out[-1]["usageMetadata"] = reply.usage
    return out


def _merge(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The chunks as one whole reply (text parts joined as the API joins them)."""
    if "promptFeedback" in chunks[0]:
        return chunks[0]
    parts: list[dict[str, Any]] = []
    for chunk in chunks:
        for part in chunk["candidates"][0]["content"]["parts"]:
            if parts and "text" in part and "text" in parts[-1] and part.get("thought") == parts[-1].get("thought"):
                parts[-1] = {**parts[-1], "text": parts[-1]["text"] + part["text"]}
            else:
                parts.append(part)
    last = chunks[-1]
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0,
                            "finishReason": last["candidates"][0]["finishReason"]}],
            "usageMetadata": last["usageMetadata"], "modelVersion": last["modelVersion"]}


def _error(reply: Reply) -> web.Response:
    status = reply.status or 500
    error = error_body(reply)
    if reply.retry_delay:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": reply.retry_delay}]
    return web.json_response({"error": error}, status=status)
