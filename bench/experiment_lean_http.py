"""Experiment, not engine code: how much of a non-streaming call is aiohttp's request path (issue #22).

A minimal HTTP/1.1 keep-alive client on `asyncio.Protocol` makes the same 20,000 POSTs as `bench_run.py`'s raw
aiohttp loop, at concurrency 64 against `bench/mock_server.py`, and `json.loads` each body. It reads only
Content-Length bodies and has no TLS, redirects, proxies, compression, chunked bodies, timeouts or error
classes: it is the floor a leaner HTTP path could approach, not a client. `make bench` does not run it.

    python bench/mock_server.py &                                   # prints its port
    python bench/experiment_lean_http.py http://127.0.0.1:PORT/v1   # then compare with:
    python bench/bench_run.py --child raw http://127.0.0.1:PORT/v1 20000 0 64 1
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from urllib.parse import urlsplit

import aiohttp  # noqa: F401  (the raw loop's child holds it too)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: a request is written whole, its reply read by Content-Length."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.waiter: asyncio.Future[bytes] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        waiter = self.waiter
        end = self.buffer.find(b"\r\n\r\n")
        if waiter is None or end < 0:
            return
        head = bytes(self.buffer[:end]).lower()
        start = head.find(b"content-length:") + 15
        stop = head.find(b"\r\n", start)
        length = int(head[start:stop if stop > 0 else None])
        if len(self.buffer) < end + 4 + length:
            return
        body = bytes(self.buffer[end + 4:end + 4 + length])
        del self.buffer[:end + 4 + length]
        self.waiter = None
        waiter.set_result(body)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection lost"))

    async def post(self, request: bytes) -> bytes:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.waiter


async def _calls(base_url: str, calls: int, concurrency: int) -> None:
    url = urlsplit(base_url + "/chat/completions")
    payload = json.dumps({"model": "bench-model", "messages": [{"role": "user", "content": "say ok"}],
                          "max_tokens": 64, "temperature": 0.0, "stream": False}).encode()
    request = (f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
    left = iter(range(calls))
    loop = asyncio.get_running_loop()

    async def worker() -> None:
        _, connection = await loop.create_connection(_Connection, url.hostname or "127.0.0.1", url.port or 80)
        for _ in left:
            json.loads(await connection.post(request))
        assert connection.transport is not None
        connection.transport.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def main() -> None:
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    before = resource.getrusage(resource.RUSAGE_SELF)
    asyncio.run(_calls(sys.argv[1], calls, 64))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(json.dumps({"kind": "lean", "calls": calls, "cpu_us_per_call": 1e6 * cpu / calls}))


if __name__ == "__main__":
    main()
