"""Gemini's batch mode (`api: gemini`): `models/{model}:batchGenerateContent`, inline or over an uploaded file.

Submit: `POST {base_url}/models/{model}:batchGenerateContent` `{batch: {displayName, inputConfig}}` -> an
operation whose `name` (`batches/...`) is the batch's. `inputConfig` holds the requests inline
(`{requests: {requests: [{request, metadata: {key}}]}}`) for a small batch, at most `INLINE_MAX_REQUESTS` requests
and `INLINE_MAX_BYTES`: one call, no file to upload and none left in the project's storage. A larger one goes as a
JSONL file of `{key, request}` lines (`{fileName}`), uploaded through the Files API's resumable protocol
(`POST /upload/v1beta/files` with `X-Goog-Upload-Command: start` -> an `X-Goog-Upload-URL`, then the bytes with
`upload, finalize`): the inline form caps the whole call at 20 MB, and its answers come back inside the batch
object, read whole, where a file's come as a responses file read line by line.
Poll: `GET {base_url}/batches/{id}`: `metadata.state` BATCH_STATE_PENDING / RUNNING / SUCCEEDED / FAILED /
CANCELLED / EXPIRED (the SDKs' JOB_STATE_ names read the same), `metadata.batchStats` (int64 counts, as strings),
`metadata.output` once it ends: `inlinedResponses.inlinedResponses[]` ({response | error, metadata.key}) or
`responsesFile`, read from `GET /download/v1beta/{file}:download?alt=media`, a `{key, response | error}` line
per request. Cancel: `POST {base_url}/batches/{id}:cancel`. Limits: the Files API takes 2 GB, but the file is
built in memory, so a batch holds at most 200 MB (and 50,000 requests, as OpenAI's); the price is half the
live one.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

from engine.client import retry
from engine.client.providers import batch_wire as wire
from engine.client.providers.base import error_message, method_url
from engine.client.providers.batch import (
    Batch,
    BatchCounts,
    BatchLimits,
    BatchOutcome,
    BatchReply,
    BatchState,
    BatchStatus,
)
from engine.errors import ClientError
from engine.redact import Redactor

__all__ = ["BATCH", "INLINE_MAX_BYTES", "INLINE_MAX_REQUESTS", "LIMITS"]

LIMITS = BatchLimits(max_requests=50_000, max_bytes=200_000_000)
INLINE_MAX_REQUESTS = 64
INLINE_MAX_BYTES = 1 << 20
#: The most bytes a batch object may take: an inline batch's answers arrive inside it.
_OPERATION_LIMIT = 64 << 20
_NAME = re.compile(r"^(batches|files)/[A-Za-z0-9_-]{1,128}$")
_STATES: dict[str, BatchState] = {"UNSPECIFIED": "pending", "PENDING": "pending", "RUNNING": "running",
                                  "SUCCEEDED": "ended", "FAILED": "ended", "CANCELLED": "ended", "EXPIRED": "ended"}
_ENDED: dict[str, Literal["completed", "expired", "cancelled", "failed"]] = {
    "SUCCEEDED": "completed", "FAILED": "failed", "CANCELLED": "cancelled", "EXPIRED": "expired"}
_INLINE = "inline"


def _line(custom_id: str, body: Mapping[str, Any]) -> bytes:
    """A request as a line of the requests file."""
    return wire.compact({"key": custom_id, "request": body}) + b"\n"


def _name(data: Mapping[str, Any], key: str, where: str, redact: Redactor) -> str:
    """A resource name a reply gave (`batches/...`, `files/...`), checked before it goes into a URL or the
    journal."""
    return wire.resource_id(data, key, where, redact, _NAME)


def _sibling(base_url: str, prefix: str, path: str) -> str:
    """A URL beside the API root: `https://host/v1beta?q` with prefix `upload` -> `https://host/upload/v1beta/...`."""
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + prefix + parts.path.rstrip("/") + path, parts.query, ""))


class GeminiBatches(wire.BatchEndpoint):
    """Gemini's batch mode at one endpoint, for one model."""

    def _url(self, path: str) -> str:
        return method_url(self._target.base_url, path)

    async def submit(self, requests: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        lines = wire.encoded_requests(requests, LIMITS, _line)
        config: dict[str, Any]
        if len(lines) <= INLINE_MAX_REQUESTS and sum(map(len, lines)) <= INLINE_MAX_BYTES:
            config = {"requests": {"requests": [{"request": body, "metadata": {"key": custom_id}}
                                                for custom_id, body in requests]}}
        else:
            try:
                config = {"fileName": await self._upload(b"".join(lines))}
            except ClientError as error:
                raise wire.submit_error(error, created=False) from None
        del lines
        model = "/models/" + quote(self._target.model.model.removeprefix("models/"), safe="-._~@")
        try:
            created, _ = await self._read_json("POST", self._url(model + ":batchGenerateContent"),
                                               "the batch operation",
                                               json={"batch": {"displayName": "engine-batch", "inputConfig": config}})
            return _name(created, "name", "operation", self._target.redact)
        except ClientError as error:
            raise wire.submit_error(error, created=True) from None

    async def _upload(self, content: bytes) -> str:
        """The Files API's resumable upload of a JSONL file: its `files/...` name."""
        headers = dict(self._target.headers)
        start = {**headers, "X-Goog-Upload-Protocol": "resumable", "X-Goog-Upload-Command": "start",
                 "X-Goog-Upload-Header-Content-Length": str(len(content)),
                 "X-Goog-Upload-Header-Content-Type": "application/jsonl"}
        _, reply = await self._read_json("POST", _sibling(self._target.base_url, "upload", "/files"),
                                         "the upload's start", headers=start,
                                         json={"file": {"displayName": "engine-batch"}})
        upload_url = reply.headers.get("X-Goog-Upload-URL") or ""
        if not wire.same_origin(upload_url, self._target.base_url):
            raise retry.bad_response("the upload's start named no upload URL on the API's host")
        finish = {**{k: v for k, v in headers.items() if k.lower() != "content-type"},
                  "X-Goog-Upload-Command": "upload, finalize", "X-Goog-Upload-Offset": "0"}
        uploaded, _ = await self._read_json("POST", upload_url, "the upload", headers=finish, body=content)
        file = uploaded.get("file")
        if type(file) is not dict:
            raise retry.wrong_type("file", file, "an object")
        return _name(file, "name", "file", self._target.redact)

    def _checked(self, batch_id: str) -> str:
        """A batch id the run gives, checked as the reply that named it was before it goes into a URL."""
        return _name({"name": batch_id}, "name", "batch id", self._target.redact)

    async def _operation(self, batch_id: str) -> dict[str, Any]:
        data, _ = await self._read_json("GET", self._url("/" + self._checked(batch_id)), "the batch",
                                        limit=_OPERATION_LIMIT)
        return data

    async def poll(self, batch_id: str) -> BatchStatus:
        return _status(batch_id, await self._operation(batch_id), self._target.redact)

    async def cancel(self, batch_id: str) -> BatchStatus:
        await self._read_json("POST", self._url("/" + self._checked(batch_id) + ":cancel"), "the cancel's reply")
        return await self.poll(batch_id)

    async def results(self, status: BatchStatus,
                      custom_ids: Sequence[str]) -> AsyncIterator[tuple[str, BatchOutcome]]:
        redact = self._target.redact
        outcomes = wire.Outcomes(custom_ids, redact)
        for where in status.results:
            if where == _INLINE:
                rows = _output(await self._operation(status.batch_id)).get("inlinedResponses")
                rows = rows.get("inlinedResponses") if type(rows) is dict else rows
                if type(rows) is not list:
                    for left in outcomes.rest("failed", "the batch's `output.inlinedResponses.inlinedResponses` "
                                              f"is {retry.type_name(rows)}, expected a list"):
                        yield left
                    return
                for i, row in enumerate(rows):
                    metadata = row.get("metadata") if type(row) is dict else None
                    key = metadata.get("key") if type(metadata) is dict else None
                    if type(row) is not dict or type(key) is not str:
                        outcomes.passed_over += 1   # no key: whose answer it is cannot be told
                        continue
                    outcome = _outcome(row, redact, f"inlinedResponses[{i}]")
                    if isinstance(outcome, BatchReply) and len(outcome.body) > wire.line_limit(self._target):
                        outcome = wire.status_failure("errored", f"inlinedResponses[{i}] is {len(outcome.body)} "
                                                      f"bytes, over the {wire.line_limit(self._target)}-byte limit "
                                                      "of one answer (max_response_mb)", None, redact)
                    taken = outcomes.take(key, outcome)
                    if taken is not None:
                        yield taken
                continue
            url = _sibling(self._target.base_url, "download", "/" + _name({"name": where}, "name",
                                                                          "responses file", redact) + ":download")
            url += ("&" if "?" in url else "?") + "alt=media"
            async for taken in self._answers(url, "key", "the responses file", outcomes,
                                             lambda data: _outcome(data, redact, "the line"),
                                             limit=wire.results_limit(self._target, status, custom_ids, LIMITS)):
                yield taken
        for taken in outcomes.rest(*wire.unanswered(status, "the batch's responses")):
            yield taken


def _output(data: dict[str, Any]) -> dict[str, Any]:
    """The batch's output: `metadata.output` (where the API and its SDKs put it), else the operation's
    `response`; {} before it ends."""
    metadata = data.get("metadata")
    output = metadata.get("output") if type(metadata) is dict else None
    if output is None:
        output = data.get("response")
    return output if type(output) is dict else {}


def _status(batch_id: str, data: dict[str, Any], redact: Redactor) -> BatchStatus:
    """An operation read into its status."""
    metadata = data.get("metadata") or {}
    if type(metadata) is not dict:
        raise retry.wrong_type("operation.metadata", metadata, "an object")
    raw = wire.text(metadata, "state", "metadata") or "BATCH_STATE_UNSPECIFIED"
    state = raw.removeprefix("BATCH_STATE_").removeprefix("JOB_STATE_")
    error = data.get("error")
    message = None
    if type(error) is dict:
        shown = error_message(wire.compact({"error": error}).decode())
        message = wire.status_failure("failed", shown, None, redact).message
        if state not in ("FAILED", "CANCELLED", "EXPIRED"):
            state = "FAILED"   # a finished operation with an error failed, whatever its metadata says
    if state not in _STATES:
        raise retry.bad_response(f"the batch's `metadata.state` is {raw[:40]!r}, not one batch mode documents")
    stats = metadata.get("batchStats") or {}
    if type(stats) is not dict:
        raise retry.wrong_type("metadata.batchStats", stats, "an object")
    ended = _STATES[state] == "ended"
    output = _output(data) if ended else {}
    results: tuple[str, ...] = ()
    if "responsesFile" in output:
        results = (_name(output, "responsesFile", "output", redact),)
    elif "inlinedResponses" in output:
        results = (_INLINE,)
    return BatchStatus(batch_id=batch_id, state=_STATES[state], provider_state=raw,
                       counts=BatchCounts(total=wire.integer(stats, "requestCount", "batchStats"),
                                          succeeded=wire.integer(stats, "successfulRequestCount", "batchStats"),
                                          failed=wire.integer(stats, "failedRequestCount", "batchStats")),
                       ended_as=_ENDED.get(state) if ended else None, results=results, error=message)


def _outcome(row: dict[str, Any], redact: Redactor, where: str) -> BatchOutcome:
    """One answer (an inline response or a responses-file line): the reply, or its error."""
    response = row.get("response")
    if type(response) is dict:
        return wire.reply(response)
    error = row.get("error")
    if type(error) is dict:
        code = error.get("code")
        return wire.status_failure("errored", error_message(wire.compact({"error": error}).decode()),
                                   code if type(code) is int else None, redact)
    return wire.status_failure("errored", f"{where} has neither a `response` object nor an `error` object", None,
                               redact)


BATCH = Batch(limits=LIMITS, size=lambda custom_id, body: len(_line(custom_id, body)), open=GeminiBatches)
