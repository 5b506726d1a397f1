"""What the three batch wires share: a JSON reply checked and read, results read line by line under caps, and
exactly one outcome for each request asked for.

Every read of a provider's reply here is capped (`BatchHTTP`'s limits) and type-checked; every message is
masked (`Redactor.clean` and `mask_urls`) before it leaves.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Literal
from urllib.parse import urlsplit

from engine.client import retry
from engine.client.providers.batch import (
    CUSTOM_ID,
    BatchFailure,
    BatchHTTP,
    BatchLimits,
    BatchOutcome,
    BatchReply,
    BatchStatus,
    BatchTarget,
    FailureKind,
    HTTPReply,
    LongLine,
    NotSent,
    SubmitError,
)
from engine.client.tool_calls import loads
from engine.errors import ClientError, HTTPStatusError
from engine.redact import Redactor, mask_urls

__all__ = ["JSON_LIMIT", "BatchEndpoint", "Outcomes", "ResultLine", "answers_in", "compact", "encoded_requests",
           "integer", "json_object", "keyed", "line_limit", "masked", "read_json", "reply", "resource_id",
           "result_lines", "results_limit", "same_origin", "status_failure", "submit_error", "text", "unanswered"]

#: The most bytes a batch or file object may take: they are a few hundred bytes; more is a hostile server.
JSON_LIMIT = 1 << 20
#: Characters of an error body read for its message, as the live client reads them.
_ERROR_CHARS = 16_000
#: The overhead a results line adds around one reply body (ids, status, a request id), within its cap.
_LINE_OVERHEAD = 64 << 10

#: How many times its line cap a results line may run on, read past, before its file is cut off there.
_READ_PAST = 8

_RESOURCE_ID = re.compile(r"^[A-Za-z0-9_.:/-]{1,200}$")

def compact(value: Any) -> bytes:
    """JSON as the wire takes it: compact, ASCII-escaped (any string survives, lone surrogates included)."""
    return json.dumps(value, separators=(",", ":")).encode()


def encoded_requests(requests: Sequence[tuple[str, Mapping[str, Any]]], limits: BatchLimits,
                     encode: Callable[[str, Mapping[str, Any]], bytes]) -> list[bytes]:
    """Each request as its wire writes it (`encode`, whose length is what it adds to the batch), after refusing a
    batch the provider would refuse, before anything is sent: ids not `CUSTOM_ID` or repeated, none at all, or
    more requests or bytes than `limits` allow (a `ValueError` saying which)."""
    if not requests:
        raise ValueError("a batch needs at least one request")
    if len(requests) > limits.max_requests:
        raise ValueError(f"a batch takes at most {limits.max_requests} requests, not {len(requests)}")
    seen: set[str] = set()
    out: list[bytes] = []
    total = 0
    for custom_id, body in requests:
        if not CUSTOM_ID.match(custom_id):
            raise ValueError(f"custom id {custom_id[:80]!r} is not 1-64 letters, digits, `_` or `-`")
        if custom_id in seen:
            raise ValueError(f"custom id {custom_id!r} appears twice in one batch")
        seen.add(custom_id)
        out.append(encode(custom_id, body))
        total += len(out[-1])
    if total > limits.max_bytes:
        raise ValueError(f"a batch takes at most {limits.max_bytes} bytes of requests, not {total}")
    return out


def masked(error: ClientError, redact: Redactor) -> ClientError:
    """`error` with keys, URL credentials and query secrets masked in its message (its class and kind kept)."""
    message = str(error)
    clean = mask_urls(redact.clean(message))
    return error if clean == message else _reworded(error, clean)


def _reworded(error: ClientError, message: str) -> ClientError:
    """`error` with another message: its class, kind, status and every attribute kept (`SubmitError.sent`, the
    server's `retry_after_s`)."""
    out = type(error).__new__(type(error), message)   # its own __init__ may take other arguments (SubmitError's)
    out.__dict__.update(vars(error))
    return out


def status_error(http: BatchHTTP, status: int, headers: Mapping[str, str], body: bytes,
                 redact: Redactor) -> ClientError:
    """A non-2xx reply as the live calls classify it (`BatchHTTP.refused`: the model's API's `classify`, which
    reads the delay a body asks for too), its message masked."""
    return masked(http.refused(status, headers, body[:_ERROR_CHARS + redact.longest], redact), redact)


def json_object(raw: bytes, what: str, redact: Redactor) -> dict[str, Any]:
    """A reply body that must be one JSON object; a bad response quoting its start, masked, otherwise."""
    try:
        data = loads(raw, what)
    except ValueError:
        shown = raw[:160].decode("utf-8", "replace")
        raise retry.bad_response(f"{what} is not JSON: {redact.excerpt(shown, 80)}") from None
    if type(data) is not dict:
        raise retry.wrong_type(what, data, "an object")
    return data


async def read_json(http: BatchHTTP, target: BatchTarget, method: str, url: str, what: str, *,
                    headers: Mapping[str, str] | None = None, body: bytes | None = None,
                    limit: int = JSON_LIMIT, **extra: Any) -> tuple[dict[str, Any], HTTPReply]:
    """One request whose 2xx reply is a JSON object (`what` names it in messages), authenticated as the live calls
    are (`keyed`); a non-2xx one raises as its provider classifies it. Every error is masked and names `what`."""
    try:
        reply = await http.send(method, keyed(url, target), headers if headers is not None else target.headers,
                                data=body, limit=limit, **extra)
        if not 200 <= reply.status < 300:
            raise status_error(http, reply.status, reply.headers, reply.body, target.redact)
        return json_object(reply.body, what, target.redact), reply
    except ClientError as error:
        raise masked(_naming(error, what), target.redact) from None


def reply(body: Any) -> BatchReply:
    """A request's answer: the reply body `parse` reads, as compact JSON."""
    return BatchReply(compact(body))


def keyed(url: str, target: BatchTarget) -> str:
    """`url` with the key added as the live calls add it (`BatchTarget.key_query`): every batch request, a URL a
    reply names included, authenticates as the model's calls do. Only ever sent, never returned or kept."""
    if not target.key_query:
        return url
    return url + ("&" if "?" in url else "?") + target.key_query


def _naming(error: ClientError, what: str) -> ClientError:
    """`error` with the place it happened (`what`) in front of its message, unless it names it already."""
    return error if what in str(error) else _reworded(error, f"{what}: {error}")


def submit_error(error: ClientError, *, created: bool) -> SubmitError:
    """A failed submit step as `SubmitError`. `created`: the step creates the batch, so unless the server answered
    (a non-2xx status) or nothing was sent (`NotSent`), a batch may exist."""
    if isinstance(error, SubmitError):
        return error
    sent = created and not isinstance(error, (HTTPStatusError, NotSent))
    return SubmitError(error, sent=sent)


def text(data: Mapping[str, Any], key: str, where: str) -> str | None:
    """`data[key]` when it is a string, None when absent or null; a bad response naming the place otherwise."""
    value = data.get(key)
    if value is None or type(value) is str:
        return value
    raise retry.wrong_type(f"{where}.{key}", value, "a string")


def resource_id(data: Mapping[str, Any], key: str, where: str, redact: Redactor,
                pattern: re.Pattern[str] = _RESOURCE_ID) -> str:
    """An id a reply gives (a batch's, a file's): a short plain string, as every provider's are (`pattern`), and
    no secret (a server that echoes the key as an id), before it goes into a URL or the journal; a bad response
    otherwise."""
    value = text(data, key, where)
    if not value or not pattern.match(value):
        raise retry.bad_response(f"`{where}.{key}` is {redact.excerpt(str(value), 60)!r}, not an id")
    if redact.clean(value) != value:
        raise retry.bad_response(f"`{where}.{key}` holds a secret, so it is not kept as an id")
    return value


def integer(data: Mapping[str, Any], key: str, where: str) -> int:
    """`data[key]` as a count: a whole number (or proto3 JSON's decimal string), 0 when absent."""
    value = data.get(key)
    if value is None:
        return 0
    if type(value) is str and value.isdigit() and len(value) < 19:
        return int(value)
    if type(value) is int and value >= 0:
        return value
    raise retry.wrong_type(f"{where}.{key}", value, "a whole number")


def same_origin(url: str, base_url: str) -> bool:
    """`url` is on the scheme, host and port of `base_url`: where the key may be sent (a URL a reply names is
    followed only there)."""
    try:
        a, b = urlsplit(url), urlsplit(base_url)
        return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port) and bool(a.hostname)
    except ValueError:
        return False


