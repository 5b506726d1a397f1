"""The one place that touches aiohttp's replies and maps its exceptions: a try sent, its reply read under caps.

`send` posts one try of a model call and reads its reply into a `CallResult` (a whole body under the size cap, or
SSE through `engine.client.sse`, each event folded in by the provider's reader); whatever goes wrong becomes a
`Failed` carrying an error of `engine.client.retry`, mapped in `_failure` alone. A try whose reply had started
(a 2xx and its first body bytes, `CallResult.reply_started`) is never to be sent again, whatever breaks after:
`_started` marks its error so (`retry.after_reply_started`). Secrets in an error body are masked before it is
kept (`engine.redact`). The caller puts the key into the URL or headers before the send; nothing here calls back.

Another kind of request (a plain JSON call, an upload, a download read line by line) goes beside `send` with the
same parts: a `Limits`, `_read_at_most` / `_read_body` under its cap, `_refused` for a reply of 3xx and above,
`_failure` for aiohttp's exceptions. `BatchTransport` is that for the batch wires (`BatchHTTP`): a JSON or
multipart request read whole under a cap, a download read line by line, `_batch_failure` mapping its exceptions.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDict

from engine.client import retry
from engine.client.providers import Provider, provider
from engine.client.providers.batch import FormFile, HTTPReply, LongLine, NotSent
from engine.client.response import CallResult, split_think
from engine.client.session import Sessions
from engine.client.sse import SSEDecoder
from engine.errors import ClientError
from engine.model.model_config import ModelConfig
from engine.redact import Redactor

__all__ = ["BatchTransport", "Failed", "Limits", "classified", "finish", "parse_whole", "send"]

_ERROR_BODY_CHARS = 16_000   # an error body is read this far: whole, so its JSON gives its `error.message`

# Reads a whole (non-streamed) reply into the result (`PreparedRequest.reader`, a provider's `parse`).
Reader = Callable[[bytes, CallResult, Redactor], None]


@dataclass(frozen=True)
class Limits:
    """What bounds one try: the whole try (`timeout_s`), its connection (`connect_timeout_s`) and its reply's size
    (`max_bytes`). The two timeouts are named in the errors they raise."""

    timeout_s: float
    connect_timeout_s: float
    max_bytes: int


class Failed(Exception):
    """One failed try: the classified error and the headers its retry delay comes from."""

    def __init__(self, error: ClientError, headers: Mapping[str, str] | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.headers = headers


@functools.cache
def _timeout(connect_s: float) -> aiohttp.ClientTimeout:
    """aiohttp's timeout of a try: its connection only (the whole try is bounded by `asyncio.timeout`)."""
    return aiohttp.ClientTimeout(total=None, sock_connect=connect_s)


async def send(session: aiohttp.ClientSession, url: str, headers: Mapping[str, str], payload: bytes, *,
               api: Provider, stream: bool, reader: Reader | None, limits: Limits, result: CallResult,
               redact: Redactor, observe: Callable[[int, Mapping[str, str]], None] | None = None,
               written: Callable[[], None] | None = None) -> None:
    """One try: post `payload`, read the reply into `result` within `limits`; raise `Failed` when it fails.

    Args:
        session: The session to send through (`engine.client.session.Sessions.for_url`).
        url: The method's URL, the key in it already where the model's API takes it there.
        headers: The request's headers, the key in them already.
        payload: The JSON body.
        api: The provider whose reply this is (its readers and its error classification).
        stream: The reply is an SSE stream.
        reader: Reads a whole reply (None: the provider's `parse`).
        limits: The try's time and size limits.
        result: Filled with the reply; once it has started (`result.reply_started`), a failure is never retried.
        redact: Masks the secrets an error body may echo.
        observe: Told each reply's status and headers (the rate-limit budget reads them).
        written: Called once the request's headers are written (`engine.client.session`).
    """
    try:
        async with asyncio.timeout(limits.timeout_s):
            await _exchange(session, url, headers, payload, api, stream, reader, limits, result, redact, observe,
                            written)
    except TimeoutError as exc:   # the try's own limit (aiohttp's timeouts are mapped inside)
        raise Failed(_failure(exc, limits, result, stream=stream), None) from None


