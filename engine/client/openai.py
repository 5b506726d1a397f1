"""Request building and reading replies from OpenAI-compatible endpoints, nothing else.

One `OpenAIClient` wraps one connection pool (`engine.client.http1`) for the whole run. `call`
sends a prepared body, retries as `engine.client.retry` decides, and always returns a `CallResult`:
a failed call is a result with `error` set, never an exception, so the runner can write its row.
The bytes of a reply are read under the model's size cap by `engine.client.reply_bytes`; what they
mean is decided in `engine.client.response`. API keys are masked in everything a reply brings back (`engine.redact`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.base.frozen_init import dict_init
from engine.base.jsontext import dumps_compact
from engine.client import retry
from engine.client.deadline import Deadlines, TaskDeadline
from engine.client.http1 import Pool, TransportFailure
from engine.client.replicas import ReplicaSet
from engine.client.reply_bytes import read_body, read_stream
from engine.client.response import CallResult, parse_whole, split_think, tool_call
from engine.client.response_cache import ResponseCache, cache_key, keyed_url
from engine.errors import ClientError
from engine.model import ModelConfig, Test
from engine.redact import Redactor, mask_urls, url_secrets
from engine.suite.content_parts import wire_messages

__all__ = ["CallResult", "OpenAIClient", "PreparedRequest", "RequestSettings", "endpoint_url", "prepare"]

DEFAULT_MAX_TOKENS = 1024
DEFAULT_TEMPERATURE = 0.0
_ERROR_BODY_CHARS = 2000


@dataclass(frozen=True)
class RequestSettings:
    """Run-wide request settings from the command line (None = not given).

    Args:
        temperature: `--temperature`: used when the test sets none.
        max_tokens: `--max-tokens`: the default floor; a test's larger value wins.
        seed: `--seed`: sent as `seed` (overrides a seed in the model's params).
        stream: False for `--no-stream`.
    """

    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stream: bool = True


@dict_init   # one per call: 1.09 -> 0.41 us to build (timeit; engine/base/frozen_init.py)
@dataclass(frozen=True)
class PreparedRequest:
    """A request ready to send, and the resolved settings the results row records."""

    url: str
    body: dict[str, Any]
    stream: bool
    temperature: float | None
    max_tokens: int
    seed: int | None
    extra: dict[str, Any] = field(default_factory=dict)
    # Reads a whole (non-streamed) reply into the result; None: a chat or completions reply (`parse_whole`).
    # Another endpoint (/embeddings, engine.client.embeddings) brings its own reader.
    reader: Callable[[bytes, CallResult, Redactor], None] | None = None


def endpoint_url(model: ModelConfig, base_url: str | None = None) -> str:
    """The full URL of the model's endpoint (`.../v1/chat/completions` or `.../v1/completions`).

    Args:
        model: The model (its `base_url` and API).
        base_url: Another base URL to use (one of the model's replicas).
    """
    base = (base_url or model.base_url or "").rstrip("/")
    return base + ("/completions" if model.api == "completions" else "/chat/completions")


def prepare(model: ModelConfig, test: Test, settings: RequestSettings, *, inline_images: bool = True
            ) -> PreparedRequest:
    """Build the request body for one test.

    Precedence: temperature = the test's, else `--temperature`, else the model's params, else 0;
    max_tokens = max(floor, the test's), where the floor is `--max-tokens`, else the model's
    `params.max_tokens`, else 1024 (a test's value only raises the floor);
    seed = `--seed`, else the model's params.

    Args:
        model: The model config (its `params` are passed through).
        test: The rendered test.
        settings: The run-wide settings.
        inline_images: Image files as base64 data URLs (False: a short placeholder, for `--dry-run`).

    Raises:
        ImageUnavailable: An image file of the test is gone, unreadable or changed since the suite loaded.
    """
    params = model.params   # read, never changed: no copy
    temperature = test.temperature
    if temperature is None:
        temperature = settings.temperature
    if temperature is None:
        temperature = params.get("temperature", DEFAULT_TEMPERATURE)
    floor = settings.max_tokens if settings.max_tokens is not None else params.get("max_tokens", DEFAULT_MAX_TOKENS)
    max_tokens = max(floor, test.max_tokens or 0)
    seed = settings.seed if settings.seed is not None else params.get("seed")
    stream = settings.stream and model.stream
    body: dict[str, Any] = {"model": model.model}
    if model.api == "completions":
        body["prompt"] = test.prompt
    else:
        body["messages"] = list(test.messages) if not test.images else \
            wire_messages(test.messages, test.suite_dir, inline=inline_images)
        if test.tools:
            body["tools"] = list(test.tools)
            body["tool_choice"] = "auto"
    body.update(params)
    body["max_tokens"] = max_tokens
    if temperature is not None:
        body["temperature"] = temperature
    if seed is not None:
        body["seed"] = seed
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    return PreparedRequest(endpoint_url(model), body, stream, temperature, max_tokens, seed)


class _Failed(Exception):
    """One failed try: the classified error and the headers its retry delay comes from."""

    def __init__(self, error: ClientError, headers: Mapping[str, str] | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.headers = headers


class OpenAIClient:
    """Calls OpenAI-compatible endpoints over one shared connection pool.

    Args:
        pool: The run's connections (`Pool(limit)` bounds the requests in flight).
        api_keys: model name -> API key, read from the env by the caller. Keys are put in the
            Authorization header and nowhere else (never in results, errors or logs).
        cache: The response cache a call may be answered from (when its caller passes `cache_as`), or None.
        clock: Monotonic seconds for the replicas' cool-downs (`engine.client.replicas`; tests inject one).
    """

    def __init__(self, pool: Pool, api_keys: Mapping[str, str | None],
                 cache: ResponseCache | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._pool = pool
        self._cache = cache
        self._clock = clock
        self._replicas: dict[str, ReplicaSet] = {}
        self._deadlines = Deadlines()
        self._keys = [key for key in api_keys.values() if key]
        self._redactors: dict[str, Redactor] = {}
        self.retrying = 0   # calls waiting out a retry delay now (the progress display shows it)
        self._headers: dict[str, dict[str, str]] = {}
        for name, key in api_keys.items():
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            if key:
                headers["Authorization"] = f"Bearer {key}"
            self._headers[name] = headers

    def replicas(self, model: ModelConfig) -> ReplicaSet | None:
        """The model's replica set (`base_urls`), made on first use; None for a single endpoint."""
        if not model.base_urls:
            return None
        found = self._replicas.get(model.name)
        if found is None:
            found = self._replicas[model.name] = ReplicaSet(
                model.base_urls, lambda base: endpoint_url(model, base), clock=self._clock)
        return found

    def task_deadline(self) -> TaskDeadline:
        """The deadline keeper of the running task, for a task that makes many calls to pass to `call`."""
        return self._deadlines.current()

    async def call(self, model: ModelConfig, request: PreparedRequest,
                   deadline: TaskDeadline | None = None, *, cache_as: int | None = None) -> CallResult:
        """Send one request, retrying as `retry.py` decides; each try is bounded by `timeout_s`.

        Args:
            model: The model config (timeout_s, max_retries, name for the key).
            request: The prepared request.
            deadline: `task_deadline()` of the calling task, when it has it at hand (saves looking
                the task up on every call); found here otherwise.
            cache_as: The sample index to look the request up under in the response cache, and to
                store a successful reply under; None (the default) leaves the cache alone.

        Returns:
            The result; `error` is set when the call failed for good; `cached` when the cache answered.
        """
        if cache_as is None or self._cache is None:
            return await self._call(model, request, deadline)
        key = cache_key(keyed_url(model, request.url), request.body, cache_as)
        stored = self._cache.get(key)
        if stored is not None:
            return stored
        result = await self._call(model, request, deadline)
        self._cache.put(key, request.url, model.model, result)   # successes only (`response_cache.storable`)
        return result

    async def _call(self, model: ModelConfig, request: PreparedRequest, deadline: TaskDeadline | None) -> CallResult:
        payload = dumps_compact(request.body)   # orjson: 0.3 us against 3.2 us for json.dumps (jsontext.py)
        headers = self._headers.get(model.name) or {"Content-Type": "application/json"}
        redact = self._redactors.get(model.name)
        if redact is None:
            redact = self._redactors[model.name] = Redactor(
                [*self._keys, *url_secrets(model.base_url), *(s for u in model.base_urls for s in url_secrets(u))])
        replicas = self.replicas(model) if model.base_urls else None
        replica = None
        limit = max(1, int(model.max_response_mb * 2**20))
        result = CallResult()
        retries = 0
        waited = 0.0
        timeout_s = model.timeout_s
        if timeout_s is None:
            deadline = None
        elif deadline is None:
            deadline = self._deadlines.current()
        while True:
            # `timeout_s` bounds each try, as openai-python's timeout does; a try that runs out is
            # retried like a connection error, so a call takes at most (max_retries + 1) tries.
            failed: _Failed | None = None
            if replicas is not None:   # each try picks again: a retry lands on another replica
                replica = replicas.acquire()
            try:
                if deadline is not None:
                    deadline.begin(timeout_s)
                try:
                    await self._once(request, payload, headers, result, redact, limit,
                                     request.url if replica is None else replica.url)
                finally:
                    if deadline is not None:
                        deadline.end()
            except _Failed as caught:
                failed = caught
            except TimeoutError:
                failed = _Failed(retry.timeout_error(timeout_s), None)
            except asyncio.CancelledError:
                if deadline is None or not deadline.cancelled_by_deadline():
                    raise
                failed = _Failed(retry.timeout_error(timeout_s), None)
            finally:
                if replica is not None and replicas is not None:
                    replicas.release(replica, failed=failed is not None and retry.replica_at_fault(failed.error))
            if failed is None:
                break
            if not failed.error.retryable or retries >= model.max_retries:
                result.error = failed.error
                if failed.error.kind == "timeout":
                    result.truncated = True
                break
            delay = retry.retry_delay(failed.headers, retries)
            if failed.error.status == 429:
                waited += delay
            retries += 1
            self.retrying += 1
            try:
                await asyncio.sleep(delay)
            finally:
                self.retrying -= 1
            result = CallResult()   # each try starts afresh
        result.retries = retries
        result.rate_limit_wait_s = waited
        if replica is not None:
            result.served_by = replica.shown
        if redact:
            _mask_result(result, redact)
        elif result.error is not None and "@" in str(result.error):
            result.error = _with_message(result.error, mask_urls(str(result.error)))
        return result

    async def _once(self, request: PreparedRequest, payload: bytes, headers: dict[str, str],
                    result: CallResult, redact: Redactor, limit: int, url: str) -> None:
        started = time.perf_counter()
        resp = None
        try:
            resp = await self._pool.post(url, payload, headers)
            if resp.status >= 300:
                # Read past the cut by a key's length, so the key is masked whole before the cut.
                raw = await resp.read_at_most(_ERROR_BODY_CHARS + redact.longest)
                body = redact.clean(raw.decode("utf-8", "replace"))[:_ERROR_BODY_CHARS]
                raise _Failed(retry.status_error(resp.status, resp.headers, body), resp.headers)
            if request.stream:
                await read_stream(resp, result, started, "prompt" in request.body, redact, limit)
            else:
                raw = await read_body(resp, limit)
                result.ttft_provider_s = time.perf_counter() - started
                (request.reader or parse_whole)(raw, result, redact)
        except TransportFailure as exc:
            during = "reading the response" if result.ttft_provider_s is not None else "connecting"
            raise _Failed(retry.transport_error(exc, during=during), None) from None
        except ClientError as exc:  # a reply that cannot be read, found while parsing
            raise _Failed(exc, None) from None
        except (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError, OverflowError) as exc:
            # The shape checks in response.py should leave nothing to reach here; if a reply still
            # trips the reader, it is a bad response (one row), never a crashed run.
            during = "reading" if result.ttft_provider_s is not None else "sending the request for"
            raise _Failed(retry.bad_response(f"{during} the reply failed: {type(exc).__name__}: "
                                             f"{str(exc)[:200]}"), None) from None
        finally:
            if resp is not None:
                resp.release()
            result.latency_s = time.perf_counter() - started
        split_think(result)
        if result.finish_reason == "length":
            result.truncated = True


def _with_message(error: ClientError, message: str) -> ClientError:
    return type(error)(message, kind=error.kind, retryable=error.retryable, status=error.status)


def _mask_result(result: CallResult, redact: Redactor) -> None:
    """Mask keys in every text a reply brought back (some gateways echo the key; a model may repeat it)."""
    text = redact.clean(result.text)
    if text != result.text:
        result.notes.append("an API key in the answer was masked as ***")
        result.text = text
    if result.reasoning:
        result.reasoning = redact.clean(result.reasoning)
    if result.tool_calls:
        result.tool_calls = tuple(
            call if redact.clean(call.raw_arguments) == call.raw_arguments and redact.clean(call.name) == call.name
            else tool_call(redact.clean(call.name), redact.clean(call.raw_arguments), call.id)
            for call in result.tool_calls)
    for name in ("served_model", "system_fingerprint", "finish_reason"):   # short, and almost never a hit
        value = getattr(result, name)
        if value:
            setattr(result, name, redact.clean(value))
    if result.error is not None:
        message = str(result.error)
        clean = mask_urls(redact.clean(message))
        if clean != message:
            result.error = _with_message(result.error, clean)
