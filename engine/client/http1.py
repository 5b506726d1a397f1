"""HTTP/1.1 over asyncio: the one HTTP client the engine's model calls go through.

Why not aiohttp: a call's own work in the engine is ~50 µs, and aiohttp's request path (URL object,
header multidicts, tracing hooks, timers, its stream reader) costs ~80 µs more on top of that (issue #22,
bench/README.md). This client does only what an OpenAI-compatible endpoint needs: POST a body whose bytes
are ready, read the status, the headers and the body (whole or as it arrives). That takes 29-35 µs a call in
the same bench. What it leaves out on purpose: proxies (the aiohttp session before it did not read the
environment's proxy settings either), cookies, redirects (a 3xx reply is an error that names where it
points: an API base URL that moved is a config fix, and a POST that silently turns into a GET is worse),
HTTP/2, and compression other than gzip and deflate (it asks for none; a server that sends one anyway is
decoded).

Parsing is llhttp's, Node's parser (through httptools, as uvicorn uses it): chunked bodies, keep-alive,
bodies delimited by Content-Length or by the end of the connection, 1xx informational replies skipped.

Failures are exceptions by class::

    TransportFailure                 the try failed in transit (retried: `engine.client.retry.transport_error`)
     ├── ConnectFailure              no connection: refused, unresolvable host, TLS handshake, bad scheme
     ├── ConnectionClosed            the server closed the connection before the reply was complete
     └── ProtocolFailure             the bytes that came back are not an HTTP/1.1 reply

Connections are kept per (scheme, host, port) and reused, newest first. `Pool(limit)` bounds the requests in
flight (and so the connections in use) as aiohttp's connector `limit` did.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

import httptools

__all__ = ["ConnectFailure", "ConnectionClosed", "Pool", "ProtocolFailure", "Response", "TransportFailure"]

USER_AGENT = "llm-eval-engine"
_PAUSE_AT = 1 << 20   # unread body bytes past which the socket stops being read until the reader catches up
_PATH_SAFE = "/%:@!$&'()*+,;=-._~?"


class TransportFailure(Exception):
    """A try that failed in transit: no reply, or no complete one."""


class ConnectFailure(TransportFailure):
    """No connection could be made (refused, unknown host, TLS handshake, a scheme other than http(s))."""


class ConnectionClosed(TransportFailure):
    """The server closed the connection (or it was reset) before the reply was complete."""


class ProtocolFailure(TransportFailure):
    """What came back is not an HTTP/1.1 reply llhttp accepts."""


@dataclass(frozen=True, slots=True)
class _Target:
    """One URL, taken apart once: where to connect and the request line and Host header to send."""

    key: tuple[str, str, int]   # (scheme, host, port): the connections that may serve it
    host: str
    port: int
    tls: bool
    head: bytes                 # "POST <path> HTTP/1.1\r\nHost: ...\r\n" and Basic auth from userinfo, if any
    basic_auth: bool


def _target(url: str) -> _Target:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ConnectFailure(f"only http:// and https:// URLs can be called, not {scheme or 'a URL without a scheme'}"
                             + ("" if parts.hostname else " (no host)"))
    tls = scheme == "https"
    host = parts.hostname
    ascii_host = host.encode("idna").decode("ascii") if not host.isascii() else host
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError as exc:
        raise ConnectFailure(f"the URL's port is not a number: {exc}") from None
    shown_host = f"[{ascii_host}]" if ":" in ascii_host else ascii_host
    host_header = shown_host if parts.port in (None, 443 if tls else 80) else f"{shown_host}:{port}"
    path = quote(parts.path or "/", safe=_PATH_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=_PATH_SAFE)
    lines = [f"POST {path} HTTP/1.1", f"Host: {host_header}", f"User-Agent: {USER_AGENT}"]
    if parts.username is not None:
        user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        lines.append("Authorization: Basic " + base64.b64encode(user_pass.encode("utf-8")).decode("ascii"))
    head = ("\r\n".join(lines) + "\r\n").encode("utf-8")
    return _Target((scheme, ascii_host, port), ascii_host, port, tls, head, parts.username is not None)


def _header_block(headers: Mapping[str, str], basic_auth: bool) -> bytes:
    lines = []
    for name, value in headers.items():
        if "\n" in value or "\r" in value or "\n" in name or "\r" in name or ":" in name:
            raise ValueError(f"the header {name!r} holds a line break or a colon, which would split the request")
        if basic_auth and name.lower() == "authorization":
            raise ValueError("the URL holds credentials and the request an Authorization header: send one")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("utf-8")


class Response:
    """One reply being read: `status` and `headers` (names lower-cased) are set; the body comes as it arrives.

    Call `release()` when done with it (a `finally`): a reply read to its end gives its connection back
    for the next request; anything else closes it.
    """

    __slots__ = (
        "_buffered",
        "_chunks",
        "_complete",
        "_connection",
        "_decoder",
        "_error",
        "_pool",
        "_released",
        "_waiter",
        "headers",
        "status",
    )

    def __init__(self, connection: _Connection, pool: Pool) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self._connection = connection
        self._pool = pool
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
        self._pool._give_back(self._connection, self._complete and self._error is None)

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


class _Connection(asyncio.Protocol):
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


class Pool:
    """Keep-alive connections for the run, and the bound on requests in flight.

    Args:
        limit: Requests in flight at most (more wait for a slot).
        ssl_context: For https:// URLs; None: the system's default trust (`ssl.create_default_context`).
    """

    def __init__(self, limit: int, ssl_context: ssl.SSLContext | None = None) -> None:
        self._slots = asyncio.Semaphore(max(1, limit))
        self._limit = max(1, limit)
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._targets: dict[str, _Target] = {}
        self._ssl = ssl_context
        self._closed = False

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        """Send a POST and wait for the reply's status and headers; `release()` the reply when done with it.

        Raises:
            TransportFailure: No connection, or it broke before the headers were in.
            ValueError: A header value would split the request (a line break in it).
        """
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) > 1024:
                self._targets.clear()
            target = self._targets[url] = _target(url)
        data = b"".join((target.head, _header_block(headers, target.basic_auth),
                         b"Content-Length: %d\r\n\r\n" % len(body), body))
        await self._slots.acquire()
        connection: _Connection | None = None
        try:
            connection = self._reuse(target.key) or await self._connect(target)
            response = Response(connection, self)
            await connection.send(data, response)
            return response
        except BaseException:
            if connection is not None:
                connection.close()
            self._slots.release()
            raise

    async def __aenter__(self) -> Pool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every idle connection (those in use close as their replies are released)."""
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
        await asyncio.sleep(0)   # let the transports run their close callbacks

    def _reuse(self, key: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            transport = connection.transport
            if not connection.closed and transport is not None and not transport.is_closing():
                return connection
        return None

    async def _connect(self, target: _Target) -> _Connection:
        loop = asyncio.get_running_loop()
        context = None
        if target.tls:
            context = self._ssl = self._ssl or ssl.create_default_context()
        try:
            _, connection = await loop.create_connection(
                lambda: _Connection(target.key), target.host, target.port, ssl=context,
                server_hostname=target.host if target.tls else None,
                happy_eyeballs_delay=0.25)   # RFC 8305's delay: an unreachable IPv6 address does not stall the call
        except OSError as exc:   # refused, unreachable, unknown host (gaierror), TLS (SSLError)
            raise ConnectFailure(f"cannot connect to {target.host}:{target.port}: {type(exc).__name__}: {exc}") \
                from None
        return connection

    def _give_back(self, connection: _Connection, whole: bool) -> None:
        self._slots.release()
        if not whole or connection.closed or self._closed:
            connection.close()
            return
        connection.finished()
        idle = self._idle.setdefault(connection.key, [])
        if len(idle) >= self._limit:
            idle.pop(0).close()
        idle.append(connection)
