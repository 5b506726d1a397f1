"""A provider's batch API: many independent calls sent as one job, answered within a day at a discount.

OpenAI (`/v1/batches` over an uploaded JSONL file), Anthropic (Message Batches) and Gemini (batch mode) each
take a set of requests, work on them for up to a day, and answer them all at about half the live price. The
`batch` entry of a `Provider` (`Batch`) says what one batch may hold and opens the provider's `BatchAPI`; its
four methods are all the run needs:

    wire = PROVIDERS[model.api].batch                       # None: the API has no batch method (run live)
    api = wire.open(http, BatchTarget(base_url, model, headers, redact))
    body = provider.build(WireRequest(..., stream=False))   # the same body a live call sends
    batch_id = await api.submit([(custom_id, body), ...])   # within wire.limits, counted by wire.size
    ...journal (batch_id, custom_ids) before waiting: a resumed run polls that id, never submits again...
    status = await api.poll(batch_id)                       # again, with a pause, until status.ended
    async for custom_id, outcome in api.results(status, custom_ids):
        BatchReply    -> provider.parse(outcome.body, result, redact): the same CallResult as a live call
        BatchFailure  -> outcome.error() on the row (kind batch_errored / batch_expired / batch_cancelled /
                         batch_failed), which `--retry-errors` re-sends
    await api.cancel(batch_id)                              # the run stops: what is unanswered is given up

`results` yields exactly one outcome for each custom id asked for, in the order the provider's results come and
then those they left out (`failed`); a line it cannot read is a failure of that request when its custom id can
be told, and a line naming a custom id not asked for is skipped. Each method raises `ClientError` (masked) when
the HTTP fails, as the live client's errors are classified (`retryable`: try again later); `poll`, `results` and
`cancel` are safe to repeat, `submit` is not once its create request may have reached the server
(`SubmitError.sent`); the error of a refused request carries the wait the server asked for
(`ClientError.retry_after_s`), which the run's pause before trying again honours. The HTTP is `BatchHTTP`,
implemented over the run's aiohttp sessions in `engine.client.transport`, with the live calls' size caps, proxies
and key masking.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from engine.errors import ClientError, TransportError
from engine.model.model_config import ModelConfig
from engine.redact import Redactor

__all__ = ["CUSTOM_ID", "DISCOUNT", "Batch", "BatchAPI", "BatchCounts", "BatchFailure", "BatchHTTP", "BatchLimits",
           "BatchOutcome", "BatchReply", "BatchState", "BatchStatus", "BatchTarget", "Download", "FailureKind",
           "FormFile", "HTTPReply", "LongLine", "NotSent", "SubmitError"]

#: What a custom id may be: the strictest provider's rule (Anthropic's), so one id works everywhere.
CUSTOM_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

#: The published batch discount of all three providers: half the live price, input and output.
DISCOUNT = 0.5

#: Where a batch is: `pending` (accepted, not started: validating, queued), `running`, `ending` (finishing or
#: being cancelled: no new answers will start), `ended` (its results can be read, whatever the outcome).
BatchState = Literal["pending", "running", "ending", "ended"]

#: Why a request has no answer: `errored` (the provider answered it with an error: a bad request, a server
#: error), `expired` (the batch's window closed first), `cancelled` (the batch was cancelled first), `failed`
#: (the whole batch failed, or its results say nothing readable about this request).
FailureKind = Literal["errored", "expired", "cancelled", "failed"]


# -- what a batch is made of and how it went ----------------------------------------------------------------------


@dataclass(frozen=True)
class BatchLimits:
    """What one batch may hold, as the provider documents it: split the calls so each batch stays within both.

    Args:
        max_requests: Requests in one batch.
        max_bytes: Bytes of one batch's requests as sent (each counted by `Batch.size`).
    """

    max_requests: int
    max_bytes: int


@dataclass(frozen=True)
class BatchCounts:
    """A batch's requests by where they are, as the provider counts them (0 where it does not say)."""

    total: int = 0
    succeeded: int = 0
    failed: int = 0   # errored, expired and cancelled alike

    @property
    def pending(self) -> int:
        """Requests not answered yet."""
        return max(0, self.total - self.succeeded - self.failed)


@dataclass(frozen=True)
class BatchStatus:
    """One poll of a batch: small and plain, so it can be journaled as it is.

    Args:
        batch_id: The provider's id (`batch_...`, `msgbatch_...`, `batches/...`).
        state: Where it is on the engine's scale (`BatchState`).
        provider_state: The provider's own word (`in_progress`, `canceling`, `BATCH_STATE_RUNNING`), for messages.
        counts: Its requests by where they are.
        ended_as: How it ended, once `ended`: `completed` (every request answered or errored), `expired`,
            `cancelled`, `failed` (the batch as a whole, e.g. refused after validation); None before.
        results: Where its results are, as `results` reads them (output and error file ids, a results URL, a
            responses file name, or `inline`); empty before it ends.
        error: The batch's own failure, masked (a validation error, the reason it failed), or None.
    """

    batch_id: str
    state: BatchState
    provider_state: str
    counts: BatchCounts
    ended_as: Literal["completed", "expired", "cancelled", "failed"] | None = None
    results: tuple[str, ...] = ()
    error: str | None = None

    @property
    def ended(self) -> bool:
        """Its results can be read (the batch is over, however it went)."""
        return self.state == "ended"


@dataclass(frozen=True)
class BatchReply:
    """A request the provider answered: its reply body, exactly what `Provider.parse` reads for a live call."""

    body: bytes


