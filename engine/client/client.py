"""The model client: one prepared request called on its model, for every API the engine speaks.

One `ModelClient` wraps the run's aiohttp sessions (`engine.client.session`) for the whole run. `call` answers
from the response cache or makes the call's tries: each paced by the rate limit (`engine.client.ratelimit`) and
sent in its slots (`engine.client.window`) through `engine.client.transport`, a failed one retried as
`engine.client.retry` decides after one wait helper's delay. A call always returns a `CallResult`: a failed call
is a result with `error` set, never an exception, so the runner can write its row. What differs between APIs
(OpenAI chat and completions, Anthropic, Gemini) is the model's provider (`engine.client.providers`). API keys,
URL credentials (userinfo, query values of `base_url`) and proxy credentials are masked in everything a reply
brings back (`engine.redact`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

from engine.base.jsontext import dumps_compact
from engine.client import ratelimit, retry, transport
from engine.client.providers import method_url, provider
from engine.client.providers.batch import Batch, BatchAPI, BatchTarget
from engine.client.replicas import Replica, ReplicaSet
from engine.client.request import PreparedRequest
from engine.client.response import CallResult, tool_call
from engine.client.response_cache import ResponseCache, cache_key, keyed_url
from engine.client.session import Sessions, proxy_secrets
from engine.client.transport import BatchTransport, Failed, Limits, finish, parse_whole
from engine.client.window import Dispatch, Outcome, Unlimited, unless_stopped
from engine.errors import CallStopped, ClientError
from engine.model.model_config import ModelConfig
from engine.redact import Redactor, key_forms, mask_urls, url_secrets

__all__ = ["ModelClient"]

_UNLIMITED = Unlimited()


@dataclass(frozen=True)
class _Wire:
    """What every try to one model goes out with: its headers (the key where its provider puts it), the masking
    of its secrets and its limits."""

    headers: dict[str, str]
    redact: Redactor
    limits: Limits


@dataclass
class _Tries:
    """One call's tries so far: the pace they keep, what the retry rules count and what the results row records."""

    budget: ratelimit.Budget
    cost: int   # the request's tokens, as the rate limit counts them
    deadline: float   # monotonic seconds past which no wait for the rate limit goes
    stopping: asyncio.Event | None
    probe: bool | None   # this call finds out the limits (`Budget.probe`)
    retries: int = 0
    transient: int = 0   # retries of errors other than a rate limit: `max_retries` bounds them
    waits: int = 0   # waits after a rate limit or an overload: the deadline bounds them
    waited: float = 0.0
    limited: ClientError | None = None   # the last rate-limit answer, for the row if the deadline passes
    first_try: float | None = None   # a failed call's latency runs from its first try, waits included
    replica: Replica | None = None   # the replica of the last try sent