def line_limit(target: BatchTarget) -> int:
    """The most bytes one results line may take: the model's reply cap (`max_response_mb`) and the line's ids."""
    return max(1, int(target.model.max_response_mb * 2**20)) + _LINE_OVERHEAD


def results_limit(target: BatchTarget, status: BatchStatus, custom_ids: Sequence[str], limits: BatchLimits) -> int:
    """The most bytes one results file may take: a line per request of the batch (as many as it says it holds,
    at most what a batch may hold), each within `_READ_PAST` times `line_limit` (a line over its cap is read past,
    an error of its request). A file that never ends stops there."""
    requests = min(max(len(custom_ids), status.counts.total), limits.max_requests)
    return max(1, requests) * line_limit(target) * _READ_PAST


class ResultLine:
    """One results line: its custom id (None when it cannot be told) and its object, or why it is unreadable."""

    __slots__ = ("custom_id", "data", "problem")

    def __init__(self, custom_id: str | None, data: dict[str, Any] | None, problem: str | None) -> None:
        self.custom_id = custom_id
        self.data = data
        self.problem = problem


async def result_lines(http: BatchHTTP, target: BatchTarget, url: str, id_field: str,
                       what: str, *, limit: int) -> AsyncGenerator[ResultLine, None]:
    """A results file, line by line (`limit` bytes at most, `results_limit`): each line an object naming its
    request in `id_field`. A line that is not JSON, not an object, or over the line cap is a `ResultLine` with its
    problem (and its id when its start names one); the download itself failing raises, masked, naming `what`."""
    seek = re.compile(rb'"' + re.escape(id_field.encode()) + rb'"\s*:\s*"([A-Za-z0-9_-]{1,64})"')
    redact = target.redact
    try:
        async with http.download(keyed(url, target), target.headers, line_limit=line_limit(target),
                                 limit=limit) as download:
            if not 200 <= download.status < 300:
                body = (await download.text(_ERROR_CHARS + redact.longest)).encode()
                raise status_error(http, download.status, download.headers, body, redact)
            number = 0
            async for line in download.lines():
                number += 1
                place = f"{what} line {number}"
                if isinstance(line, LongLine):
                    found = seek.search(line.head)
                    yield ResultLine(found.group(1).decode() if found else None, None,
                                     f"{place} is {line.size} bytes, over the {line_limit(target)}-byte limit "
                                     "of one answer (max_response_mb)")
                    continue
                try:
                    data = loads(line, place)
                except (ValueError, ClientError):
                    found = seek.search(line[:4096])
                    yield ResultLine(found.group(1).decode() if found else None, None, f"{place} is not JSON")
                    continue
                if type(data) is not dict:
                    yield ResultLine(None, None, f"{place} is {retry.type_name(data)}, expected an object")
                    continue
                custom_id = data.get(id_field)
                if type(custom_id) is not str:
                    yield ResultLine(None, None, f"{place} has no string `{id_field}`")
                    continue
                yield ResultLine(custom_id, data, None)
    except ClientError as error:
        raise masked(_naming(error, what), redact) from None


