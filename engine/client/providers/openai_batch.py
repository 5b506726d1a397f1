"""OpenAI's Batch API (`api: chat` and `api: completions`): a JSONL file of requests, uploaded, then run as a batch.

Submit: `POST {base_url}/files` (multipart: `purpose=batch`, the file) with one line per request,
`{custom_id, method: "POST", url: "/v1/chat/completions", body}`; then `POST {base_url}/batches`
`{input_file_id, endpoint, completion_window: "24h"}` -> the batch object, whose `id` is the batch's.
Poll: `GET {base_url}/batches/{id}`: `status` validating / in_progress / finalizing / completed / failed / expired /
cancelling / cancelled, `request_counts` {total, completed, failed}, `output_file_id` and `error_file_id` once it
ends, `errors.data[].message` when validation failed it. Results: `GET {base_url}/files/{id}/content` of each file,
a line `{id, custom_id, response: {status_code, request_id, body} | null, error: {code, message} | null}` per
request: a 2xx `body` is the chat (or completions) reply `parse` reads; an `error` with code `batch_expired` or
`batch_cancelled` is that request left unanswered. Cancel: `POST {base_url}/batches/{id}/cancel`.
Limits: 50,000 requests and 200 MB per input file; the price is half the live one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote

from engine.client import retry
from engine.client.providers import batch_wire as wire
from engine.client.providers.base import method_url
from engine.client.providers.batch import (
    Batch,
    BatchAPI,
    BatchCounts,
    BatchHTTP,
    BatchLimits,
    BatchOutcome,
    BatchState,
    BatchStatus,
    BatchTarget,
    FormFile,
)
from engine.errors import ClientError
from engine.redact import Redactor

__all__ = ["CHAT_BATCH", "COMPLETIONS_BATCH", "LIMITS"]

LIMITS = BatchLimits(max_requests=50_000, max_bytes=200_000_000)
_STATES: dict[str, BatchState] = {"validating": "pending", "in_progress": "running", "finalizing": "ending",
                                  "cancelling": "ending", "completed": "ended", "failed": "ended",
                                  "expired": "ended", "cancelled": "ended"}
_ENDED: dict[str, Literal["completed", "expired", "cancelled", "failed"]] = {
    "completed": "completed", "failed": "failed", "expired": "expired", "cancelled": "cancelled"}
_LEFT: dict[str, Literal["expired", "cancelled"]] = {"batch_expired": "expired", "batch_cancelled": "cancelled"}


def _line(endpoint: str, custom_id: str, body: Mapping[str, Any]) -> bytes:
    return wire.compact({"custom_id": custom_id, "method": "POST", "url": endpoint, "body": body}) + b"\n"


class OpenAIBatches(wire.BatchEndpoint):
    """The Batch API at one endpoint, for one method (`endpoint`: `/v1/chat/completions` or `/v1/completions`)."""

    def __init__(self, http: BatchHTTP, target: BatchTarget, endpoint: str) -> None:
        super().__init__(http, target)
        self._endpoint = endpoint

    def _url(self, path: str) -> str:
        return method_url(self._target.base_url, path)

    async def submit(self, requests: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        lines = wire.encoded_requests(requests, LIMITS, lambda custom_id, body: _line(self._endpoint, custom_id, body))
        content = b"".join(lines)
        del lines
        headers = {k: v for k, v in self._target.headers.items() if k.lower() != "content-type"}
        try:
            uploaded, _ = await self._read_json("POST", self._url("/files"), "the file upload's reply",
                                                headers=headers, form={"purpose": "batch"},
                                                file=FormFile("file", "batch.jsonl", content, "application/jsonl"))
            file_id = wire.resource_id(uploaded, "id", "file", self._target.redact)
        except ClientError as error:
            raise wire.submit_error(error, created=False) from None
        del content
        try:
            created, _ = await self._read_json(
                "POST", self._url("/batches"), "the batch",
                json={"input_file_id": file_id, "endpoint": self._endpoint, "completion_window": "24h"})
            batch_id = wire.resource_id(created, "id", "batch", self._target.redact)
        except ClientError as error:
            raise wire.submit_error(error, created=True) from None
        return batch_id

    async def poll(self, batch_id: str) -> BatchStatus:
        data, _ = await self._read_json("GET", self._url("/batches/" + quote(batch_id, safe="")), "the batch")
        return _status(batch_id, data, self._target.redact)

    async def cancel(self, batch_id: str) -> BatchStatus:
        data, _ = await self._read_json("POST", self._url("/batches/" + quote(batch_id, safe="") + "/cancel"),
                                        "the batch")
        return _status(batch_id, data, self._target.redact)

    def results(self, status: BatchStatus, custom_ids: Sequence[str]) -> AsyncIterator[tuple[str, BatchOutcome]]:
        redact = self._target.redact
        files = [(self._url("/files/" + quote(file_id, safe="") + "/content"), f"the results file {file_id}")
                 for file_id in status.results]
        return self._results_files(status, custom_ids, files, "custom_id", lambda data: _outcome(data, redact),
                                   LIMITS)


def _outcome(data: dict[str, Any], redact: Redactor) -> BatchOutcome:
    """One results line read: the reply body, or why there is none."""
    try:
        response = data.get("response")
        error = data.get("error")
        if response is not None:
            if type(response) is not dict:
                raise retry.wrong_type("response", response, "an object")
            code = response.get("status_code")
            if type(code) is not int:
                raise retry.wrong_type("response.status_code", code, "a whole number")
            body = response.get("body")
            if 200 <= code < 300:
                if type(body) is not dict:
                    raise retry.wrong_type("response.body", body, "an object")
                return wire.reply(body)
            message = _message(body) or f"HTTP {code}"
            return wire.status_failure("errored", f"HTTP {code}: {message}", code, redact)
        if error is not None:
            if type(error) is not dict:
                raise retry.wrong_type("error", error, "an object")
            code_name = wire.text(error, "code", "error") or ""
            message = wire.text(error, "message", "error") or code_name or "no message"
            return wire.status_failure(_LEFT.get(code_name, "errored"), f"{code_name}: {message}".lstrip(": "),
                                       None, redact)
        raise retry.bad_response("the line has neither `response` nor `error`")
    except ClientError as bad:
        return wire.status_failure("errored", f"its results line is unreadable: {bad}", None, redact)


def _message(body: Any) -> str | None:
    """The `error.message` of an error reply body, or None."""
    if type(body) is dict and type(body.get("error")) is dict and type(body["error"].get("message")) is str:
        return str(body["error"]["message"])
    return None


def _status(batch_id: str, data: dict[str, Any], redact: Redactor) -> BatchStatus:
    """A batch object read into its status (its failure's messages masked)."""
    state = wire.text(data, "status", "batch") or ""
    if state not in _STATES:
        raise retry.bad_response(f"the batch's `status` is {state[:40]!r}, not one the Batch API documents")
    counts = data.get("request_counts") or {}
    if type(counts) is not dict:
        raise retry.wrong_type("batch.request_counts", counts, "an object")
    files = tuple(wire.resource_id(data, key, "batch", redact) for key in ("output_file_id", "error_file_id")
                  if data.get(key))
    error = None
    errors = data.get("errors")
    if type(errors) is dict and type(errors.get("data")) is list:
        messages = [str(e.get("message"))[:300] for e in errors["data"][:5] if type(e) is dict]
        error = wire.status_failure("failed", "; ".join(messages), None, redact).message if messages else None
    ended = _STATES[state] == "ended"
    return BatchStatus(batch_id=batch_id, state=_STATES[state], provider_state=state,
                       counts=BatchCounts(total=wire.integer(counts, "total", "request_counts"),
                                          succeeded=wire.integer(counts, "completed", "request_counts"),
                                          failed=wire.integer(counts, "failed", "request_counts")),
                       ended_as=_ENDED[state] if ended else None, results=files if ended else (), error=error)


def _batch(endpoint: str) -> Batch:
    def open_batches(http: BatchHTTP, target: BatchTarget) -> BatchAPI:
        return OpenAIBatches(http, target, endpoint)

    def size(custom_id: str, body: Mapping[str, Any]) -> int:
        return len(_line(endpoint, custom_id, body))

    return Batch(limits=LIMITS, size=size, open=open_batches)


CHAT_BATCH = _batch("/v1/chat/completions")
COMPLETIONS_BATCH = _batch("/v1/completions")