async def _exchange(session: aiohttp.ClientSession, url: str, headers: Mapping[str, str], payload: bytes,
                    api: Provider, stream: bool, reader: Reader | None, limits: Limits, result: CallResult,
                    redact: Redactor, observe: Callable[[int, Mapping[str, str]], None] | None,
                    written: Callable[[], None] | None) -> None:
    """`send` within the try's time limit."""
    started = time.perf_counter()
    try:
        # Redirects are refused: a 3xx is an error row naming where the endpoint moved (`retry.status_error`).
        async with session.post(url, data=payload, headers=headers, timeout=_timeout(limits.connect_timeout_s),
                                allow_redirects=False, trace_request_ctx=written) as resp:
            if observe is not None:
                observe(resp.status, resp.headers)
            if resp.status >= 300:
                raise await _refused(resp, api, redact)
            if stream:
                await _read_stream(resp, result, started, api, redact, limits.max_bytes)
            else:
                raw = await _read_body(resp, limits.max_bytes, result)
                result.ttft_provider_s = time.perf_counter() - started
                parse_whole(raw, result, reader or api.parse, redact)
    except aiohttp.ClientError as exc:
        raise Failed(_failure(exc, limits, result, stream=stream), None) from None
    except ClientError as exc:  # a reply that cannot be read, found while parsing
        raise Failed(_started(exc, result, stream), None) from None
    except (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError, OverflowError) as exc:
        # The shape checks in response.py should leave nothing to reach here; if a reply still
        # trips the reader, it is a bad response (one row), never a crashed run.
        during = "reading" if result.ttft_provider_s is not None else "sending the request for"
        raise Failed(_started(retry.bad_response(f"{during} the reply failed: {type(exc).__name__}: "
                                                 f"{str(exc)[:200]}"), result, stream), None) from None
    finally:
        result.latency_s = time.perf_counter() - started
    finish(result)


def parse_whole(raw: bytes, result: CallResult, parse: Reader, redact: Redactor) -> None:
    """A whole reply's bytes read into `result` by the provider's reader, for a live call and a batch's answer
    alike; a reader that trips on a shape its checks missed gives a bad response (one row), never a crash.

    Raises:
        ClientError: The reply cannot be read.
    """
    try:
        parse(raw, result, redact)
    except (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError, OverflowError) as exc:
        raise retry.bad_response(f"reading the reply failed: {type(exc).__name__}: {str(exc)[:200]}") from None


def finish(result: CallResult) -> None:
    """A read reply made the engine's: a leading `<think>` block moved to reasoning, a reply its token limit
    cut marked truncated."""
    split_think(result)
    if result.finish_reason == "length":
        result.truncated = True


async def _refused(resp: aiohttp.ClientResponse, api: Provider, redact: Redactor) -> Failed:
    """A reply of 3xx and above as the try's failure: its body read up to a cap, then `classified`."""
    # Read past the cut by a key's length, so the key is masked whole before the cut.
    return classified(api, resp.status, resp.headers, await _read_at_most(resp, _ERROR_BODY_CHARS + redact.longest),
                      redact)


def classified(api: Provider, status: int, headers: Mapping[str, str], raw: bytes, redact: Redactor) -> Failed:
    """A reply of 3xx and above as its provider classifies it (`Provider.classify`), for a live try and a batch
    call alike: its body masked and cut, the delay the body asks for (Gemini's RetryInfo) in its headers as
    `retry-after` when they name none, and the server's delay on the error (`ClientError.retry_after_s`)."""
    body = redact.clean(raw.decode("utf-8", "replace"))[:_ERROR_BODY_CHARS]
    error, delay = api.classify(status, headers, body)
    delayed = _with_delay(headers, delay)
    error.retry_after_s = retry.server_delay(delayed)
    return Failed(error, delayed)


