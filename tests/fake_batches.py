"""Loopback batch servers: OpenAI's Batch API, Anthropic's Message Batches and Gemini's batch mode, as documented.

Each mounts on its provider's live fake (tests/fake_openai.py, fake_anthropic.py, fake_gemini.py) and answers every
batched request, when its batch ends, through that fake's script and responder: the same test gives the same
answers live and batched, and the live fake's `requests` records the batched bodies too.

    server = FakeOpenAI(); batches = OpenAIBatchServer(server); server.start()
    batches.plan = Plan(polls=3)       # each batch ends at its third poll (or Plan(delay_s=2.0): two seconds in)
    batches.submitted                  # every custom id of every batch created, in order: the request log
    batches.log                        # every batch call, "POST /v1/files", "GET /v1/batches/batch_1", ...

A batch is pending when created, running from its first poll, and ends at the poll that is both the plan's
`polls`-th and `delay_s` after its creation (a cancelled one ends at the poll after the cancel). `Plan` also makes
it expire, or be cancelled part-way (from the provider's console), with only its first requests answered (the rest
left unanswered, as each provider reports it), fail as a whole, send a results file verbatim or one that never
ends, refuse batch calls with 429 asking for a wait, or change each batch object it sends (hostile ones).

    batches.key_query = ("key", KEY)   # refuse (401) every batch call whose URL does not carry key=KEY
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests import fake_anthropic, fake_gemini
from tests.fake_anthropic import FakeAnthropic
from tests.fake_gemini import FakeGemini
from tests.fake_openai import FakeOpenAI


@dataclass
class Plan:
    """How the server's batches go.

    Args:
        polls: The poll at which a batch ends (1: its first).
        delay_s: A batch ends no sooner than this long after its creation.
        answer_first: Answer only this many requests, then end as expired (None: answer all).
        cancel_after: Answer only this many requests, then end as cancelled, as a batch cancelled part-way from
            the provider's console ends: OpenAI `cancelled` with an output file of the finished ones (nothing
            about the rest), Anthropic `ended` after a cancel with a `canceled` result for each of the rest,
            Gemini CANCELLED with the finished responses.
        fail: End as failed (validation), answering nothing, with this message.
        results_raw: Send these bytes as the results (OpenAI's output file, Anthropic's results, Gemini's
            responses file) instead of the answers.
        results_endless: Send these bytes over and over as the results, a file that never ends (until the client
            goes away).
        patch: Called on every batch object (or Gemini operation) the server sends, created, polled or cancelled,
            to change it as a hostile server would.
        throttle: Refuse this many batch calls (the next ones: a create, a poll, a download) with 429 and a wait
            of `wait_s`, as each provider asks for one: Gemini in the error body (RetryInfo), the others in
            `retry-after`.
        wait_s: The wait a throttled call asks for.
    """

    polls: int = 1
    delay_s: float = 0.0
    answer_first: int | None = None
    cancel_after: int | None = None
    fail: str | None = None
    results_raw: bytes | None = None
    results_endless: bytes | None = None
    patch: Callable[[dict[str, Any]], None] | None = None
    throttle: int = 0
    wait_s: float = 37.0

    def sent(self, batch: dict[str, Any]) -> dict[str, Any]:
        """`batch` as the server sends it (`patch` applied)."""
        if self.patch is not None:
            self.patch(batch)
        return batch

    def results(self, body: bytes, content_type: str = "application/octet-stream") -> web.StreamResponse:
        """A results file of `body`, or the plan's file: verbatim, or one that never ends."""
        if self.results_endless is None:
            return web.Response(body=self.results_raw if self.results_raw is not None else body,
                                content_type=content_type)
        return web.Response(body=_endless(self.results_endless), content_type=content_type)


async def _endless(chunk: bytes) -> AsyncIterator[bytes]:
    while True:
        yield chunk