async def answers_in(http: BatchHTTP, target: BatchTarget, url: str, id_field: str, what: str,
                     outcomes: Outcomes, read: Callable[[dict[str, Any]], BatchOutcome], *,
                     limit: int) -> AsyncIterator[tuple[str, BatchOutcome]]:
    """The outcomes a results file gives (`result_lines`, each object read by `read`), one for each custom id
    `outcomes` still waits for; the download stops once none is left waiting."""
    if not outcomes:
        return
    async with aclosing(result_lines(http, target, url, id_field, what, limit=limit)) as lines:
        async for line in lines:
            if line.data is None:
                taken = outcomes.fail(line.custom_id, "errored", line.problem or "unreadable")
            else:
                taken = outcomes.take(line.custom_id, read(line.data))
            if taken is not None:
                yield taken
                if not outcomes:
                    return


def unanswered(status: BatchStatus, what: str) -> tuple[Literal["expired", "cancelled", "failed"], str]:
    """Why a request the batch's results (`what`) do not mention has no answer: how the batch ended."""
    if status.ended_as in ("expired", "cancelled"):
        return status.ended_as, f"the batch {status.ended_as} before this request was answered"
    if status.ended_as == "failed":
        return "failed", f"the batch failed: {status.error or 'no reason given'}"
    return "failed", f"{what} do not mention this request"