def _failure(exc: BaseException, limits: Limits, result: CallResult, *, stream: bool) -> ClientError:
    """A failed try's exception as an error of `engine.client.retry`: the one place aiohttp's are mapped.

    Args:
        exc: An `aiohttp.ClientError` (refused, reset, closed early, a bad reply, a connect timeout) or the
            `TimeoutError` of the try's own limit.
        limits: The try's limits, named in the message.
        result: The try's result so far: once its reply has started, the failure is not retried.
        stream: The reply is a stream (what was cut is counted in characters of the answer).
    """
    if isinstance(exc, aiohttp.ConnectionTimeoutError):   # no connection within connect_timeout_s
        return retry.connect_timeout_error(limits.connect_timeout_s)
    if isinstance(exc, TimeoutError) and not isinstance(exc, aiohttp.ClientError):
        return _started(retry.timeout_error(limits.timeout_s), result, stream)
    reading = result.ttft_provider_s is not None or result.reply_started
    return _started(retry.transport_error(exc, during="reading the response" if reading else "connecting"), result,
                    stream)


def _started(error: ClientError, result: CallResult, stream: bool) -> ClientError:
    """`error` as it stands once the reply has started: not retried, the partial answer kept (and marked
    truncated when the reply was cut)."""
    if not result.reply_started:
        return error
    cut = error.kind in ("connection", "timeout") or (stream and error.kind == "stream")
    if cut:
        result.truncated = True
    received = len(result.text) + len(result.reasoning or "") + sum(len(c.raw_arguments) for c in result.tool_calls)
    return retry.after_reply_started(error, cut=cut, received=received if stream else None)


def _with_delay(headers: Mapping[str, str], delay: float | None) -> Mapping[str, str]:
    """The failed reply's headers, with the delay its body asked for (Gemini's RetryInfo) as `retry-after`
    when they name none: `engine.client.retry` reads every server delay from there."""
    if delay is None or "retry-after" in headers or "retry-after-ms" in headers:
        return headers
    out = CIMultiDict(headers)
    out["retry-after"] = f"{delay:g}"
    return out


async def _read_at_most(resp: aiohttp.ClientResponse, size: int) -> bytes:
    """The first `size` bytes of a body (all of it when shorter)."""
    parts: list[bytes] = []
    got = 0
    while got < size and (chunk := await resp.content.read(size - got)):
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


async def _read_body(resp: aiohttp.ClientResponse, limit: int, result: CallResult | None = None) -> bytes:
    """A whole response body, refused as soon as it passes `limit` bytes (before any, by its Content-Length);
    `result` (a try's) is marked started at its first bytes."""
    length = resp.content_length
    if length is not None and length > limit:
        raise retry.too_large(limit)
    parts = []
    size = 0
    async for chunk in resp.content.iter_any():   # decoded (gzip, deflate) by aiohttp
        if result is not None:
            result.reply_started = True
        size += len(chunk)
        if size > limit:
            raise retry.too_large(limit)
        parts.append(chunk)
    return b"".join(parts)


async def _read_stream(resp: aiohttp.ClientResponse, result: CallResult, started: float, api: Provider,
                       redact: Redactor, limit: int) -> None:
    """Read an SSE response into `result` with the provider's reader; raise when it is malformed, cut short or
    over `limit` bytes."""
    decoder = SSEDecoder()
    reader = api.stream(result, redact)
    visible = False
    size = 0
    perf = time.perf_counter
    try:
        async for chunk in resp.content.iter_any():
            if result.ttft_provider_s is None:
                result.ttft_provider_s = perf() - started
                result.reply_started = True
            size += len(chunk)
            if size > limit:
                result.truncated = True
                raise retry.too_large(limit)
            datas = decoder.feed(chunk)
            if not datas:
                continue
            if reader.feed(datas) and not visible:
                visible = True
                result.ttft_visible_s = perf() - started
            if reader.done:
                break
        else:
            datas = decoder.close()
            if datas:
                reader.feed(datas)
    finally:
        # Kept on every way out: a stream cut short (a closed connection, the try's timeout, a bad event)
        # keeps the partial answer and its tool calls so far (marked truncated).
        reader.keep()
    reader.end()