@dataclass
class Job:
    """One batch: its requests, where it is, and once ended its answers ((custom id, status, body) each)."""

    id: str
    requests: list[tuple[str, dict[str, Any]]]
    plan: Plan
    extra: dict[str, Any] = field(default_factory=dict)   # the provider's own (endpoint, model, input form)
    created: float = field(default_factory=time.monotonic)
    state: str = "pending"   # pending, running, cancelling, ended
    ended_as: str | None = None   # completed, expired, cancelled, failed
    polls: int = 0
    answers: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    left: list[str] = field(default_factory=list)   # custom ids left unanswered (expired or cancelled)


class BatchJobs:
    """The batches of one server: created, advanced by polls, cancelled, answered through `answer`."""

    def __init__(self, answer: Callable[[Job, dict[str, Any]], tuple[int, dict[str, Any]]], prefix: str,
                 throttled: Callable[[float], web.HTTPException]) -> None:
        self.plan = Plan()
        self._throttled = throttled
        self.jobs: dict[str, Job] = {}
        self.submitted: list[str] = []
        self.log: list[str] = []
        self._answer = answer
        self._prefix = prefix
        self._lock = threading.Lock()
        self.key_query: tuple[str, str] | None = None
        self.hosts: list[str] = []   # each batch call's Host, in order (beside `log`)

    def note(self, request: web.Request) -> None:
        """Log a batch call; refuse it (401) when `key_query` asks for the key in the URL and it is not there, or
        (429) while the plan throttles."""
        with self._lock:
            self.log.append(f"{request.method} {request.path}")
            self.hosts.append(request.host)
        if self.key_query is not None and request.query.get(self.key_query[0]) != self.key_query[1]:
            message = f"API key not valid for {request.method} {request.path_qs}"   # echoes the URL, as some do
            raise web.HTTPUnauthorized(text=json.dumps({"error": {"code": 401, "message": message,
                                                                  "status": "UNAUTHENTICATED"}}),
                                       content_type="application/json")
        with self._lock:
            throttled = self.plan.throttle > 0
            self.plan.throttle -= throttled
        if throttled:
            raise self._throttled(self.plan.wait_s)

    def create(self, requests: list[tuple[str, dict[str, Any]]], **extra: Any) -> Job:
        with self._lock:
            job = Job(f"{self._prefix}{len(self.jobs) + 1}", requests, self.plan, dict(extra))
            self.jobs[job.id] = job
            self.submitted.extend(custom_id for custom_id, _ in requests)
        return job

    def poll(self, job: Job) -> Job:
        """One poll: a pending batch starts; one due ends (answered by then)."""
        job.polls += 1
        if job.state == "pending":
            job.state = "running"
        if job.state == "cancelling":
            self._end(job, "cancelled", answered=0)
        elif job.state == "running" and job.polls >= job.plan.polls and \
                time.monotonic() - job.created >= job.plan.delay_s:
            if job.plan.fail is not None:
                self._end(job, "failed", answered=0)
            elif job.plan.answer_first is not None:
                self._end(job, "expired", answered=job.plan.answer_first)
            elif job.plan.cancel_after is not None:
                self._end(job, "cancelled", answered=job.plan.cancel_after)
            else:
                self._end(job, "completed", answered=len(job.requests))
        return job

    def cancel(self, job: Job) -> Job:
        if job.state != "ended":
            job.state = "cancelling"
        return job

    def _end(self, job: Job, how: str, answered: int) -> None:
        job.state, job.ended_as = "ended", how
        if how != "failed":
            job.answers = [(custom_id, *self._answer(job, body)) for custom_id, body in job.requests[:answered]]
            job.left = [custom_id for custom_id, _ in job.requests[answered:]]

    def job(self, job_id: str) -> Job:
        found = self.jobs.get(job_id)
        if found is None:
            raise web.HTTPNotFound(text=json.dumps({"error": {"message": f"no batch {job_id}"}}),
                                   content_type="application/json")
        return found