@dataclass(frozen=True)
class BatchFailure:
    """A request the batch did not answer: why (`FailureKind`), the provider's message (masked) and status."""

    kind: FailureKind
    message: str
    status: int | None = None

    def error(self) -> ClientError:
        """The error its row carries (kind `batch_<kind>`); `--retry-errors` re-sends it."""
        return ClientError(f"batch {self.kind}: {self.message}", kind=f"batch_{self.kind}", status=self.status,
                           retryable=self.kind != "errored")


BatchOutcome = BatchReply | BatchFailure


class SubmitError(ClientError):
    """`submit` failed. `sent`: its create request may have reached the server, so a batch may exist (and be
    paid for) although no id came back; False: nothing was created, submitting again is safe."""

    def __init__(self, error: ClientError, *, sent: bool) -> None:
        super().__init__(str(error), kind=error.kind, retryable=error.retryable, status=error.status)
        self.retry_after_s = error.retry_after_s
        self.sent = sent


class NotSent(TransportError):
    """`BatchHTTP` could not send the request at all (no connection): the server saw nothing of it."""


# -- where a batch goes, and the HTTP it goes over ----------------------------------------------------------------


@dataclass(frozen=True)
class BatchTarget:
    """The endpoint a batch API speaks to, as the live client would call the model.

    Args:
        base_url: The model's `base_url` (`https://api.openai.com/v1`), without the key.
        model: The model (its id names Gemini's method; its `max_response_mb` caps each answer read).
        headers: The request headers with the key where the API reads it (`Provider.headers`, and
            `api_key_header`), JSON content type included.
        redact: Masks the key, URL and proxy credentials in every message.
        key_query: The key as the query parameter the live calls add (`key=...`, percent-encoded, from
            `api_key_query`), or "": added to every request's URL as it is sent (a URL a reply names included),
            never kept in a URL the wire returns.
    """

    base_url: str
    model: ModelConfig
    headers: Mapping[str, str]
    redact: Redactor
    key_query: str = ""


@dataclass(frozen=True)
class HTTPReply:
    """A whole reply: its status, headers (case-insensitive lookups) and body, read up to the request's limit."""

    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class FormFile:
    """The file part of a `multipart/form-data` upload."""

    field: str
    filename: str
    content: bytes
    content_type: str


@dataclass(frozen=True)
class LongLine:
    """A downloaded line over the line limit: its first bytes (to tell whose it was) and its whole size."""

    head: bytes
    size: int


class Download(Protocol):
    """A download that answered: its status and headers, then its body line by line."""

    status: int
    headers: Mapping[str, str]

    async def text(self, limit: int) -> str:
        """The body's start (an error body, for its message), at most `limit` bytes, decoded."""

    def lines(self) -> AsyncIterator[bytes | LongLine]:
        """Each line of the body without its end (`\\n` or `\\r\\n`; blank lines skipped), one at a time, each
        capped by the download's `line_limit`: a longer one is read past and given as a `LongLine`."""


class BatchHTTP(Protocol):
    """The HTTP a batch wire speaks: `engine.client.transport` implements it over the run's aiohttp sessions.

    Every method raises a `ClientError` (masked, classified as the live client's: refused, reset, timed out)
    when the exchange fails, `NotSent` when no connection was made; a reply of any status is returned, for the
    wire to read as its provider documents.
    """

    async def send(self, method: str, url: str, headers: Mapping[str, str], *, json: Any = None,
                   data: bytes | None = None, form: Mapping[str, str] | None = None, file: FormFile | None = None,
                   limit: int) -> HTTPReply:
        """One request (a JSON body, raw bytes, or a multipart form with `file`), its body read up to `limit` bytes
        (a longer one: `retry.too_large`)."""

    def download(self, url: str, headers: Mapping[str, str], *, line_limit: int,
                 limit: int) -> AbstractAsyncContextManager[Download]:
        """A `GET` whose body is read line by line, never whole, `limit` bytes at most (a longer one:
        `retry.too_large` when its lines pass it)."""

    def refused(self, status: int, headers: Mapping[str, str], body: bytes, redact: Redactor) -> ClientError:
        """A non-2xx reply's error, as the model's live calls classify theirs (its API's `classify`: its status,
        its body's message masked by `redact`, and the delay the server asked for, `ClientError.retry_after_s`,
        from its headers or its body)."""


# -- one provider's batch method ------------------------------------------------------------------------------------


class BatchAPI(Protocol):
    """One provider's batch API at one endpoint (`Batch.open`). See the module docstring for how a run uses it."""

    async def submit(self, requests: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """Send (custom id, wire body) pairs as one batch; its id. Custom ids match `CUSTOM_ID`, are unique, and
        the bodies fit `Batch.limits` (a `ValueError` otherwise, before anything is sent); `SubmitError` when it
        failed."""

    async def poll(self, batch_id: str) -> BatchStatus:
        """Where the batch is now."""

    def results(self, status: BatchStatus, custom_ids: Sequence[str]) -> AsyncIterator[tuple[str, BatchOutcome]]:
        """The outcome of each of `custom_ids` in an ended batch, read line by line: exactly one each."""

    async def cancel(self, batch_id: str) -> BatchStatus:
        """Ask the provider to stop the batch (requests already answered keep their answers); where it is then."""


@dataclass(frozen=True)
class Batch:
    """An API's batch method: the `batch` entry of its `Provider`.

    Args:
        limits: What one batch may hold.
        size: (custom id, wire body) -> the bytes that request adds to its batch, as `limits.max_bytes` counts.
        open: (http, target) -> the batch API at that endpoint.
        discount: The price of a batched token as a share of the live price (`DISCOUNT`, the published 50%).
    """

    limits: BatchLimits
    size: Callable[[str, Mapping[str, Any]], int]
    open: Callable[[BatchHTTP, BatchTarget], BatchAPI]
    discount: float = DISCOUNT
