"""`BatchHTTP` over the run's aiohttp sessions: what the batch wires (`engine.client.providers.*_batch`) send.

The same sessions as the model calls (`engine.client.session`: proxies from the environment, never for
loopback), the model's connect and read time limits, redirects refused, every body read under a cap (a whole
reply up to its limit, a download line by line with each line capped), and aiohttp's exceptions mapped as the
live calls map them (`retry.transport_error`, `retry.timeout_error`; `NotSent` when no connection was made).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from engine.client import retry
from engine.client.providers.batch import FormFile, HTTPReply, LongLine, NotSent
from engine.client.session import Sessions
from engine.errors import ClientError
from engine.model.model_config import ModelConfig

__all__ = ["BatchTransport"]

_CHUNK = 1 << 16
#: Bytes kept of an over-long line: enough to tell whose it was.
_HEAD = 4096


class BatchTransport:
    """The HTTP of one model's batches.

    Args:
        sessions: The run's sessions.
        model: The model: its `connect_timeout_s` bounds each connection, its `timeout_s` each wait for bytes.
    """

    def __init__(self, sessions: Sessions, model: ModelConfig) -> None:
        self._sessions = sessions
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=model.connect_timeout_s,
                                              sock_read=model.timeout_s)
        self._model = model

    async def send(self, method: str, url: str, headers: Mapping[str, str], *, json: Any = None,
                   data: bytes | None = None, form: Mapping[str, str] | None = None, file: FormFile | None = None,
                   limit: int) -> HTTPReply:
        """One request; the reply's body read up to `limit` bytes."""
        body: Any = data
        if file is not None or form is not None:
            body = aiohttp.FormData()
            for name, value in (form or {}).items():
                body.add_field(name, value)
            if file is not None:
                body.add_field(file.field, file.content, filename=file.filename, content_type=file.content_type)
        try:
            async with self._sessions.for_url(url).request(
                    method, url, headers=dict(headers), json=json, data=body, timeout=self._timeout,
                    allow_redirects=False) as resp:
                if resp.content_length is not None and resp.content_length > limit:
                    raise retry.too_large(limit)
                parts: list[bytes] = []
                size = 0
                async for chunk in resp.content.iter_any():
                    size += len(chunk)
                    if size > limit:
                        raise retry.too_large(limit)
                    parts.append(chunk)
                return HTTPReply(resp.status, resp.headers, b"".join(parts))
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._failure(exc) from None

    @asynccontextmanager
    async def download(self, url: str, headers: Mapping[str, str], *,
                       line_limit: int) -> AsyncIterator[_Download]:
        """A `GET` whose body is read line by line."""
        try:
            async with self._sessions.for_url(url).get(url, headers=dict(headers), timeout=self._timeout,
                                                       allow_redirects=False) as resp:
                yield _Download(resp, line_limit, self)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._failure(exc) from None

    def _failure(self, exc: BaseException) -> ClientError:
        """aiohttp's exception as the live calls map it (`engine.client.openai._failure`)."""
        if isinstance(exc, aiohttp.ConnectionTimeoutError | aiohttp.ClientConnectorError):
            error = retry.connect_timeout_error(self._model.connect_timeout_s) \
                if isinstance(exc, aiohttp.ConnectionTimeoutError) else retry.transport_error(exc, during="connecting")
            return NotSent(str(error), kind=error.kind, retryable=True)
        if isinstance(exc, TimeoutError) and not isinstance(exc, aiohttp.ClientError):
            return retry.timeout_error(self._model.timeout_s)
        return retry.transport_error(exc, during="sending the request or reading its reply")


class _Download:
    """An answered download (`engine.client.providers.batch.Download`)."""

    def __init__(self, resp: aiohttp.ClientResponse, line_limit: int, transport: BatchTransport) -> None:
        self._resp = resp
        self._limit = line_limit
        self._transport = transport
        self.status = resp.status
        self.headers: Mapping[str, str] = resp.headers

    async def text(self, limit: int) -> str:
        """The body's start, at most `limit` bytes."""
        parts: list[bytes] = []
        got = 0
        while got < limit and (chunk := await self._resp.content.read(min(_CHUNK, limit - got))):
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts).decode("utf-8", "replace")

    async def lines(self) -> AsyncIterator[bytes | LongLine]:
        """Each non-blank line, capped: a longer one is read past (never held) and given as a `LongLine`."""
        pending = bytearray()
        long_head: bytes | None = None   # set while reading past an over-long line
        long_size = 0
        try:
            async for chunk in self._resp.content.iter_any():
                start = 0
                while start < len(chunk):
                    end = chunk.find(b"\n", start)
                    piece = chunk[start:] if end < 0 else chunk[start:end]
                    start = len(chunk) if end < 0 else end + 1
                    if long_head is not None:
                        long_size += len(piece)
                    else:
                        pending += piece
                        if len(pending) > self._limit:
                            long_head, long_size = bytes(pending[:_HEAD]), len(pending)
                            pending.clear()
                    if end < 0:
                        continue
                    if long_head is not None:
                        yield LongLine(long_head, long_size)
                        long_head = None
                        continue
                    line = bytes(pending).rstrip(b"\r")
                    pending.clear()
                    if line.strip():
                        yield line
            if long_head is not None:
                yield LongLine(long_head, long_size)
            elif bytes(pending).strip():
                yield bytes(pending).rstrip(b"\r")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._transport._failure(exc) from None