def _retry_after(wait_s: float) -> web.HTTPException:
    """A 429 whose `retry-after` header asks for `wait_s` (OpenAI, Anthropic)."""
    return web.HTTPTooManyRequests(text=json.dumps({"error": {"type": "rate_limit_error", "message": "slow down"}}),
                                   content_type="application/json", headers={"retry-after": f"{wait_s:g}"})


def _retry_info(wait_s: float) -> web.HTTPException:
    """A 429 RESOURCE_EXHAUSTED whose body asks for `wait_s` in a `google.rpc.RetryInfo` (Gemini)."""
    refused = fake_gemini._error(fake_gemini.Reply(status=429, message="Quota exceeded", retry_delay=f"{wait_s:g}s"))
    return web.HTTPTooManyRequests(text=refused.text, content_type="application/json")


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def _stamp() -> int:
    return int(time.time())


class BatchServer:
    """What the three batch servers share: their batches (`jobs`), its plan and logs."""

    jobs: BatchJobs

    @property
    def plan(self) -> Plan:
        """How the next batches go (a batch keeps the plan it was created under)."""
        return self.jobs.plan

    @plan.setter
    def plan(self, plan: Plan) -> None:
        self.jobs.plan = plan

    @property
    def submitted(self) -> list[str]:
        """Every custom id of every batch created, in order."""
        return self.jobs.submitted

    @property
    def log(self) -> list[str]:
        """Every batch call, `METHOD /path`, in order."""
        return self.jobs.log

    @property
    def key_query(self) -> tuple[str, str] | None:
        """(parameter, key) every batch call's URL must carry, or None (any)."""
        return self.jobs.key_query

    @key_query.setter
    def key_query(self, value: tuple[str, str] | None) -> None:
        self.jobs.key_query = value


# -- OpenAI --------------------------------------------------------------------------------------------------------


