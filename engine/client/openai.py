"""The model client: requests prepared, sent, retried and read, for every API the engine speaks.

One `OpenAIClient` wraps the run's aiohttp sessions (`engine.client.session`) for the whole run. `call`
sends a prepared body, retries as `engine.client.retry` decides, and always returns a `CallResult`:
a failed call is a result with `error` set, never an exception, so the runner can write its row.
What differs between APIs (OpenAI chat and completions, Anthropic, Gemini) is the model's provider
(`engine.client.providers`): its wire body, headers, reply readers and error classification; everything
here is the same for all of them. `_once` is the one place a try is sent and its reply read (under the
model's size cap; SSE through `engine.client.sse`, each event folded in by the provider's reader), and
`_failure` is the one place aiohttp's exceptions become the errors `retry.py` classifies: a try whose reply
had started (a 2xx and its first body bytes) is never sent again, whatever breaks after. API keys, URL
credentials (userinfo, query values of `base_url`) and proxy credentials are masked in everything a reply
brings back (`engine.redact`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
from multidict import CIMultiDict

from engine.base.jsontext import dumps_compact
from engine.client import ratelimit, retry
from engine.client.providers import Provider, WireRequest, method_url, provider
from engine.client.replicas import ReplicaSet
from engine.client.response import CallResult, split_think, tool_call
from engine.client.response_cache import ResponseCache, cache_key, keyed_url
from engine.client.session import Sessions, proxy_secrets
from engine.client.sse import SSEDecoder
from engine.client.window import Dispatch, Outcome, Unlimited, unless_stopped
from engine.errors import CallStopped, ClientError
from engine.model.model_config import ModelConfig, max_tokens_floor
from engine.model.test import Test
from engine.redact import Redactor, key_forms, mask_urls, url_secrets
from engine.suite.content_parts import wire_messages
from engine.suite.conversation import named_for_api

__all__ = [
    "CallResult",
    "OpenAIClient",
    "PreparedRequest",
    "RequestSettings",
    "endpoint_url",
    "method_path",
    "method_url",
    "prepare",
    "temperature_of",
]

_UNLIMITED = Unlimited()
DEFAULT_TEMPERATURE = 0.0
_ERROR_BODY_CHARS = 16_000   # an error body is read this far: whole, so its JSON gives its `error.message`


@dataclass(frozen=True)
class RequestSettings:
    """Run-wide request settings from the command line (None = not given).

    Args:
        temperature: `--temperature`: used when the test sets none.
        max_tokens: `--max-tokens`: the default floor; a test's larger value wins.
        stream: False for `--no-stream`.

    `--seed` is not here: it orders the run and is never sent (a request's seed: `prepare`).
    """

    temperature: float | None = None
    max_tokens: int | None = None
    stream: bool = True


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
    # Reads a whole (non-streamed) reply into the result; None: the provider's reader of its API's reply.
    # Another endpoint (embeddings, engine.judge.embeddings) brings its own reader.
    reader: Callable[[bytes, CallResult, Redactor], None] | None = None
    api: str = "chat"   # the provider whose wire the body is (`engine.client.providers`)
    # The method's path after the base URL (`/chat/completions`, `/models/m:generateContent`): a replica's URL is
    # its base with it, so the method follows the request (`method_url`).
    method: str = ""
    # API name -> tool key, for tools the API sees under a `name:` of their own: replies are read back to the keys.
    tool_keys: Mapping[str, str] = field(default_factory=dict)


def endpoint_url(model: ModelConfig, base_url: str | None = None, *, stream: bool | None = None) -> str:
    """The full URL of the model's method (`.../v1/chat/completions`, `.../v1/messages`, ...; query kept).

    Args:
        model: The model (its `base_url` and API).
        base_url: Another base URL to use (one of the model's replicas).
        stream: Whether the call streams (Gemini's method differs); None: the model's `stream`.
    """
    return method_url(base_url or model.base_url or "", method_path(model, stream=stream))


def method_path(model: ModelConfig, *, stream: bool | None = None) -> str:
    """The path of the model's method after its base URL (Gemini's differs when streamed); None: the model's."""
    return provider(model.api).path(model, model.stream if stream is None else stream)


def temperature_of(model: ModelConfig, test: Test, settings: RequestSettings) -> float:
    """The temperature a test's requests to `model` go with: the test's, else `--temperature`, else the
    model's params, else 0."""
    if test.temperature is not None:
        return test.temperature
    if settings.temperature is not None:
        return settings.temperature
    value: float = model.params.get("temperature", DEFAULT_TEMPERATURE)   # as written: the body and cache keys
    return value


def prepare(model: ModelConfig, test: Test, settings: RequestSettings, *, inline_images: bool = True,
            attempt: int = 0) -> PreparedRequest:
    """Build the request body for one test.

    Precedence: temperature = the test's, else `--temperature`, else the model's params, else 0;
    max_tokens = max(floor, the test's), where the floor is `--max-tokens`, else the model's
    (`engine.model.model_config.max_tokens_floor`: its `params.max_tokens`, else 1024; a test's value only raises it);
    seed = the model's `params.seed` plus the attempt index (each attempt its own sample on a server that
    honours seeds), none when the params set none; tools go out under their API names (`Test.api_names`)
    with the test's `tool_choice`.

    Args:
        model: The model config (its `params` are passed through).
        test: The rendered test.
        settings: The run-wide settings.
        inline_images: Image files as base64 data URLs (False: a short placeholder, for `--dry-run`).
        attempt: The attempt index (0 for the first), added to the params' seed.

    Raises:
        ImageUnavailable: An image file of the test is gone, unreadable or changed since the suite loaded.
    """
    params = model.params   # read, never changed: no copy
    temperature = temperature_of(model, test, settings)
    floor = settings.max_tokens if settings.max_tokens is not None else max_tokens_floor(model)
    max_tokens = max(floor, test.max_tokens or 0)
    seed = params.get("seed")
    if seed is not None:
        seed = (int(seed) + attempt + 2**63) % 2**64 - 2**63   # kept a 64-bit integer
    stream = settings.stream and model.stream
    api = provider(model.api)
    messages: Any = ()
    if api.chat:
        messages = test.messages if not test.images else \
            wire_messages(test.messages, test.suite_dir, inline=inline_images)
    tools: Any = test.tools
    choice = test.tool_choice if test.tools else None
    if test.api_names:
        messages, tools, choice = named_for_api(messages, tools, choice, test.api_names)
    body = api.build(WireRequest(model=model.model, messages=messages, prompt=test.prompt, tools=tools,
                                 tool_choice=choice, params=params, max_tokens=max_tokens,
                                 temperature=temperature, seed=seed, stream=stream))
    return PreparedRequest(endpoint_url(model, stream=stream), body, stream, temperature, max_tokens, seed,
                           api=model.api, tool_keys={v: k for k, v in test.api_names.items()},
                           method=method_path(model, stream=stream))


class _Failed(Exception):
    """One failed try: the classified error and the headers its retry delay comes from."""

    def __init__(self, error: ClientError, headers: Mapping[str, str] | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.headers = headers


class OpenAIClient:
    """Calls OpenAI-compatible endpoints over the run's sessions.

    Args:
        sessions: The run's sessions (`Sessions(limit)` bounds the connections open at once).
        api_keys: model name -> API key, read from the env by the caller. Keys are put in the
            Authorization header and nowhere else (never in results, errors or logs).
        cache: The response cache a call may be answered from (when its caller passes `cache_as`), or None.
        clock: Monotonic seconds for the replicas' cool-downs (`engine.client.replicas`; tests inject one).
        stopping: Set when the run stops: a call still waiting to be sent (for the rate limit, a slot or a
            retry's delay) raises `CallStopped` at once instead of being sent.
    """

    def __init__(self, sessions: Sessions, api_keys: Mapping[str, str | None],
                 cache: ResponseCache | None = None, *, clock: Callable[[], float] = time.monotonic,
                 stopping: asyncio.Event | None = None) -> None:
        self._sessions = sessions
        self._cache = cache
        self._clock = clock
        self._stopping = stopping
        self._replicas: dict[str, ReplicaSet] = {}
        self._keys = [form for key in api_keys.values() if key for form in key_forms(key)]
        self._api_keys = dict(api_keys)   # for a model that sends its key elsewhere (`api_key_header`, `api_key_query`)
        self._proxy_secrets = proxy_secrets()
        self._redactors: dict[str, Redactor] = {}
        self._timeouts: dict[str, aiohttp.ClientTimeout] = {}
        self.retrying = 0   # calls waiting out a retry delay now (the progress display shows it)
        self.rate_limited = 0   # calls paced now: waiting for the rate limit to let them go (shown too)
        # By endpoint and key (`ratelimit.budget_key`), then by model id; and by model name.
        self._budgets: dict[str, dict[str, ratelimit.Budget]] = {}
        self._budget_of: dict[str, ratelimit.Budget] = {}
        self._key_digests = {name: ratelimit.key_digest(key) for name, key in api_keys.items()}
        self._headers: dict[str, dict[str, str]] = {}   # by model name, made on first use by its provider

    def _headers_for(self, model: ModelConfig) -> dict[str, str]:
        """The model's request headers, its key where its API reads it (`Authorization`, `x-api-key`, ...)."""
        found = self._headers.get(model.name)
        if found is None:
            found = self._headers[model.name] = provider(model.api).headers(self._api_keys.get(model.name))
        return found

    def replicas(self, model: ModelConfig) -> ReplicaSet | None:
        """The model's replica set (`base_urls`), made on first use; None for a single endpoint."""
        if not model.base_urls:
            return None
        found = self._replicas.get(model.name)
        if found is None:
            found = self._replicas[model.name] = ReplicaSet(
                model.base_urls, clock=self._clock)
        return found

    def _key_elsewhere(self, model: ModelConfig, url: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
        """The URL and headers of a model whose API takes its key in another header (`api_key_header: api-key`,
        Azure) or a query parameter (`api_key_query: key`), in place of the header its provider puts it in."""
        key = self._api_keys.get(model.name)
        if not key:
            return url, headers
        headers = {name: value for name, value in headers.items() if key not in value}
        if model.api_key_header:
            headers[model.api_key_header] = key
        if model.api_key_query:
            url += ("&" if "?" in url else "?") + quote(model.api_key_query, safe="") + "=" + quote(key, safe="")
        return url, headers

    async def call(self, model: ModelConfig, request: PreparedRequest, *, cache_as: int | None = None,
                   dispatch: Dispatch | None = None, stoppable: bool = True) -> CallResult:
        """Send one request, retrying as `retry.py` decides; each try is bounded by `timeout_s`.

        Args:
            model: The model config (timeout_s, connect_timeout_s, max_retries, name for the key).
            request: The prepared request.
            cache_as: The sample index to look the request up under in the response cache, and to
                store a successful reply under; None (the default) leaves the cache alone.
            dispatch: The slots each try waits for (`engine.client.window`); None: none.
            stoppable: Whether a stop of the run ends the call while it waits to be sent (False: a conversation's
                later turns, never cut mid-way).

        Returns:
            The result; `error` is set when the call failed for good; `cached` when the cache answered.

        Raises:
            CallStopped: The run stopped before the call was sent (or between its tries).
        """
        if cache_as is None or self._cache is None:
            return _tool_keys(await self._call(model, request, dispatch or _UNLIMITED, stoppable), request)
        key = cache_key(keyed_url(model, request.url), request.body, cache_as)
        stored = self._cache.get(key)
        if stored is not None:
            return _tool_keys(stored, request)
        result = await self._call(model, request, dispatch or _UNLIMITED, stoppable)
        self._cache.put(key, request.url, model.model, result)   # successes only (`response_cache.storable`)
        return _tool_keys(result, request)

    async def _call(self, model: ModelConfig, request: PreparedRequest, dispatch: Dispatch,
                    stoppable: bool) -> CallResult:
        stopping = self._stopping if stoppable else None
        payload = dumps_compact(request.body)
        headers = self._headers_for(model)
        redact = self._redactors.get(model.name)
        if redact is None:
            redact = self._redactors[model.name] = Redactor(
                [*self._keys, *self._proxy_secrets, *url_secrets(model.base_url),
                 *(s for u in model.base_urls for s in url_secrets(u))])
        timeout = self._timeouts.get(model.name)
        if timeout is None:
            timeout = self._timeouts[model.name] = aiohttp.ClientTimeout(total=None,
                                                                         sock_connect=model.connect_timeout_s)
        replicas = self.replicas(model) if model.base_urls else None
        replica = None
        limit = max(1, int(model.max_response_mb * 2**20))
        result = CallResult()
        retries = 0
        transient = 0   # retries of errors other than a rate limit: `max_retries` bounds them
        waits = 0   # waits after a rate limit or an overload: the deadline bounds them
        waited = 0.0
        budget = self._budget(model)
        cost = ratelimit.request_tokens(request.body)
        deadline = time.monotonic() + model.rate_limit_deadline_s
        limited: ClientError | None = None   # the last rate-limit answer, for the row if the deadline passes
        first_try: float | None = None   # a failed call's latency runs from its first try, waits included
        probe = budget.probe()
        if probe is None:   # another call is finding out the limits: wait for its reply, at most one try's time
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(model.timeout_s):
                    await unless_stopped(budget.heard.wait(), stopping)
        while True:
            # `timeout_s` bounds each try, as openai-python's timeout does; a try that runs out is
            # retried like a connection error, so a call takes at most (max_retries + 1) tries
            # besides its rate-limit waits.
            failed: _Failed | None = None
            async with dispatch.hold(stoppable) as held:   # the model's slot, held while the try is paced and sent
                try:
                    ticket = await self._paced(budget, cost, deadline, stopping)
                except ratelimit.PastDeadline as past:
                    result.error = retry.pacing_past_deadline(past.wait_s, model.rate_limit_deadline_s) \
                        if limited is None else retry.past_deadline(limited, model.rate_limit_deadline_s, past.wait_s)
                    break
                waited += ticket.waited
                if replicas is not None:   # each try picks again: a retry lands on another replica
                    replica = replicas.acquire()
                if first_try is None:
                    first_try = time.perf_counter()
                url = request.url if replica is None else method_url(replica.base, request.method)
                paced_by = ticket.owner   # `budget`, or the one that absorbed it meanwhile
                try:
                    async with dispatch.send(held):   # the run's slot, held only while the try is in flight
                        async with asyncio.timeout(model.timeout_s):
                            await self._once(url, request, payload, headers, timeout, model, result, redact, limit,
                                             functools.partial(self._observe, model, paced_by, ticket),
                                             functools.partial(paced_by.written, ticket))
                except _Failed as caught:
                    failed = caught
                except TimeoutError as exc:
                    failed = _Failed(_failure(exc, model, result, stream=request.stream), None)
                finally:
                    paced_by.returned(ticket)   # never written (stopped, no connection): its cost back
                    if probe:   # the first call's try is over, however it went: the calls held back may go
                        budget.hear()
                        probe = False
                    if replica is not None and replicas is not None:
                        replicas.release(replica, failed=failed is not None and retry.replica_at_fault(failed.error))
                    held.outcome = "ok" if failed is None else _outcome(failed.error)
                    held.work = float(result.completion_tokens or 1)
            if failed is None:
                break
            if retry.rate_limited(failed.error):   # a wait, for as long as the deadline allows
                delay = retry.rate_limit_delay(failed.headers, waits)
                if time.monotonic() + delay > deadline:
                    result.error = retry.past_deadline(failed.error, model.rate_limit_deadline_s, delay)
                    break
                limited = failed.error
                waits += 1
                retries += 1
                waited += delay
                await self._retry_after(delay, stopping)
                result = CallResult()   # each try starts afresh
                continue
            if not failed.error.retryable or transient >= model.max_retries:
                result.error = failed.error
                if failed.error.kind == "timeout":
                    result.truncated = True
                break
            delay = retry.retry_delay(failed.headers, transient)
            transient += 1
            retries += 1
            await self._retry_after(delay, stopping)
            result = CallResult()   # each try starts afresh
        result.retries = retries
        result.rate_limit_wait_s = waited
        if result.error is not None and first_try is not None:
            result.latency_s = time.perf_counter() - first_try   # every try and the waits between them
        if replica is not None:
            result.served_by = replica.shown
        _mask_result(result, redact)
        return result

    def _budget(self, model: ModelConfig) -> ratelimit.Budget:
        """The rate-limit budget of the model's calls: one per endpoint, key and model id (entries naming the same
        model there share it), or the one that absorbed it (`_share`)."""
        found = self._budget_of.get(model.name)
        if found is None:
            group = self._budgets.setdefault(
                ratelimit.budget_key(model, self._key_digests.get(model.name, "-")), {})
            found = group.get(model.model)
            if found is None:
                found = group[model.model] = ratelimit.Budget()
            found.declare(model.rate_limit)
            self._budget_of[model.name] = found
        return found.active()

    def _observe(self, model: ModelConfig, budget: ratelimit.Budget, ticket: ratelimit.Ticket, status: int,
                 headers: Mapping[str, str]) -> None:
        """A reply to the ticket's try: its budget learns from it, and may turn out to share its limit."""
        budget.observe(ticket, status, headers)
        if status < 300:
            self._share(model, budget)

    def _share(self, model: ModelConfig, budget: ratelimit.Budget) -> None:
        """Pace as one the models whose replies show one limit counting both (the provider's headers say the
        limit is shared): `budget` absorbs any other budget of its endpoint and key whose calls it saw counted."""
        now = time.monotonic()
        if budget.counted_by_others(now) < 3:
            return
        group = self._budgets.get(ratelimit.budget_key(model, self._key_digests.get(model.name, "-")), {})
        for other in group.values():
            if other.active() is not budget and budget.shares_a_bucket_with(other.active(), now):
                budget.absorb(other.active())

    async def _paced(self, budget: ratelimit.Budget, cost: int, deadline: float,
                     stopping: asyncio.Event | None) -> ratelimit.Ticket:
        """The try's ticket from the rate limit, waiting for its turn (counted as paced) unless the run stops.

        Raises:
            PastDeadline: The pace would let it go only after `deadline`.
            CallStopped: The run stopped while it waited.
        """
        if stopping is not None and stopping.is_set():
            raise CallStopped("the run stopped before this call was sent")
        ticket = budget.active().grant_now(cost)
        if ticket is not None:
            return ticket
        self.rate_limited += 1
        try:
            return await unless_stopped(budget.take(cost, deadline), stopping)
        finally:
            self.rate_limited -= 1

    async def _retry_after(self, delay: float, stopping: asyncio.Event | None) -> None:
        """Wait out a retry's delay (counted as retrying) unless the run stops."""
        self.retrying += 1
        try:
            await unless_stopped(asyncio.sleep(delay), stopping)
        finally:
            self.retrying -= 1

    async def _once(self, url: str, request: PreparedRequest, payload: bytes, headers: dict[str, str],
                    timeout: aiohttp.ClientTimeout, model: ModelConfig, result: CallResult, redact: Redactor,
                    limit: int, observe: Callable[[int, Mapping[str, str]], None] | None = None,
                    written: Callable[[], None] | None = None) -> None:
        """One try: send the request, read the reply into `result`; raise `_Failed` when it fails.

        `observe` is told each reply's status and headers (the rate-limit budget reads them); `written` is called
        once the request's headers are written (`engine.client.session`).

        Once the reply has started (`result.reply_started`), a failure is never retried (`retry.after_reply_started`).
        """
        started = time.perf_counter()
        api = provider(request.api)
        session = self._sessions.for_url(url)
        if model.api_key_header or model.api_key_query:
            url, headers = self._key_elsewhere(model, url, headers)
        try:
            # Redirects are refused: a 3xx is an error row naming where the endpoint moved (`retry.status_error`).
            async with session.post(url, data=payload, headers=headers, timeout=timeout,
                                    allow_redirects=False, trace_request_ctx=written) as resp:
                if observe is not None:
                    observe(resp.status, resp.headers)
                if resp.status >= 300:
                    # Read past the cut by a key's length, so the key is masked whole before the cut.
                    raw = await _read_at_most(resp, _ERROR_BODY_CHARS + redact.longest)
                    body = redact.clean(raw.decode("utf-8", "replace"))[:_ERROR_BODY_CHARS]
                    error, delay = api.classify(resp.status, resp.headers, body)
                    raise _Failed(error, _with_delay(resp.headers, delay))
                if request.stream:
                    await _read_stream(resp, result, started, api, redact, limit)
                else:
                    raw = await _read_body(resp, limit, result)
                    result.ttft_provider_s = time.perf_counter() - started
                    (request.reader or api.parse)(raw, result, redact)
        except aiohttp.ClientError as exc:
            raise _Failed(_failure(exc, model, result, stream=request.stream), None) from None
        except ClientError as exc:  # a reply that cannot be read, found while parsing
            raise _Failed(_started(exc, result, request.stream), None) from None
        except (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError, OverflowError) as exc:
            # The shape checks in response.py should leave nothing to reach here; if a reply still
            # trips the reader, it is a bad response (one row), never a crashed run.
            during = "reading" if result.ttft_provider_s is not None else "sending the request for"
            raise _Failed(_started(retry.bad_response(f"{during} the reply failed: {type(exc).__name__}: "
                                                      f"{str(exc)[:200]}"), result, request.stream), None) from None
        finally:
            result.latency_s = time.perf_counter() - started
        split_think(result)
        if result.finish_reason == "length":
            result.truncated = True


def _failure(exc: BaseException, model: ModelConfig, result: CallResult, *, stream: bool) -> ClientError:
    """A failed try's exception as an error of `engine.client.retry`: the one place aiohttp's are mapped.

    Args:
        exc: An `aiohttp.ClientError` (refused, reset, closed early, a bad reply, a connect timeout) or the
            `TimeoutError` of the try's own limit.
        model: The model (its limits, named in the message).
        result: The try's result so far: once its reply has started, the failure is not retried.
        stream: The reply is a stream (what was cut is counted in characters of the answer).
    """
    if isinstance(exc, aiohttp.ConnectionTimeoutError):   # no connection within connect_timeout_s
        return retry.connect_timeout_error(model.connect_timeout_s)
    if isinstance(exc, TimeoutError) and not isinstance(exc, aiohttp.ClientError):
        return _started(retry.timeout_error(model.timeout_s), result, stream)
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


def _tool_keys(result: CallResult, request: PreparedRequest) -> CallResult:
    """The result with each tool call the model made under a tool's API name named by the tool's key."""
    if request.tool_keys and result.tool_calls:
        keys = request.tool_keys
        result.tool_calls = tuple(dataclasses.replace(c, name=keys[c.name]) if c.name in keys else c
                                  for c in result.tool_calls)
    return result


def _outcome(error: ClientError) -> Outcome:
    """What a failed try tells the window: refused (429), overloaded (503, 529, a timeout, a failed
    connection) or failed (anything else, which says nothing of the load)."""
    if error.status == 429:
        return "refused"
    if error.status in (503, 529) or error.kind in ("timeout", "connection"):
        return "overloaded"
    return "failed"


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


async def _read_at_most(resp: aiohttp.ClientResponse, size: int) -> bytes:
    """The first `size` bytes of a body (all of it when shorter)."""
    parts: list[bytes] = []
    got = 0
    while got < size and (chunk := await resp.content.read(size - got)):
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


async def _read_body(resp: aiohttp.ClientResponse, limit: int, result: CallResult) -> bytes:
    """A whole response body, refused as soon as it passes `limit` bytes (before any, by its Content-Length)."""
    length = resp.content_length
    if length is not None and length > limit:
        raise retry.too_large(limit)
    parts = []
    size = 0
    async for chunk in resp.content.iter_any():   # decoded (gzip, deflate) by aiohttp
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
