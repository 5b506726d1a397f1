"""Anthropic's Message Batches (`api: anthropic`): the requests in one create call, the results as JSONL.

Submit: `POST {base_url}/messages/batches` `{requests: [{custom_id, params}]}`, each `params` a Messages API body
(never streamed) -> the batch, whose `id` (`msgbatch_...`) is the batch's. Poll: `GET .../{id}`:
`processing_status` in_progress / canceling / ended, `request_counts` {processing, succeeded, errored, canceled,
expired}, `cancel_initiated_at`, `results_url` once ended. Results: `GET results_url` (followed only on the
base_url's host, where the key may go; else `.../{id}/results`), a line `{custom_id, result}` per request whose
`result.type` is succeeded (`message`: the reply `parse` reads), errored (`error`: an error body), canceled or
expired. Cancel: `POST .../{id}/cancel`. Limits: 100,000 requests or 256 MB per batch; the price is half the
live one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote

from engine.client import retry
from engine.client.providers import batch_wire as wire
from engine.client.providers.base import error_message, method_url
from engine.client.providers.batch import Batch, BatchCounts, BatchLimits, BatchOutcome, BatchState, BatchStatus
from engine.errors import ClientError
from engine.redact import Redactor

__all__ = ["BATCH", "LIMITS"]

LIMITS = BatchLimits(max_requests=100_000, max_bytes=256_000_000)
_STATES: dict[str, BatchState] = {"in_progress": "running", "canceling": "ending", "ended": "ended"}
_LEFT: dict[str, Literal["expired", "cancelled"]] = {"expired": "expired", "canceled": "cancelled"}


def _entry(custom_id: str, body: Mapping[str, Any]) -> bytes:
    """A request as the create call's `requests` list holds it, with the comma after it."""
    return wire.compact({"custom_id": custom_id, "params": body}) + b","


class AnthropicBatches(wire.BatchEndpoint):
    """Message Batches at one endpoint."""

    def _url(self, batch_id: str = "", tail: str = "") -> str:
        path = "/messages/batches" + ("/" + quote(batch_id, safe="") if batch_id else "") + tail
        return method_url(self._target.base_url, path)

    async def submit(self, requests: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        body = b'{"requests":[' + b"".join(wire.encoded_requests(requests, LIMITS, _entry))[:-1] + b"]}"
        try:
            created, _ = await self._read_json("POST", self._url(), "the batch", body=body)
            batch_id = wire.resource_id(created, "id", "batch", self._target.redact)
        except ClientError as error:
            raise wire.submit_error(error, created=True) from None
        return batch_id

    async def poll(self, batch_id: str) -> BatchStatus:
        data, _ = await self._read_json("GET", self._url(batch_id), "the batch")
        return self._status(batch_id, data)

    async def cancel(self, batch_id: str) -> BatchStatus:
        data, _ = await self._read_json("POST", self._url(batch_id, "/cancel"), "the batch")
        return self._status(batch_id, data)

    def results(self, status: BatchStatus, custom_ids: Sequence[str]) -> AsyncIterator[tuple[str, BatchOutcome]]:
        redact = self._target.redact
        return self._results_files(status, custom_ids, [(url, "the batch's results") for url in status.results],
                                   "custom_id", lambda data: _outcome(data, redact), LIMITS)

    def _status(self, batch_id: str, data: dict[str, Any]) -> BatchStatus:
        """A batch object read into its status; its results URL kept only on the base_url's host and when it
        holds no secret (a status is small and plain, to be kept as it is)."""
        state = wire.text(data, "processing_status", "batch") or ""
        if state not in _STATES:
            raise retry.bad_response(f"the batch's `processing_status` is {state[:40]!r}, not one Message Batches "
                                     "documents")
        counts = data.get("request_counts") or {}
        if type(counts) is not dict:
            raise retry.wrong_type("batch.request_counts", counts, "an object")
        numbers = {key: wire.integer(counts, key, "request_counts")
                   for key in ("processing", "succeeded", "errored", "canceled", "expired")}
        ended = state == "ended"
        ended_as: Literal["completed", "expired", "cancelled"] | None = None
        results: tuple[str, ...] = ()
        if ended:
            ended_as = "cancelled" if data.get("cancel_initiated_at") else \
                "expired" if numbers["expired"] else "completed"
            url = wire.text(data, "results_url", "batch")
            fallback = self._url(batch_id, "/results")
            kept = url and wire.same_origin(url, self._target.base_url) and self._target.redact.clean(url) == url
            results = (url if url and kept else fallback,)
        return BatchStatus(batch_id=batch_id, state=_STATES[state], provider_state=state,
                           counts=BatchCounts(total=sum(numbers.values()), succeeded=numbers["succeeded"],
                                              failed=numbers["errored"] + numbers["canceled"] + numbers["expired"]),
                           ended_as=ended_as, results=results)


def _outcome(data: dict[str, Any], redact: Redactor) -> BatchOutcome:
    """One results line read: the message, or why there is none."""
    try:
        result = data.get("result")
        if type(result) is not dict:
            raise retry.wrong_type("result", result, "an object")
        kind = wire.text(result, "type", "result")
        if kind == "succeeded":
            message = result.get("message")
            if type(message) is not dict:
                raise retry.wrong_type("result.message", message, "an object")
            return wire.reply(message)
        if kind == "errored":
            error = result.get("error")
            shown = error_message(wire.compact(error).decode()) if error is not None else "no error given"
            return wire.status_failure("errored", shown, None, redact)
        if kind in _LEFT:
            return wire.status_failure(_LEFT[kind], f"the batch {_LEFT[kind]} before this request was answered",
                                       None, redact)
        raise retry.bad_response(f"`result.type` is {str(kind)[:40]!r}, not one Message Batches documents")
    except ClientError as bad:
        return wire.status_failure("errored", f"its results line is unreadable: {bad}", None, redact)


BATCH = Batch(limits=LIMITS, size=lambda custom_id, body: len(_entry(custom_id, body)), open=AnthropicBatches)