class ModelClient:
    """Calls the models of a run over its sessions, whatever their API.

    Args:
        sessions: The run's sessions (`Sessions(limit)` bounds the connections open at once).
        api_keys: model name -> API key, read from the env by the caller. Keys are put where the model's API
            reads them and nowhere else (never in results, errors or logs).
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
        self._api_keys = dict(api_keys)
        self._proxy_secrets = proxy_secrets()
        self._wires: dict[str, _Wire] = {}   # by model name, made on first use
        self.retrying = 0   # calls waiting out a retry delay now (the progress display shows it)
        self.rate_limited = 0   # calls paced now: waiting for the rate limit to let them go (shown too)
        # By endpoint and key (`ratelimit.budget_key`), then by model id; and by model name.
        self._budgets: dict[str, dict[str, ratelimit.Budget]] = {}
        self._groups: dict[str, list[ratelimit.Budget]] = {}
        self._budget_of: dict[str, ratelimit.Budget] = {}
        self._key_digests = {name: ratelimit.key_digest(key) for name, key in api_keys.items()}

    def replicas(self, model: ModelConfig) -> ReplicaSet | None:
        """The model's replica set (`base_urls`), made on first use; None for a single endpoint."""
        if not model.base_urls:
            return None
        found = self._replicas.get(model.name)
        if found is None:
            found = self._replicas[model.name] = ReplicaSet(
                model.base_urls, clock=self._clock)
        return found

    async def call(self, model: ModelConfig, request: PreparedRequest, *, cache_as: int | None = None,
                   dispatch: Dispatch | None = None, stoppable: bool = True,
                   via: Callable[[PreparedRequest], Awaitable[CallResult]] | None = None) -> CallResult:
        """Send one request, retrying as `retry.py` decides; each try is bounded by `timeout_s`.

        Args:
            model: The model config (timeout_s, connect_timeout_s, max_retries, name for the key).
            request: The prepared request.
            cache_as: The sample index to look the request up under in the response cache, and to
                store a successful reply under; None (the default) leaves the cache alone.
            dispatch: The slots each try waits for (`engine.client.window`); None: none.
            stoppable: Whether a stop of the run ends the call while it waits to be sent (False: a conversation's
                later turns, never cut mid-way).
            via: What answers the call in place of its tries: a batch model's batcher (`engine.run.batches`),
                whose answers `read_whole` reads; the response cache and the tools' names work as for a live call.

        Returns:
            The result; `error` is set when the call failed for good; `cached` when the cache answered.

        Raises:
            CallStopped: The run stopped before the call was sent (or between its tries).
        """
        answer = via or functools.partial(self._attempts, model, dispatch=dispatch or _UNLIMITED, stoppable=stoppable)
        if cache_as is None or self._cache is None:
            return _tool_keys(await answer(request), request)
        key = cache_key(keyed_url(model, request.url), request.body, cache_as)
        stored = self._cache.get(key)
        if stored is not None:
            return _tool_keys(stored, request)
        result = await answer(request)
        self._cache.put(key, request.url, model.model, result)   # successes only (`response_cache.storable`)
        return _tool_keys(result, request)

    def batch_api(self, model: ModelConfig) -> tuple[Batch, BatchAPI]:
        """The model's provider's batch method, and its batch API at the model's endpoint with the key where the
        live calls send it and the same masking.

        Raises:
            ValueError: The model's API has no batch method.
        """
        wire = provider(model.api).batch
        if wire is None:
            raise ValueError(f"api {model.api!r} has no batch method")
        live = self._wire(model)
        headers, key_query = live.headers, ""
        if model.api_key_header or model.api_key_query:
            _, headers = self._key_elsewhere(model, "", headers)
            key_query = self._key_query(model)
        target = BatchTarget(model.base_url or "", model, headers, live.redact, key_query)
        return wire, wire.open(BatchTransport(self._sessions, model), target)

    def read_whole(self, model: ModelConfig, request: PreparedRequest, body: bytes) -> CallResult:
        """A whole reply's body that came another way (a batch's answer) read as a live call's is: its size
        capped, the provider's reader, a leading `<think>` block moved to reasoning, a cut reply marked, secrets
        masked; a reply that cannot be read is the result's error."""
        result = CallResult()
        wire = self._wire(model)
        try:
            if len(body) > wire.limits.max_bytes:
                raise retry.too_large(wire.limits.max_bytes)
            parse_whole(body, result, request.reader or provider(request.api).parse, wire.redact)
        except ClientError as exc:
            result.error = exc
        finish(result)
        _mask_result(result, wire.redact)
        return result

    async def _attempts(self, model: ModelConfig, request: PreparedRequest, dispatch: Dispatch,
                        stoppable: bool) -> CallResult:
        """The call's tries, until one succeeds or the retry rules end it, and the waits between them."""
        stopping = self._stopping if stoppable else None
        payload = dumps_compact(request.body)
        wire = self._wire(model)
        budget = self._budget(model)
        tries = _Tries(budget, ratelimit.request_tokens(request.body), time.monotonic() + model.rate_limit_deadline_s,
                       stopping, budget.probe())
        if tries.probe is None:   # another call is finding out the limits: wait for its reply, at most one try's time
            await self._wait(model.timeout_s, stopping, until=budget.heard)
        result = CallResult()
        while True:
            failed = await self._try(model, request, payload, wire, dispatch, stoppable, tries, result)
            if failed is None:
                break
            delay = _retry_delay(model, failed, tries, result)
            if delay is None:
                break
            await self._wait(delay, stopping)
            result = CallResult()   # each try starts afresh
        result.retries = tries.retries
        result.rate_limit_wait_s = tries.waited
        if result.error is not None and tries.first_try is not None:
            result.latency_s = time.perf_counter() - tries.first_try   # every try and the waits between them
        if tries.replica is not None:
            result.served_by = tries.replica.shown
        _mask_result(result, wire.redact)
        return result

    async def _try(self, model: ModelConfig, request: PreparedRequest, payload: bytes, wire: _Wire,
                   dispatch: Dispatch, stoppable: bool, tries: _Tries, result: CallResult) -> Failed | None:
        """One try, paced and sent in its slots, read into `result`: its failure, or None when it succeeded or
        the pace would send it only past the deadline (`result.error` says so then).

        `timeout_s` bounds each try, as openai-python's timeout does; a try that runs out is retried like a
        connection error, so a call takes at most (max_retries + 1) tries besides its rate-limit waits.
        """
        failed: Failed | None = None
        async with dispatch.hold(stoppable) as held:   # the model's slot, held while the try is paced and sent
            try:
                ticket = await self._paced(tries.budget, tries.cost, tries.deadline, tries.stopping)
            except ratelimit.PastDeadline as past:
                result.error = retry.pacing_past_deadline(past.wait_s, model.rate_limit_deadline_s) \
                    if tries.limited is None else retry.past_deadline(tries.limited, model.rate_limit_deadline_s,
                                                                      past.wait_s)
                return None
            tries.waited += ticket.waited
            replicas = self.replicas(model) if model.base_urls else None
            replica = None
            if replicas is not None:   # each try picks again: a retry lands on another replica
                replica = tries.replica = replicas.acquire()
            if tries.first_try is None:
                tries.first_try = time.perf_counter()
            url = request.url if replica is None else method_url(replica.base, request.method)
            paced_by = ticket.owner   # `budget`, or the one that absorbed it meanwhile
            try:
                session = self._sessions.for_url(url)
                headers = wire.headers
                if model.api_key_header or model.api_key_query:
                    url, headers = self._key_elsewhere(model, url, headers)
                async with dispatch.send(held):   # the run's slot, held only while the try is in flight
                    await transport.send(session, url, headers, payload, api=provider(request.api),
                                         stream=request.stream, reader=request.reader, limits=wire.limits,
                                         result=result, redact=wire.redact,
                                         observe=functools.partial(paced_by.observe, ticket),
                                         written=functools.partial(paced_by.written, ticket))
            except Failed as caught:
                failed = caught
            finally:
                paced_by.returned(ticket)   # never written (stopped, no connection): its cost back
                if tries.probe:   # the first call's try is over, however it went: the calls held back may go
                    tries.budget.hear()
                    tries.probe = False
                if replica is not None and replicas is not None:
                    replicas.release(replica, failed=failed is not None and retry.replica_at_fault(failed.error))
                held.outcome = "ok" if failed is None else _outcome(failed.error)
                held.work = float(result.completion_tokens or 1)
                held.published_rate = paced_by.active().published_rate(tries.cost)   # the window may open to it
        return failed

    def _wire(self, model: ModelConfig) -> _Wire:
        """The model's headers, masking and limits, made on first use (its provider writes the headers)."""
        found = self._wires.get(model.name)
        if found is None:
            redact = Redactor([*self._keys, *self._proxy_secrets, *url_secrets(model.base_url),
                               *(s for u in model.base_urls for s in url_secrets(u))])
            limits = Limits(model.timeout_s, model.connect_timeout_s, max(1, int(model.max_response_mb * 2**20)))
            found = self._wires[model.name] = _Wire(provider(model.api).headers(self._api_keys.get(model.name)),
                                                    redact, limits)
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
            url += ("&" if "?" in url else "?") + self._key_query(model)
        return url, headers

    def _key_query(self, model: ModelConfig) -> str:
        """The key as the query parameter `api_key_query` names (`key=...`, percent-encoded), or ""."""
        key = self._api_keys.get(model.name)
        if not model.api_key_query or not key:
            return ""
        return quote(model.api_key_query, safe="") + "=" + quote(key, safe="")

    def _budget(self, model: ModelConfig) -> ratelimit.Budget:
        """The rate-limit budget of the model's calls: one per endpoint, key and model id (entries naming the same
        model there share it), or the one that absorbed it (`Budget.observe`)."""
        found = self._budget_of.get(model.name)
        if found is None:
            key = ratelimit.budget_key(model, self._key_digests.get(model.name, "-"))
            by_id = self._budgets.setdefault(key, {})
            found = by_id.get(model.model)
            if found is None:
                found = by_id[model.model] = ratelimit.Budget(group=self._groups.setdefault(key, []))
            found.declare(model.rate_limit)
            self._budget_of[model.name] = found
        return found.active()

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

    async def _wait(self, delay: float, stopping: asyncio.Event | None, *, until: asyncio.Event | None = None) -> None:
        """Wait `delay` seconds unless the run stops (`CallStopped`): a retry's delay, counted as retrying; or,
        given `until`, at most `delay` for it to be set (a call held back while another finds out the limits)."""
        if until is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await unless_stopped(until.wait(), stopping)
            return
        self.retrying += 1
        try:
            await unless_stopped(asyncio.sleep(delay), stopping)
        finally:
            self.retrying -= 1


def _retry_delay(model: ModelConfig, failed: Failed, tries: _Tries, result: CallResult) -> float | None:
    """The wait before the next try after `failed` (counted in `tries`), or None when the call ends with it
    (`result.error` set): a rate limit is waited out for as long as the deadline allows; another error is retried
    while it is retryable, at most `max_retries` times."""
    if retry.rate_limited(failed.error):
        delay = retry.rate_limit_delay(failed.headers, tries.waits)
        if time.monotonic() + delay > tries.deadline:
            result.error = retry.past_deadline(failed.error, model.rate_limit_deadline_s, delay)
            return None
        tries.limited = failed.error
        tries.waits += 1
        tries.waited += delay
    elif not failed.error.retryable or tries.transient >= model.max_retries:
        result.error = failed.error
        if failed.error.kind == "timeout":
            result.truncated = True
        return None
    else:
        delay = retry.retry_delay(failed.headers, tries.transient)
        tries.transient += 1
    tries.retries += 1
    return delay


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