# -- the batch wires' HTTP ----------------------------------------------------------------------------------------

#: Bytes kept of an over-long line: enough to tell whose it was.
_HEAD = 4096


class BatchTransport:
    """`BatchHTTP` (`engine.client.providers.batch`) over the run's sessions: the HTTP of one model's batches.

    The same sessions as the model's calls (proxies from the environment, never for loopback), redirects refused,
    every body read under a cap: a whole reply up to its limit, a download line by line with each line capped (a
    longer one read past, never held). Unlike a try of a call, an exchange has no overall time limit (an upload or
    a results file may take minutes): each wait for bytes has one instead, `timeout_s`.

    Args:
        sessions: The run's sessions.
        model: The model: its `connect_timeout_s` bounds each connection, its `timeout_s` each wait for bytes, its
            API's `classify` reads a refusal as its live calls' are read.
    """

    def __init__(self, sessions: Sessions, model: ModelConfig) -> None:
        self._sessions = sessions
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=model.connect_timeout_s,
                                              sock_read=model.timeout_s)
        self._model = model
        self._api = provider(model.api)

    def refused(self, status: int, headers: Mapping[str, str], body: bytes, redact: Redactor) -> ClientError:
        """A non-2xx reply's error, `classified` as the model's live calls are (the delay the server asked for
        on it)."""
        return classified(self._api, status, headers, body, redact).error

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
                return HTTPReply(resp.status, resp.headers, await _read_body(resp, limit))
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _batch_failure(exc, self._model) from None

    @asynccontextmanager
    async def download(self, url: str, headers: Mapping[str, str], *, line_limit: int,
                       limit: int) -> AsyncIterator[_Download]:
        """A `GET` whose body is read line by line, `limit` bytes at most."""
        try:
            async with self._sessions.for_url(url).get(url, headers=dict(headers), timeout=self._timeout,
                                                       allow_redirects=False) as resp:
                yield _Download(resp, line_limit, limit, self._model)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _batch_failure(exc, self._model) from None


def _batch_failure(exc: BaseException, model: ModelConfig) -> ClientError:
    """A batch exchange's exception as `_failure` maps a try's (no reply to mark started: a batch call is read
    whole before anything is kept); `NotSent` when no connection was made."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError | aiohttp.ClientConnectorError):
        error = retry.connect_timeout_error(model.connect_timeout_s) \
            if isinstance(exc, aiohttp.ConnectionTimeoutError) else retry.transport_error(exc, during="connecting")
        return NotSent(str(error), kind=error.kind, retryable=True)
    if isinstance(exc, TimeoutError) and not isinstance(exc, aiohttp.ClientError):
        return retry.timeout_error(model.timeout_s)
    return retry.transport_error(exc, during="sending the request or reading its reply")


class _Download:
    """An answered download (`engine.client.providers.batch.Download`)."""

    def __init__(self, resp: aiohttp.ClientResponse, line_limit: int, limit: int, model: ModelConfig) -> None:
        self._resp = resp
        self._limit = line_limit
        self._total_limit = limit
        self._model = model
        self.status = resp.status
        self.headers: Mapping[str, str] = resp.headers

    async def text(self, limit: int) -> str:
        """The body's start, at most `limit` bytes."""
        return (await _read_at_most(self._resp, limit)).decode("utf-8", "replace")

    async def lines(self) -> AsyncIterator[bytes | LongLine]:
        """Each non-blank line, capped: a longer one is read past (never held) and given as a `LongLine`; the
        whole body past the download's limit (blank lines included) raises `retry.too_large`."""
        pending = bytearray()
        long_head: bytes | None = None   # set while reading past an over-long line
        long_size = 0
        total = 0
        try:
            async for chunk in self._resp.content.iter_any():
                total += len(chunk)
                if total > self._total_limit:
                    raise retry.too_large(self._total_limit)
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
            raise _batch_failure(exc, self._model) from None