class OpenAIBatchServer(BatchServer):
    """`/v1/files` and `/v1/batches` on a `FakeOpenAI`; the answers are the fake's whole chat or completions
    replies (an `http_*` fault: that status and error body on the request's line)."""

    def __init__(self, server: FakeOpenAI) -> None:
        self.server = server
        self.jobs = BatchJobs(self._answer, "batch_", _retry_after)
        self.files: dict[str, bytes] = {}
        self._output_of: dict[str, Job] = {}   # output file id -> its batch
        server.mounts.append(self._mount)

    def _mount(self, app: web.Application) -> None:
        app.router.add_post("/v1/files", self._upload)
        app.router.add_get("/v1/files/{id}/content", self._content)
        app.router.add_post("/v1/batches", self._create)
        app.router.add_get("/v1/batches/{id}", self._get)
        app.router.add_post("/v1/batches/{id}/cancel", self._cancel)

    def _answer(self, job: Job, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        reply = self.server._next_reply(body)
        if reply.fault and reply.fault.startswith("http_"):
            status = int(reply.fault.removeprefix("http_"))
            return status, {"error": {"message": reply.error_message or f"fake error {status}", "code": status}}
        return 200, self.server._whole(body, reply, job.extra["endpoint"] == "/v1/completions")

    async def _upload(self, request: web.Request) -> web.Response:
        self.jobs.note(request)
        form = await request.post()
        upload = form.get("file")
        if form.get("purpose") != "batch" or not isinstance(upload, web.FileField):
            return _openai_error(400, "purpose must be batch, with a file")
        content = upload.file.read()
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = content
        return web.json_response({"id": file_id, "object": "file", "bytes": len(content), "created_at": _stamp(),
                                  "filename": upload.filename, "purpose": "batch", "status": "processed"})

    async def _create(self, request: web.Request) -> web.Response:
        self.jobs.note(request)
        body = await request.json()
        endpoint = body.get("endpoint")
        content = self.files.get(str(body.get("input_file_id")))
        if content is None or body.get("completion_window") != "24h" or \
                endpoint not in ("/v1/chat/completions", "/v1/completions"):
            return _openai_error(400, "input_file_id, endpoint and completion_window 24h are required")
        requests = []
        for line in content.splitlines():
            row = json.loads(line)
            if row.get("method") != "POST" or row.get("url") != endpoint:
                return _openai_error(400, f"line for {row.get('custom_id')} does not POST to {endpoint}")
            requests.append((row["custom_id"], row["body"]))
        job = self.jobs.create(requests, endpoint=endpoint, input_file_id=body["input_file_id"])
        return web.json_response(job.plan.sent(self._batch(job)))

    async def _get(self, request: web.Request) -> web.Response:
        self.jobs.note(request)
        job = self.jobs.poll(self.jobs.job(request.match_info["id"]))
        return web.json_response(job.plan.sent(self._batch(job)))

    async def _cancel(self, request: web.Request) -> web.Response:
        self.jobs.note(request)
        job = self.jobs.cancel(self.jobs.job(request.match_info["id"]))
        return web.json_response(job.plan.sent(self._batch(job)))

    async def _content(self, request: web.Request) -> web.StreamResponse:
        self.jobs.note(request)
        file_id = request.match_info["id"]
        if file_id not in self.files:
            return _openai_error(404, f"no file {file_id}")
        job = self._output_of.get(file_id)
        if job is not None:
            return job.plan.results(self.files[file_id])
        return web.Response(body=self.files[file_id], content_type="application/octet-stream")

    def _batch(self, job: Job) -> dict[str, Any]:
        status = {"pending": "validating", "running": "in_progress", "cancelling": "cancelling"}.get(
            job.state, job.ended_as or "")
        out: dict[str, Any] = {
            "id": job.id, "object": "batch", "endpoint": job.extra["endpoint"], "errors": None,
            "input_file_id": job.extra["input_file_id"], "completion_window": "24h", "status": status,
            "output_file_id": None, "error_file_id": None, "created_at": _stamp(), "expires_at": _stamp() + 86400,
            "request_counts": {"total": len(job.requests), "completed": 0, "failed": 0}, "metadata": None}
        if job.ended_as == "failed":
            out["errors"] = {"object": "list", "data": [{"code": "invalid_request", "message": job.plan.fail,
                                                         "param": None, "line": 1}]}
            out["request_counts"] = {"total": 0, "completed": 0, "failed": 0}
        elif job.state == "ended":
            self._write_files(job, out)
        return out

    def _write_files(self, job: Job, out: dict[str, Any]) -> None:
        if "output_file_id" not in job.extra:
            ok = [(c, s, b) for c, s, b in job.answers if s == 200]
            output = [{"id": f"batch_req_{i}", "custom_id": c, "response": {"status_code": s, "request_id": f"r{i}",
                                                                           "body": b}, "error": None}
                      for i, (c, s, b) in enumerate(job.answers) if s == 200]
            errors = [{"id": f"batch_req_e{i}", "custom_id": c, "response": {"status_code": s, "request_id": f"e{i}",
                                                                            "body": b}, "error": None}
                      for i, (c, s, b) in enumerate(job.answers) if s != 200]
            if job.ended_as == "expired":   # a cancelled batch's output file has its finished ones, no more
                errors += [{"id": f"batch_req_l{i}", "custom_id": c, "response": None,
                            "error": {"code": "batch_expired", "message": "This request could not be executed "
                                                                          "before the batch expired."}}
                           for i, c in enumerate(job.left)]
            job.extra["counts"] = (len(ok), len(job.requests) - len(ok))
            for name, rows in (("output_file_id", output), ("error_file_id", errors)):
                hostile = name == "output_file_id" and (job.plan.results_raw is not None or
                                                        job.plan.results_endless is not None)
                if rows or hostile:
                    file_id = f"file-{len(self.files) + 1}"
                    self.files[file_id] = _jsonl(rows)
                    job.extra[name] = file_id
                    if name == "output_file_id":
                        self._output_of[file_id] = job
        out["output_file_id"] = job.extra.get("output_file_id")
        out["error_file_id"] = job.extra.get("error_file_id")
        completed, failed = job.extra["counts"]
        out["request_counts"] = {"total": len(job.requests), "completed": completed, "failed": failed}


def _openai_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error", "code": None}},
                             status=status)