def status_failure(kind: FailureKind, message: str, status: int | None, redact: Redactor) -> BatchFailure:
    """A request's failure, its message masked and cut to one line as the live errors are."""
    return BatchFailure(kind, retry.server_text(mask_urls(redact.clean(message))), status)


class Outcomes:
    """Hands out exactly one outcome for each custom id asked for: the first one the results give, then a
    failure for each the results left out. A custom id not asked for, or given twice, is passed over."""

    def __init__(self, custom_ids: Sequence[str], redact: Redactor) -> None:
        self._waiting = dict.fromkeys(custom_ids)
        self._redact = redact
        self.passed_over = 0   # lines naming a custom id not asked for, or one already answered

    def take(self, custom_id: str | None, outcome: BatchOutcome) -> tuple[str, BatchOutcome] | None:
        """(custom id, outcome) when that id was waiting; None otherwise."""
        if custom_id is None or custom_id not in self._waiting:
            self.passed_over += 1
            return None
        del self._waiting[custom_id]
        return custom_id, outcome

    def fail(self, custom_id: str | None, kind: FailureKind, message: str,
             status: int | None = None) -> tuple[str, BatchOutcome] | None:
        """`take` of a failure, its message masked."""
        return self.take(custom_id, status_failure(kind, message, status, self._redact))

    def rest(self, kind: FailureKind, message: str) -> Iterator[tuple[str, BatchOutcome]]:
        """A failure of `kind` for each id still waiting."""
        failure = status_failure(kind, message, None, self._redact)
        for custom_id in list(self._waiting):
            del self._waiting[custom_id]
            yield custom_id, failure

    def __len__(self) -> int:
        return len(self._waiting)


class BatchEndpoint:
    """A provider's batch API at one endpoint, as each wire's class starts: every request goes through the one
    capped HTTP caller, to the one target (its key, headers and masking)."""

    def __init__(self, http: BatchHTTP, target: BatchTarget) -> None:
        self._http = http
        self._target = target

    async def _read_json(self, method: str, url: str, what: str, **options: Any) -> tuple[dict[str, Any], HTTPReply]:
        """`read_json` at this endpoint."""
        return await read_json(self._http, self._target, method, url, what, **options)

    def _answers(self, url: str, id_field: str, what: str, outcomes: Outcomes,
                 read: Callable[[dict[str, Any]], BatchOutcome], *,
                 limit: int) -> AsyncIterator[tuple[str, BatchOutcome]]:
        """`answers_in` at this endpoint."""
        return answers_in(self._http, self._target, url, id_field, what, outcomes, read, limit=limit)

    async def _results_files(self, status: BatchStatus, custom_ids: Sequence[str], files: Iterable[tuple[str, str]],
                             id_field: str, read: Callable[[dict[str, Any]], BatchOutcome],
                             limits: BatchLimits) -> AsyncIterator[tuple[str, BatchOutcome]]:
        """Exactly one outcome for each custom id from a batch's results files (each a URL and what messages call
        it): the answers they give, then a failure for each they leave out (`unanswered`)."""
        outcomes = Outcomes(custom_ids, self._target.redact)
        limit = results_limit(self._target, status, custom_ids, limits)
        for url, what in files:
            async for taken in self._answers(url, id_field, what, outcomes, read, limit=limit):
                yield taken
        for taken in outcomes.rest(*unanswered(status, "the batch's results")):
            yield taken
