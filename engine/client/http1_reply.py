"""HTTP/1.1 replies read off one connection: the wire half of `engine.client.http1`.

`Connection` is the `asyncio.Protocol` of one keep-alive connection; llhttp (Node's parser, through
httptools, as uvicorn uses it) calls it back with the status, headers and body of the reply in progress,
and it fills that reply's `Response`: chunked bodies, bodies delimited by Content-Length or by the end of
the connection, 1xx informational replies skipped, gzip and deflate decoded, reading paused past 1 MB unread.

Failures are exceptions by class::

    TransportFailure                 the try failed in transit (retried: `engine.client.retry.transport_error`)
     ├── ConnectFailure              no connection: refused, unresolvable host, TLS handshake, bad scheme
     ├── ConnectionClosed            the server closed the connection before the reply was complete
     └── ProtocolFailure             the bytes that came back are not an HTTP/1.1 reply
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable

import httptools

__all__ = ["ConnectFailure", "Connection", "ConnectionClosed", "ProtocolFailure", "Response", "TransportFailure"]

_PAUSE_AT = 1 << 20   # unread body bytes past which the socket stops being read until the reader catches up


class TransportFailure(Exception):
    """A try that failed in transit: no reply, or no complete one."""


class ConnectFailure(TransportFailure):
    """No connection could be made (refused, unknown host, TLS handshake, a scheme other than http(s))."""


class ConnectionClosed(TransportFailure):
    """The server closed the connection (or it was reset) before the reply was complete."""


class ProtocolFailure(TransportFailure):
    """What came back is not an HTTP/1.1 reply llhttp accepts."""


class Response:
    """One reply being read: `status` and `headers` (names lower-cased) are set; the body comes as it arrives.

    Call `release()` when done with it (a `finally`): a reply read to its end gives its connection back
    for the next request; anything else closes it.

    Args:
        connection: The connection the reply comes on.
        give_back: Called once, by `release()`, with the connection and whether it may serve another request
            (the pool's `_give_back`).
    """

    __slots__ = (
        "_buffered",
        "_chunks",
        "_complete",
        "_connection",
        "_decoder",
        "_error",
        "_give_back",
        "_released",
        "_waiter",
        "headers",
        "status",
    )

    def __init__(self, connection: Connection, give_back: Callable[[Connection, bool], None]) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self._connection = connection
        self._give_back = give_back
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._complete = False
        self._error: TransportFailure | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._decoder: zlib._Decompress | None = None
        self._released = False

    @property
    def content_length(self) -> int | None:
        """The Content-Length the server sent (llhttp has checked it is a number), or None."""
        value = self.headers.get("content-length")
        return int(value) if value is not None and self._decoder is None else None

    async def read(self) -> bytes:
        """The whole body (the caller has checked its size is acceptable: `content_length`)."""
        parts: list[bytes] = []
        while True:
            chunk = await self.next_chunk()
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)

    async def read_at_most(self, size: int) -> bytes:
        """The body's first `size` bytes, or what came of it before its end or a failure (an error reply's message)."""
        while self._buffered < size and not self._complete and self._error is None:
            await self._wait()
        data = b"".join(self._chunks)[:size]
        self._chunks.clear()
        self._buffered = 0
        return data

    async def next_chunk(self) -> bytes:
        """The body bytes that arrived since the last call (waiting for some); b"" once the body is complete."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._complete:
                return b""
            await self._wait()
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        if self._buffered >= _PAUSE_AT:
            self._connection.resume()
        self._buffered = 0
        return data

    def release(self) -> None:
        """Give the connection back (reply read whole, server keeps it open) or close it. Idempotent."""
        if self._released:
            return
        self._released = True
        self._give_back(self._connection, self._complete and self._error is None)

    async def _wait(self) -> None:
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _body(self, data: bytes) -> None:
        if self._error is not None:
            return
        if self._decoder is not None:
            try:
                data = self._decoder.decompress(data)
            except zlib.error as exc:
                self._fail(ProtocolFailure(f"the reply's compressed body does not decode: {exc}"))
                return
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered >= _PAUSE_AT:
            self._connection.pause()
        self._wake()

    def _start_body(self, status: int) -> None:
        self.status = status
        encoding = self.headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)   # +32: gzip or zlib, read from the header
        elif encoding != "identity":
            self._fail(ProtocolFailure(f"the reply is compressed as {encoding!r}, which this client cannot read"))

    def _finish(self) -> None:
        if self._decoder is not None:
            tail = self._decoder.flush()
            if tail:
                self._chunks.append(tail)
        self._complete = True
        self._wake()

    def _fail(self, error: TransportFailure) -> None:
        if self._error is None and not self._complete:
            self._error = error
        self._wake()


class Connection(asyncio.Protocol):
    """One keep-alive connection; llhttp's callbacks fill the reply being read, one reply at a time."""

    def __init__(self, key: tuple[str, str, int]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._response: Response | None = None
        self._headers: asyncio.Future[None] | None = None
        self._informational = False
        self._paused = False

    # -- asyncio.Protocol ----------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._response is None:   # nothing asked: bytes a server has no business sending
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            cause = exc.__cause__ or exc
            self._failed(ProtocolFailure(f"the reply is not valid HTTP/1.1: {type(cause).__name__}: {cause}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        response = self._response
        if response is None or response._complete:
            return
        if response.status and exc is None and "content-length" not in response.headers and \
                "transfer-encoding" not in response.headers:
            response._finish()   # a body delimited by the end of the connection (HTTP/1.0 style)
            return
        why = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        self._failed(ConnectionClosed(f"the server closed the connection before the reply was complete{why}"))

    # -- llhttp callbacks ----------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        response = self._response
        if response is None or response._complete:   # a second reply to one request: the stream is out of step
            raise ProtocolFailure("the server sent more than one reply to one request")

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self._response is not None
        self._response.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        response = self._response
        assert response is not None
        status = self._parser.get_status_code()
        if status < 200:   # 1xx: informational, the real reply follows
            self._informational = True
            response.headers.clear()
            return
        response._start_body(status)
        headers, self._headers = self._headers, None
        if headers is not None and not headers.done():
            headers.set_result(None)

    def on_body(self, body: bytes) -> None:
        assert self._response is not None
        self._response._body(body)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        response = self._response
        assert response is not None
        if not self._parser.should_keep_alive():
            self.closed = True   # the server said `Connection: close` (or spoke HTTP/1.0)
        response._finish()

    # -- the client's side ---------------------------------------------------------------------------------
    def send(self, data: bytes, response: Response) -> asyncio.Future[None]:
        """Write a whole request; the future is done when the reply's headers are in."""
        assert self.transport is not None
        self._response = response
        self._headers = headers = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return headers

    def _failed(self, error: TransportFailure) -> None:
        if self._response is not None:
            self._response._fail(error)
        headers, self._headers = self._headers, None
        if headers is not None and not headers.done():
            headers.set_exception(error)

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()

    def finished(self) -> None:
        """The reply was read whole: ready for the next request."""
        self._response = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
