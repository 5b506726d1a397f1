"""The HTTP/1.1 client against raw loopback servers that send exactly the bytes each case needs.

Each server is a real asyncio TCP server on 127.0.0.1; its handler reads one request head and body per
exchange and writes canned bytes (good, odd or broken), so every reply framing and every failure the pool
classifies is seen on a real socket.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import ssl
import subprocess
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from engine.client.http1 import ConnectFailure, ConnectionClosed, Pool, ProtocolFailure

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]


class Server:
    """Counts connections and keeps each request's head and body."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.port = 0


async def read_request(reader: asyncio.StreamReader, server: Server) -> bytes | None:
    """One request's head (None at EOF); its body is read by Content-Length and kept."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length)
    server.requests.append((head, body))
    return head


def reply(body: bytes, status: str = "200 OK", extra: bytes = b"") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n".encode() + extra + b"\r\n" + body)


@asynccontextmanager
async def serving(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        try:
            await handler(reader, writer, server)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    tcp = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=ssl_context)
    server.port = tcp.sockets[0].getsockname()[1]
    async with tcp:
        yield server


def canned(*answers: bytes) -> Handler:
    """Answer each request on a connection with the next of `answers` (keep-alive), then wait for EOF."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        for answer in answers:
            if await read_request(reader, server) is None:
                return
            writer.write(answer)
            await writer.drain()
        await reader.read()
    return handler


