"""A fast OpenAI-protocol mock for benchmarks: raw asyncio, canned answers, HTTP/1.1 keep-alive.

Run `python bench/mock_server.py` and read the port from its first stdout line. It answers every POST
to .../chat/completions with a fixed completion: whole JSON, or an SSE stream of 50 content chunks
when the request body asks for `"stream": true`. It does as little work as possible so a benchmark
measures the client, not the server.
"""

from __future__ import annotations

import asyncio
import json
import sys

MODEL = "bench-model"
CHUNKS = 50


def _whole() -> bytes:
    body = json.dumps({
        "id": "x", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok " * 20},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 20, "total_tokens": 32}}).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


def _stream() -> bytes:
    events = []
    for i in range(CHUNKS):
        events.append({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
                       "choices": [{"index": 0, "delta": {"content": "ok " if i else "ok"},
                                    "finish_reason": None}]})
    events.append({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    events.append({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": MODEL, "choices": [],
                   "usage": {"prompt_tokens": 12, "completion_tokens": CHUNKS, "total_tokens": 62}})
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


WHOLE = _whole()
STREAM = _stream()


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length) if length else b""
            # json.dumps writes `"stream": true`, compact encoders (orjson) `"stream":true`
            writer.write(STREAM if b'"stream": true' in body or b'"stream":true' in body else WHOLE)
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
