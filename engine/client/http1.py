"""HTTP/1.1 over asyncio: the one HTTP client the engine's model calls go through.

Why not aiohttp: a call's own work in the engine is ~50 µs, and aiohttp's request path (URL object,
header multidicts, tracing hooks, timers, its stream reader) cost ~80 µs more on top of that; over this
client the bare loop of bench_run.py takes ~16 µs a call (issue #22, bench/README.md "seventh pass"). It does
only what an OpenAI-compatible endpoint needs: POST a body whose bytes are ready, read the status, the
headers and the body (whole or as it arrives; `engine.client.http1_reply`). What it leaves out on purpose:
proxies (the aiohttp session before it did not read the environment's proxy settings either), cookies,
redirects (a 3xx reply is an error that names where it points: an API base URL that moved is a config fix,
and a POST that silently turns into a GET is worse), HTTP/2, and compression other than gzip and deflate (it
asks for none; a server that sends one anyway is decoded).

Connections are kept per (scheme, host, port) and reused, newest first. `Pool(limit)` bounds the requests in
flight (and so the connections in use) as aiohttp's connector `limit` did. Failures are the classes of
`engine.client.http1_reply` (`TransportFailure` and its three kinds), re-exported here.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from engine.client.http1_reply import (
    ConnectFailure,
    Connection,
    ConnectionClosed,
    ProtocolFailure,
    Response,
    TransportFailure,
)

__all__ = ["ConnectFailure", "ConnectionClosed", "Pool", "ProtocolFailure", "Response", "TransportFailure"]

USER_AGENT = "llm-eval-engine"
_PATH_SAFE = "/%:@!$&'()*+,;=-._~?"


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


class Pool:
    """Keep-alive connections for the run, and the bound on requests in flight.

    Args:
        limit: Requests in flight at most (more wait for a slot).
        ssl_context: For https:// URLs; None: the system's default trust (`ssl.create_default_context`).
    """

    def __init__(self, limit: int, ssl_context: ssl.SSLContext | None = None) -> None:
        self._limit = max(1, limit)
        self._slots = asyncio.Semaphore(self._limit)
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
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
        connection: Connection | None = None
        try:
            connection = self._reuse(target.key) or await self._connect(target)
            response = Response(connection, self._give_back)
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

    def _reuse(self, key: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            transport = connection.transport
            if not connection.closed and transport is not None and not transport.is_closing():
                return connection
        return None

    async def _connect(self, target: _Target) -> Connection:
        loop = asyncio.get_running_loop()
        context = None
        if target.tls:
            context = self._ssl = self._ssl or ssl.create_default_context()
        try:
            _, connection = await loop.create_connection(
                lambda: Connection(target.key), target.host, target.port, ssl=context,
                server_hostname=target.host if target.tls else None,
                happy_eyeballs_delay=0.25)   # RFC 8305's delay: an unreachable IPv6 address does not stall the call
        except OSError as exc:   # refused, unreachable, unknown host (gaierror), TLS (SSLError)
            raise ConnectFailure(f"cannot connect to {target.host}:{target.port}: {type(exc).__name__}: {exc}") \
                from None
        return connection

    def _give_back(self, connection: Connection, whole: bool) -> None:
        self._slots.release()
        if not whole or connection.closed or self._closed:
            connection.close()
            return
        connection.finished()
        idle = self._idle.setdefault(connection.key, [])
        if len(idle) >= self._limit:
            idle.pop(0).close()
        idle.append(connection)