async def whole(pool: Pool, url: str, body: bytes = b"{}", headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    response = await pool.post(url, body, headers or {"Content-Type": "application/json"})
    try:
        return response.status, await response.read()
    finally:
        response.release()


async def test_content_length_replies_reuse_one_connection() -> None:
    async with serving(canned(reply(b'{"a": 1}'), reply(b'{"b": 2}'))) as server, Pool(4) as pool:
        url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
        assert await whole(pool, url, b'{"q": 1}') == (200, b'{"a": 1}')
        assert await whole(pool, url, b'{"q": 2}') == (200, b'{"b": 2}')
    assert server.connections == 1
    head = server.requests[0][0]
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{server.port}\r\n".encode() in head
    assert b"Content-Length: 8\r\n" in head and b"Content-Type: application/json\r\n" in head
    assert [body for _, body in server.requests] == [b'{"q": 1}', b'{"q": 2}']


async def test_chunked_body_and_an_informational_reply_before_it() -> None:
    chunked = (b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
               b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Id: 7\r\n\r\n"
               b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    async with serving(canned(chunked, reply(b"again"))) as server, Pool(4) as pool:
        url = f"http://127.0.0.1:{server.port}/v1"
        response = await pool.post(url, b"{}", {})
        try:
            assert response.status == 200 and response.headers["x-id"] == "7" and "link" not in response.headers
            assert response.content_length is None
            assert await response.read() == b"hello world"
        finally:
            response.release()
        assert await whole(pool, url) == (200, b"again")
    assert server.connections == 1   # a chunked reply read to its end leaves the connection reusable


async def test_a_body_that_ends_with_the_connection_is_read_whole_and_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await read_request(reader, server)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + b'{"x": "' + b"y" * 70_000 + b'"}')
        await writer.drain()

    async with serving(handler) as server, Pool(4) as pool:
        url = f"http://127.0.0.1:{server.port}/v1"
        status, body = await whole(pool, url)
        assert status == 200 and len(body) == 70_009 and body.endswith(b'y"}')
        await whole(pool, url)
    assert server.connections == 2


async def test_connection_close_is_honoured() -> None:
    async with serving(canned(reply(b"one", extra=b"Connection: close\r\n"), reply(b"never"))) as server, \
            Pool(4) as pool:
        url = f"http://127.0.0.1:{server.port}/v1"
        assert await whole(pool, url) == (200, b"one")
        assert await whole(pool, url) == (200, b"one")
    assert server.connections == 2


async def test_a_second_reply_to_one_request_drops_the_connection() -> None:
    # The stray reply must not be read as the answer to the next request sent on this connection.
    async with serving(canned(reply(b"one") + reply(b"stray"), reply(b"wrong"))) as server, Pool(4) as pool:
        url = f"http://127.0.0.1:{server.port}/v1"
        assert await whole(pool, url) == (200, b"one")
        assert await whole(pool, url) == (200, b"one")
    assert server.connections == 2


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_compressed_body_is_decoded(encoding: str) -> None:
    text = b'{"content": "' + b"ok " * 5000 + b'"}'
    packed = gzip.compress(text) if encoding == "gzip" else zlib.compress(text)
    async with serving(canned(reply(packed, extra=f"Content-Encoding: {encoding}\r\n".encode()))) as server, \
            Pool(4) as pool:
        response = await pool.post(f"http://127.0.0.1:{server.port}/v1", b"{}", {})
        try:
            assert response.content_length is None   # the header gives the packed size, not the body's
            assert await response.read() == text
        finally:
            response.release()


async def test_an_unknown_compression_is_a_protocol_failure() -> None:
    async with serving(canned(reply(b"x", extra=b"Content-Encoding: br\r\n"))) as server, Pool(4) as pool:
        response = await pool.post(f"http://127.0.0.1:{server.port}/v1", b"{}", {})
        try:
            with pytest.raises(ProtocolFailure, match="'br'"):
                await response.read()
        finally:
            response.release()


async def test_a_reply_cut_mid_body_fails_and_its_connection_is_dropped() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await read_request(reader, server)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
        await writer.drain()

    async with serving(handler) as server, Pool(4) as pool:
        response = await pool.post(f"http://127.0.0.1:{server.port}/v1", b"{}", {})
        try:
            assert await response.next_chunk() == b"only part"
            with pytest.raises(ConnectionClosed, match="before the reply was complete"):
                await response.next_chunk()
        finally:
            response.release()
        assert pool._idle.get(("http", "127.0.0.1", server.port), []) == []


async def test_a_connection_closed_before_any_reply() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await read_request(reader, server)

    async with serving(handler) as server, Pool(4) as pool:
        with pytest.raises(ConnectionClosed):
            await pool.post(f"http://127.0.0.1:{server.port}/v1", b"{}", {})


async def test_bytes_that_are_not_http_are_a_protocol_failure() -> None:
    async with serving(canned(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")) as server, Pool(4) as pool:
        with pytest.raises(ProtocolFailure, match=r"not valid HTTP/1\.1"):
            await pool.post(f"http://127.0.0.1:{server.port}/v1", b"{}", {})


async def test_refused_and_unsupported_urls_are_connect_failures() -> None:
    async with serving(canned()) as server:
        port = server.port
    async with Pool(4) as pool:
        with pytest.raises(ConnectFailure, match=f"cannot connect to 127.0.0.1:{port}"):
            await pool.post(f"http://127.0.0.1:{port}/v1", b"{}", {})
        with pytest.raises(ConnectFailure, match=r"only http:// and https://"):
            await pool.post("ftp://127.0.0.1/v1", b"{}", {})
        # the slots given back on each failure: a pool of 4 still takes requests after 8 failures
        for _ in range(8):
            with pytest.raises(ConnectFailure):
                await pool.post(f"http://127.0.0.1:{port}/v1", b"{}", {})
        assert pool._slots._value == 4


async def test_headers_that_would_split_the_request_are_refused() -> None:
    async with serving(canned(reply(b"x"))) as server, Pool(4) as pool:
        url = f"http://127.0.0.1:{server.port}/v1"
        with pytest.raises(ValueError, match="line break"):
            await pool.post(url, b"{}", {"Authorization": "Bearer sk-1\r\nX-Evil: 1"})
        assert server.requests == []


async def test_userinfo_becomes_basic_auth_and_the_path_is_quoted() -> None:
    async with serving(canned(reply(b"x"), reply(b"y"))) as server, Pool(4) as pool:
        url = f"http://us%40er:p%3Ass@127.0.0.1:{server.port}/v1/chat completions?a=é"
        assert await whole(pool, url) == (200, b"x")
        with pytest.raises(ValueError, match="credentials"):
            await pool.post(url, b"{}", {"Authorization": "Bearer sk-1"})
    head = server.requests[0][0]
    assert b"POST /v1/chat%20completions?a=%C3%A9 HTTP/1.1\r\n" in head
    assert b"Authorization: Basic " + base64.b64encode(b"us@er:p:ss") + b"\r\n" in head
    assert b"us%40er" not in head


async def test_the_pool_bounds_requests_in_flight() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await read_request(reader, server) is not None:
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
            await asyncio.sleep(0.02)
            server.in_flight -= 1
            writer.write(reply(b"ok"))
            await writer.drain()

    async with serving(handler) as server, Pool(2) as pool:
        url = f"http://127.0.0.1:{server.port}/v1"
        results = await asyncio.gather(*(whole(pool, url) for _ in range(8)))
    assert results == [(200, b"ok")] * 8
    assert server.max_in_flight == 2 and server.connections == 2


async def test_a_cancelled_read_closes_its_connection_and_frees_its_slot() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await read_request(reader, server) is not None:
            if len(server.requests) == 1:   # the first reply stalls after its headers
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
                await writer.drain()
                continue
            writer.write(reply(b"fine"))
            await writer.drain()

    async with serving(handler) as server, Pool(1) as pool:
        url = f"http://127.0.0.1:{server.port}/v1"

        async def stalled() -> bytes:
            response = await pool.post(url, b"{}", {})
            try:
                return await response.read()
            finally:
                response.release()

        task = asyncio.create_task(stalled())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.wait_for(whole(pool, url), 5) == (200, b"fine")   # the one slot came back
    assert server.connections == 2   # the half-read connection was not reused


async def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await read_request(reader, server)
        writer.write(reply(b"then closed"))
        await writer.drain()

    async with serving(handler) as server, Pool(4) as pool:
        url = f"http://127.0.0.1:{server.port}/v1"
        assert await whole(pool, url) == (200, b"then closed")
        await asyncio.sleep(0.05)   # the server's FIN arrives while the connection is idle
        assert await whole(pool, url) == (200, b"then closed")
    assert server.connections == 2


async def test_a_large_body_read_in_pieces_arrives_intact() -> None:
    big = bytes(range(256)) * 24_000   # 6 MB: past the pause mark several times
    async with serving(canned(reply(big))) as server, Pool(4) as pool:
        response = await pool.post(f"http://127.0.0.1:{server.port}/v1", b"{}", {})
        parts = []
        try:
            await asyncio.sleep(0.2)   # let the reader fall behind, so the socket is paused and resumed
            while chunk := await response.next_chunk():
                parts.append(chunk)
        finally:
            response.release()
        assert b"".join(parts) == big


async def test_an_error_reply_is_read_only_as_far_as_asked() -> None:
    async with serving(canned(reply(b"E" * 5000, status="500 Internal Server Error", extra=b"Retry-After: 3\r\n"))
                       ) as server, Pool(4) as pool:
        response = await pool.post(f"http://127.0.0.1:{server.port}/v1", b"{}", {})
        try:
            assert (response.status, response.headers["retry-after"]) == (500, "3")
            assert await response.read_at_most(100) == b"E" * 100
        finally:
            response.release()


def _certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


async def test_https_verifies_the_server_and_speaks_tls(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    async with serving(canned(reply(b"secure"), reply(b"again")), server_side) as server:
        url = f"https://127.0.0.1:{server.port}/v1"
        async with Pool(4) as pool:   # the system's trust: a self-signed certificate is refused
            with pytest.raises(ConnectFailure, match="SSLCertVerificationError"):
                await pool.post(url, b"{}", {})
        async with Pool(4, ssl.create_default_context(cafile=str(cert))) as pool:
            assert await whole(pool, url) == (200, b"secure")
            assert await whole(pool, url) == (200, b"again")
    assert server.requests[0][0].count(f"Host: 127.0.0.1:{server.port}".encode()) == 1