# -- Anthropic -----------------------------------------------------------------------------------------------------


class AnthropicBatchServer(BatchServer):
    """`/v1/messages/batches` on a `FakeAnthropic`; the answers are its whole `message` replies (a reply with a
    `status`: an `errored` result with Anthropic's error body)."""

    def __init__(self, server: FakeAnthropic) -> None:
        self.server = server
        self.jobs = BatchJobs(self._answer, "msgbatch_", _retry_after)
        server.mounts.append(self._mount)

    def _mount(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages/batches", self._create)
        app.router.add_get("/v1/messages/batches/{id}", self._get)
        app.router.add_post("/v1/messages/batches/{id}/cancel", self._cancel)
        app.router.add_get("/v1/messages/batches/{id}/results", self._results)

    def _answer(self, job: Job, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        reply: fake_anthropic.Reply = self.server.take_reply(body)
        if reply.status is not None:
            return reply.status, fake_anthropic.error_body(reply.status, reply.message)
        stop = reply.stop or ("tool_use" if reply.tool_calls else "end_turn")
        return 200, fake_anthropic.whole_message(reply, reply.model or body["model"], stop, [])

    def _refused(self, request: web.Request) -> web.Response | None:
        self.jobs.note(request)
        if request.headers.get("anthropic-version") != "2023-06-01":
            return fake_anthropic._error(400, "anthropic-version: header is required")
        self.server.keys.add(request.headers.get("x-api-key", ""))
        return None

    async def _create(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        body = await request.json()
        rows = body.get("requests")
        if not isinstance(rows, list) or not rows:
            return fake_anthropic._error(400, "requests: field required")
        ids = [row.get("custom_id") for row in rows]
        if len(set(ids)) != len(ids) or not all(isinstance(i, str) and 0 < len(i) <= 64 for i in ids):
            return fake_anthropic._error(400, "requests: custom_id must be unique, 1-64 characters")
        if any((row.get("params") or {}).get("stream") for row in rows):
            return fake_anthropic._error(400, "requests: streaming is not supported in batches")
        job = self.jobs.create([(row["custom_id"], row["params"]) for row in rows])
        return web.json_response(job.plan.sent(self._batch(job, request)))

    async def _get(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        job = self.jobs.poll(self.jobs.job(request.match_info["id"]))
        return web.json_response(job.plan.sent(self._batch(job, request)))

    async def _cancel(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        job = self.jobs.cancel(self.jobs.job(request.match_info["id"]))
        job.extra["cancel_initiated_at"] = "2026-01-01T00:00:00Z"
        return web.json_response(job.plan.sent(self._batch(job, request)))

    async def _results(self, request: web.Request) -> web.StreamResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        job = self.jobs.job(request.match_info["id"])
        if job.state != "ended":
            return fake_anthropic._error(400, f"batch {job.id} has not ended")
        kind = "canceled" if job.ended_as == "cancelled" else "expired"
        rows = [{"custom_id": c, "result": {"type": "succeeded", "message": b} if s == 200 else
                 {"type": "errored", "error": b}} for c, s, b in job.answers]
        rows += [{"custom_id": c, "result": {"type": kind}} for c in job.left]
        return job.plan.results(_jsonl(rows), "application/binary")

    def _batch(self, job: Job, request: web.Request) -> dict[str, Any]:
        ended = job.state == "ended"
        succeeded = sum(1 for _, s, _ in job.answers if s == 200)
        kind = "canceled" if job.ended_as == "cancelled" else "expired"
        counts = {"processing": 0 if ended else len(job.requests), "succeeded": succeeded,
                  "errored": len(job.answers) - succeeded, "canceled": len(job.left) if kind == "canceled" else 0,
                  "expired": len(job.left) if kind == "expired" else 0}
        base = f"http://{request.host}/v1/messages/batches/{job.id}"
        return {"id": job.id, "type": "message_batch",
                "processing_status": "ended" if ended else "canceling" if job.state == "cancelling" else "in_progress",
                "request_counts": counts, "ended_at": "2026-01-01T00:00:00Z" if ended else None,
                "created_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-02T00:00:00Z", "archived_at": None,
                "cancel_initiated_at": job.extra.get("cancel_initiated_at") or (
                    "2026-01-01T00:00:00Z" if job.ended_as == "cancelled" else None),
                "results_url": job.extra.get("results_url", base + "/results") if ended else None}


# -- Gemini --------------------------------------------------------------------------------------------------------


class GeminiBatchServer(BatchServer):
    """`models/{model}:batchGenerateContent`, `batches/{id}` and the Files API (resumable upload, download) on a
    `FakeGemini`; the answers are its whole generateContent replies (a reply with a `status`: that error)."""

    def __init__(self, server: FakeGemini) -> None:
        self.server = server
        self.jobs = BatchJobs(self._answer, "batches/", _retry_info)
        self.files: dict[str, bytes] = {}
        self._uploads: dict[str, int] = {}
        self._responses_of: dict[str, Job] = {}   # responses file name -> its batch
        server.mounts.append(self._mount)
        server.batch_create = self._create

    def _mount(self, app: web.Application) -> None:
        app.router.add_route("*", "/v1beta/batches/{name}", self._batch_call)
        app.router.add_post("/upload/v1beta/files", self._upload)
        app.router.add_get("/download/v1beta/files/{name}", self._download)

    def _answer(self, job: Job, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        reply: fake_gemini.Reply = self.server.take_reply(body)
        if reply.status is not None:
            return reply.status, fake_gemini.error_body(reply)
        return 200, fake_gemini.whole_reply(reply, reply.model or f"{job.extra['model']}-001")

    async def _create(self, model: str, request: web.Request) -> web.StreamResponse:
        self.jobs.note(request)
        self.server.keys.add(request.headers.get("x-goog-api-key", ""))
        body = (await request.json()).get("batch") or {}
        config = body.get("inputConfig") or body.get("input_config") or {}
        if "fileName" in config or "file_name" in config:
            name = config.get("fileName") or config.get("file_name")
            content = self.files.get(str(name).removeprefix("files/"))
            if content is None:
                return _gemini_error(400, f"no file {name}")
            rows = [json.loads(line) for line in content.splitlines() if line.strip()]
            requests = [(row["key"], row["request"]) for row in rows]
            form = "file"
        else:
            inline = (config.get("requests") or {}).get("requests")
            if not isinstance(inline, list) or not inline:
                return _gemini_error(400, "batch.inputConfig needs requests or a fileName")
            requests = [(row["metadata"]["key"], row["request"]) for row in inline]
            form = "inline"
        job = self.jobs.create(requests, model=model, form=form, display=body.get("displayName"))
        return web.json_response(job.plan.sent(self._operation(job)))

    async def _batch_call(self, request: web.Request) -> web.Response:
        self.jobs.note(request)
        name, _, method = request.match_info["name"].partition(":")
        job = self.jobs.job("batches/" + name)
        if request.method == "POST" and method == "cancel":
            self.jobs.cancel(job)
            return web.json_response({})
        if request.method != "GET" or method:
            return _gemini_error(404, f"unknown method {request.method} {method}")
        return web.json_response(job.plan.sent(self._operation(self.jobs.poll(job))))

    async def _upload(self, request: web.Request) -> web.Response:
        self.jobs.note(request)
        command = request.headers.get("X-Goog-Upload-Command", "")
        if "upload_id" not in request.query:
            if request.headers.get("X-Goog-Upload-Protocol") != "resumable" or command != "start":
                return _gemini_error(400, "a resumable upload starts with X-Goog-Upload-Command: start")
            upload_id = str(len(self._uploads) + 1)
            self._uploads[upload_id] = int(request.headers.get("X-Goog-Upload-Header-Content-Length", "0"))
            url = f"http://{request.host}/upload/v1beta/files?upload_id={upload_id}&upload_protocol=resumable"
            return web.json_response({}, headers={"X-Goog-Upload-URL": url, "X-Goog-Upload-Status": "active"})
        size = self._uploads.get(request.query["upload_id"])
        content = await request.read()
        if size is None or command != "upload, finalize" or request.headers.get("X-Goog-Upload-Offset") != "0" \
                or len(content) != size:
            return _gemini_error(400, "the upload does not match its start")
        name = f"upload-{len(self.files) + 1}"
        self.files[name] = content
        return web.json_response({"file": {"name": f"files/{name}", "mimeType": "application/jsonl",
                                           "sizeBytes": str(len(content)), "state": "ACTIVE"}},
                                 headers={"X-Goog-Upload-Status": "final"})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        self.jobs.note(request)
        name, _, method = request.match_info["name"].partition(":")
        if method != "download" or request.query.get("alt") != "media" or name not in self.files:
            return _gemini_error(404, f"no file {name}")
        job = self._responses_of.get(name)
        if job is not None:
            return job.plan.results(self.files[name])
        return web.Response(body=self.files[name], content_type="application/octet-stream")

    def _operation(self, job: Job) -> dict[str, Any]:
        state = {"pending": "BATCH_STATE_PENDING", "running": "BATCH_STATE_RUNNING",
                 "cancelling": "BATCH_STATE_RUNNING"}.get(job.state) or \
            f"BATCH_STATE_{'SUCCEEDED' if job.ended_as == 'completed' else str(job.ended_as).upper()}"
        ok = sum(1 for _, s, _ in job.answers if s == 200)
        ended = job.state == "ended"
        metadata: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatch",
            "model": f"models/{job.extra['model']}", "displayName": job.extra.get("display") or "",
            "createTime": "2026-01-01T00:00:00Z", "state": state, "name": job.id,
            "batchStats": {"requestCount": str(len(job.requests)), "successfulRequestCount": str(ok),
                           "failedRequestCount": str(len(job.answers) - ok + len(job.left)),
                           "pendingRequestCount": str(0 if ended else len(job.requests))}}
        if ended and job.ended_as != "failed":
            metadata["output"] = self._output(job)
        out: dict[str, Any] = {"name": job.id, "metadata": metadata}
        if ended:
            out["done"] = True
            if job.ended_as == "failed":
                out["error"] = {"code": 400, "message": job.plan.fail}
        return out

    def _output(self, job: Job) -> dict[str, Any]:
        if job.extra["form"] == "inline":
            rows = [{"response": b, "metadata": {"key": c}} if s == 200 else {"error": b, "metadata": {"key": c}}
                    for c, s, b in job.answers]
            return {"inlinedResponses": {"inlinedResponses": rows}}
        if "responses" not in job.extra:
            name = f"batch-{job.id.removeprefix('batches/')}-responses"
            lines: list[dict[str, Any]] = [{"key": c, "response": b} if s == 200 else {"key": c, "error": b}
                                           for c, s, b in job.answers]
            self.files[name] = _jsonl(lines)
            self._responses_of[name] = job
            job.extra["responses"] = f"files/{name}"
        return {"responsesFile": job.extra["responses"]}


def _gemini_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": fake_gemini.error_body(fake_gemini.Reply(status=status, message=message))},
                             status=status)
