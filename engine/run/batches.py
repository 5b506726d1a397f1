"""Batched calls: a batch model's single-turn calls gathered into its provider's batches, sent, waited for, and
handed back one call at a time.

A runner's worker makes a batch model's call through the model's `Batcher` instead of sending it live (`call`):
the request joins the model's open batch and the worker waits for its answer, so everything after the call
(reading the reply, scoring, the row, the committer) is the runner's one path. A batch is sent once it holds
`batch.size` requests (or the provider's limits), once its first request has waited `batch.max_wait_s`, or as
soon as the model's jobs have run out. It is recorded in the journal with its row keys before it is sent, and
again with the provider's id before it is waited for: `engine run --resume` waits for the batches the journal
holds (`adopt`) instead of sending their requests again, whatever the model's entry says now; its other calls
follow the entry as it is (a model no longer batched sends them live: `takes`, `SendLive`). Each batch is polled
by one task at a pause that grows to a bound (`PollPlan`), or that the server asked for after a refusal: while
the provider works, the run holds that task and its workers' waiting calls and spends no CPU.

The crash window: a run killed after the provider accepted a batch and before its id reached the journal leaves
a batch recorded without an id, whose requests a resumed run does not send again (the provider may be answering
them, paid): each gets an error row (`batch_unknown`) saying so. A `submit` that failed before its create request
went out is retried; one that may have reached the server gives error rows saying that too. Stopping (`stop`):
batches already sent stay with the provider, recorded, for `--resume`; nothing is cancelled there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from engine.base.jsontext import dumps_compact
from engine.client.providers.batch import Batch, BatchAPI, BatchFailure, BatchOutcome, BatchReply, SubmitError
from engine.client.response import CallResult
from engine.errors import CallStopped, ClientError, SendLive, StorageError
from engine.model.model_config import BatchSettings, ModelConfig, cost_of
from engine.results.journal import BatchRecord
from engine.run.batch_waits import Waits

if TYPE_CHECKING:
    from engine.client.request import PreparedRequest
    from engine.results.journal import Journal
    from engine.run.run_config import PollPlan, RunStats

__all__ = ["MOST_WAITING", "BatchRun", "Batcher", "estimated_cost"]

#: The most calls of one model waiting in batches at once (each holds its test and request, a few KB): the first
#: batches of a large run go at once, and later calls join as answers come back.
MOST_WAITING = 20_000
#: How often a submit that failed before it reached the server is tried again, and reading an ended batch's results.
SUBMIT_TRIES = 4
RESULT_TRIES = 4
#: Characters of a request's body counted as one input token in the budget's estimate (an over-count for English).
CHARS_PER_TOKEN = 3


def estimated_cost(model: ModelConfig, request: PreparedRequest) -> float | None:
    """What a batched request may cost at most, for the budget before its answer comes: its body's characters
    over `CHARS_PER_TOKEN` as input tokens and its whole `max_tokens` as output, at the batch price; None when
    the model is unpriced."""
    prompt = len(dumps_compact(request.body)) // CHARS_PER_TOKEN + 1
    return cost_of(model, prompt, request.max_tokens, batch=True)


class _Answer(NamedTuple):
    """What a waiting call gets: the batch that held it (None: it never reached one) and its outcome."""

    batch_id: str | None
    outcome: BatchOutcome | ClientError


@dataclass(eq=False)
class _Gathered:
    """A call in the open batch: not sent yet."""

    key: str
    request: PreparedRequest
    answer: asyncio.Future[_Answer]
    estimate: float | None
    size: int


@dataclass(eq=False)
class _Held:
    """A batch the provider holds: the calls waiting for its answers, and answers no call has claimed yet."""

    record: BatchRecord
    waiting: dict[str, asyncio.Future[_Answer]] = field(default_factory=dict)
    arrived: dict[str, _Answer] = field(default_factory=dict)
    wanted: set[str] = field(default_factory=set)       # keys whose answer a call of this run may claim
    estimates: dict[str, float] = field(default_factory=dict)   # counted against the budget until answered
    rows: int = 0                                       # the rows it holds for this run (progress)
    again: set[str] = field(default_factory=set)        # keys sent again if this batch failed them (--retry-errors)


def _custom_id(key: str) -> str:
    """A request's custom id in its batch: a digest of its row key, the same in every batch that carries the row
    (what the provider's request log shows) and within every provider's rule (`batch.CUSTOM_ID`)."""
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class BatchRun:
    """What a run lends each of its batchers."""

    #: (model, request, reply body) -> the result, read as the live client reads a whole reply
    read: Callable[[ModelConfig, PreparedRequest, bytes], CallResult]
    write: Callable[[Callable[[Journal], None]], Awaitable[None]]   # makes a journal change durable (the committer)
    stats: RunStats                      # the run's counters (the batches and the rows they hold)
    changed: Callable[[], None]          # a batch was sent or ended (the progress display shows the batches)
    on_cost: Callable[[float], None]     # counts a cost against the budget (negative: an estimate given back)
    afford: Callable[[list[float | None]], int]   # a batch's estimates -> how many requests the budget lets go
    plan: PollPlan                       # the pause between polls, and before a failed batch call is tried again
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep   # tests pass one that records the waits


class Batcher:
    """One model's batches: calls gathered, sent, polled and answered.

    Args:
        model: The model (its name in the journal, its price for the budget).
        settings: Its `batch:` settings; None when its entry no longer says `batch:` but a stopped run recorded
            batches for it: those are collected (paid, never sent again), and nothing new is batched (`takes`).
        wire: Its provider's batch entry (limits, each request's size).
        api: Its provider's batch API at its endpoint.
        run: What the run lends it.
    """

    def __init__(self, model: ModelConfig, settings: BatchSettings | None, wire: Batch, api: BatchAPI,
                 run: BatchRun) -> None:
        self.model = model
        self._wire = wire
        self._api = api
        self._run = run
        self._waits = Waits(run.plan, model.rate_limit_deadline_s, run.sleep)
        self._batching = settings is not None
        settings = settings or BatchSettings()
        self._most = max(1, min(settings.size, wire.limits.max_requests))
        self._max_wait_s = settings.max_wait_s
        self._open: list[_Gathered] = []
        self._open_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._watching: set[asyncio.Task[None]] = set()
        self._held: dict[str, _Held | ClientError] = {}   # a resumed run's keys: their batch, or why it is unknown
        self._helds: list[_Held] = []
        self._intake_closed = False
        self._no_more = False            # nothing more is sent (a stop of either kind)
        self._stopped = self._waits.stopped  # nothing more is waited for (the first Ctrl-C)

    # -- the worker's side ---------------------------------------------------------------------------------------

    def takes(self, key: str, opted_in: bool = True) -> bool:
        """Whether the call `key` goes through this batcher: a batch a stopped run sent holds it, or the model's
        entry says `batch:` now and `opted_in` (a judge's own entry does, not `--batch`); else it goes live."""
        return key in self._held or (opted_in and self._batching)

    async def call(self, key: str, request: PreparedRequest) -> CallResult:
        """The answer to `request` (the row `key`'s call) through a batch: one already holding it (a resumed run),
        else the model's open batch.

        Raises:
            CallStopped: The run stopped before the batch was sent, or stopped waiting for it.
            SendLive: It is to be sent again and the model is no longer batched.
        """
        held = self._held.pop(key, None)
        if self._stopped.is_set() or (self._no_more and held is None):
            raise CallStopped("the run stopped before this call was sent")
        if isinstance(held, ClientError):
            answer = _Answer(None, held)
        elif held is not None:
            answer = await self._claim(held, key)
            if key in held.again and not isinstance(answer.outcome, BatchReply):
                answer = await self._gather(key, request)   # its last batch failed it as well: unpaid, sent again
        else:
            answer = await self._gather(key, request)
        if isinstance(answer.outcome, BatchReply):
            result = self._run.read(self.model, request, answer.outcome.body)
        elif isinstance(answer.outcome, BatchFailure):
            result = CallResult(error=answer.outcome.error())
        else:
            result = CallResult(error=answer.outcome)
        result.batch_id = answer.batch_id
        return result

    async def _claim(self, held: _Held, key: str) -> _Answer:
        found = held.arrived.pop(key, None)
        if found is not None:
            return found
        waiting: asyncio.Future[_Answer] = asyncio.get_running_loop().create_future()
        held.waiting[key] = waiting
        return await waiting

    async def _gather(self, key: str, request: PreparedRequest) -> _Answer:
        if self._no_more:
            raise CallStopped("the run stopped before this call was sent")
        if not self._batching:
            raise SendLive(key)
        loop = asyncio.get_running_loop()
        gathered = _Gathered(key, request, loop.create_future(), estimated_cost(self.model, request),
                             self._wire.size(_custom_id(key), request.body))
        if self._open and self._open_bytes + gathered.size > self._wire.limits.max_bytes:
            self._send_open()
        self._open.append(gathered)
        self._open_bytes += gathered.size
        self._run.stats.batch_rows_gathered += 1
        if len(self._open) >= self._most:
            self._send_open()
        elif self._intake_closed:
            loop.call_soon(self._send_open)   # a straggler after the jobs ran out: goes with any others at once
        elif self._timer is None:
            self._timer = loop.call_later(self._max_wait_s, self._send_open)
        try:
            return await gathered.answer
        except asyncio.CancelledError:
            if gathered in self._open:   # not sent: leave no request behind for a call nobody waits for
                self._open.remove(gathered)
                self._open_bytes -= gathered.size
                self._run.stats.batch_rows_gathered -= 1
            raise

    def close_intake(self) -> None:
        """The model's jobs ran out: send the open batch now, and any call gathered from now on at once."""
        self._intake_closed = True
        self._send_open()

    # -- sending ---------------------------------------------------------------------------------------------------

    def _send_open(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._open:
            return
        gathered, self._open, self._open_bytes = self._open, [], 0
        self._run.stats.batch_rows_gathered -= len(gathered)
        task = asyncio.get_running_loop().create_task(self._send(gathered))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, gathered: list[_Gathered]) -> None:
        """Record the batch, send it, record its id, then watch it: each step durable before the next."""
        gathered = [g for g in gathered if not g.answer.done()]
        if self._no_more:
            _stop_all(gathered)
            return
        try:
            await self._send_batch(gathered)
        except Exception as exc:  # noqa: BLE001 - a bug: every call of the batch gets an error row, none hangs
            error = ClientError(f"the batch could not be sent: {type(exc).__name__}: {exc}"[:500], kind="batch_failed")
            for g in gathered:
                _settle(g.answer, _Answer(None, error))

    async def _send_batch(self, gathered: list[_Gathered]) -> None:
        fit = self._run.afford([g.estimate for g in gathered])
        _stop_all(gathered[fit:])   # past the budget: not sent, no row (`--resume` sends them)
        gathered = gathered[:fit]
        if not gathered:
            return
        estimates = {g.key: g.estimate for g in gathered if g.estimate is not None}
        if estimates:   # counted now, before any wait: a batch sent at the same time counts this one
            self._run.on_cost(sum(estimates.values()))
        record = await self._record_and_submit(gathered)
        if record is None:   # not sent, or not known to be: nothing is answered at the batch price
            if estimates:
                self._run.on_cost(-sum(estimates.values()))
            return
        self._watch(_Held(record, waiting={g.key: g.answer for g in gathered}, wanted=set(record.keys),
                          estimates=estimates, rows=len(gathered)))

    async def _record_and_submit(self, gathered: list[_Gathered]) -> BatchRecord | None:
        """The batch recorded with its keys, sent, and recorded with its id: that record, or None when it was not
        sent (each call then has its answer: stopped, or the failure as its error)."""
        record = BatchRecord(secrets.token_hex(8), self.model.name, None, tuple(g.key for g in gathered), _now_iso())
        try:
            await self._run.write(_recording(record))
        except StorageError:
            _stop_all(gathered)   # the run stops on the failed write: nothing was sent
            return None
        try:
            batch_id = await self._submit([(_custom_id(g.key), g.request.body) for g in gathered])
        except SubmitError as exc:
            reason = (" The provider may have accepted it although no id came back: look for it in the "
                      "provider's list of batches before sending these again with --retry-errors."
                      if exc.sent else "")
            error = ClientError(f"the batch could not be sent: {exc}{reason}", kind=exc.kind, status=exc.status,
                                retryable=not exc.sent)
            for g in gathered:
                _settle(g.answer, _Answer(None, error))
            return None
        record = dataclasses.replace(record, batch_id=batch_id)
        try:
            await self._run.write(_recording(record))
        except StorageError:
            _stop_all(gathered)   # recorded without an id: a resumed run says so for each of its rows
            return None
        return record

    async def _submit(self, requests: list[tuple[str, Mapping[str, Any]]]) -> str:
        """The batch sent; a failure that reached no server is tried again after a pause (`SUBMIT_TRIES`)."""
        pauses = self._waits.pauses()
        for attempt in range(1, SUBMIT_TRIES + 1):
            try:
                return await self._api.submit(requests)
            except SubmitError as exc:
                if exc.sent or not exc.retryable or attempt == SUBMIT_TRIES or self._no_more:
                    raise
                pause = self._waits.after(exc, next(pauses))
            await self._waits.pause(pause)
        raise AssertionError("unreachable")

    # -- waiting -------------------------------------------------------------------------------------------------

    def adopt(self, records: list[BatchRecord], done: set[str], retried: set[str] | None) -> None:
        """Take over this model's batches a stopped run recorded (`--resume`), each key from the last batch that
        holds it: its call is answered from that batch (polled, never sent again) unless the key has a row
        (`done`), or only an error row that `--retry-errors` sends again (`retried`; None without it). Under
        `--retry-errors` a key takes its last batch's answer when it is one, and is sent again when that batch
        failed it (a failure is not paid): a judge's call too, whose key is no row's. A batch recorded without an
        id answers each of its keys without a row with a `batch_unknown` error."""
        mine = [record for record in records if record.model == self.model.name]
        last = {key: record for record in mine for key in record.keys}
        for record in mine:
            known = record.batch_id is not None
            wanted = [key for key in record.keys
                      if last[key] is record and (key not in done or (known and retried and key in retried))]
            if not wanted:
                continue
            if not known:
                unknown = ClientError(
                    "this call was in a batch being sent when the run was stopped, before the provider's id for it "
                    "reached the journal: the provider may be answering it (paid), so it was not sent again. "
                    "Look in the provider's list of batches, then send it again with engine run --resume RUN "
                    "--retry-errors", kind="batch_unknown", retryable=False)
                for key in wanted:
                    self._held[key] = unknown
                continue
            again = set(wanted) if retried is not None else set()   # --retry-errors: what its batch failed, again
            held = _Held(record, wanted=set(wanted), rows=len(wanted), again=again)
            for key in wanted:
                self._held[key] = held
            self._watch(held)

    def _watch(self, held: _Held) -> None:
        """Count the batch as in progress and start its poll (unless the run stopped waiting)."""
        self._helds.append(held)
        self._run.stats.batches_submitted += 1
        self._run.stats.batch_rows_held += held.rows
        self._run.changed()
        if self._stopped.is_set():
            self._stop_waiting(held)
            return
        task = asyncio.get_running_loop().create_task(self._wait_for(held))
        self._watching.add(task)
        task.add_done_callback(self._watching.discard)

    async def _wait_for(self, held: _Held) -> None:
        """Poll the batch until it ends, then hand each answer to its call."""
        batch_id = held.record.batch_id
        assert batch_id is not None
        try:
            await self._collect(held, batch_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug: its calls get error rows, none hangs
            self._fail(held, ClientError(f"batch {batch_id}: {type(exc).__name__}: {exc}"[:500], kind="batch_failed"))
        if not self._stopped.is_set():
            self._fail(held, ClientError(f"batch {batch_id} ended without an answer for this request",
                                         kind="batch_failed"))
            self._run.stats.batches_done += 1
            self._run.stats.batch_rows_held -= held.rows
            self._run.changed()

    async def _collect(self, held: _Held, batch_id: str) -> None:
        pauses = self._waits.pauses()
        while True:
            try:
                status = await self._api.poll(batch_id)
            except ClientError as exc:
                if not exc.retryable:
                    self._fail(held, ClientError(f"batch {batch_id} could not be polled: {exc}", kind="batch_failed",
                                                 status=exc.status))
                    return
                pause = self._waits.after(exc, next(pauses))
            else:
                if status.ended:
                    break
                pause = next(pauses)
            if not await self._waits.pause(pause):
                return
        index = {_custom_id(key): key for key in held.record.keys}
        for attempt in range(1, RESULT_TRIES + 1):
            custom_ids = [c for c, key in index.items() if key in held.wanted]   # those not answered yet
            try:
                async for custom_id, outcome in self._api.results(status, custom_ids):
                    key = index.get(custom_id)
                    if key is not None:
                        self._answer(held, key, _Answer(batch_id, outcome))
                return
            except ClientError as exc:
                if not exc.retryable or attempt == RESULT_TRIES:
                    self._fail(held, ClientError(f"the results of batch {batch_id} could not be read: {exc}",
                                                 kind="batch_failed", status=exc.status))
                    return
                pause = self._waits.after(exc, next(pauses))
            if not await self._waits.pause(pause):
                return

    def _answer(self, held: _Held, key: str, answer: _Answer) -> None:
        """Hand an answer to its call, or keep it until the call comes (a resumed run's workers come in turn)."""
        if key not in held.wanted:
            return
        held.wanted.discard(key)
        estimate = held.estimates.pop(key, None)
        if estimate is not None:
            self._run.on_cost(-estimate)   # the row counts its real cost
        waiting = held.waiting.pop(key, None)
        if waiting is not None:
            _settle(waiting, answer)
        else:
            held.arrived[key] = answer

    def _fail(self, held: _Held, error: ClientError) -> None:
        for key in list(held.wanted):
            self._answer(held, key, _Answer(held.record.batch_id, error))

    # -- stopping ------------------------------------------------------------------------------------------------

    def stop(self, *, waiting: bool) -> None:
        """Send nothing more: calls gathered but not sent end without a row (`--resume` sends them). With `waiting`
        False (the first Ctrl-C) stop waiting too: every waiting call ends without a row and the batches sent stay
        with the provider, recorded for `--resume`; with True (the budget) the batches sent are still waited for."""
        self._no_more = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        _stop_all(self._open)
        self._run.stats.batch_rows_gathered -= len(self._open)
        self._open.clear()
        self._open_bytes = 0
        if waiting:
            return
        self._stopped.set()
        for held in self._helds:
            self._stop_waiting(held)
        for task in list(self._watching):
            task.cancel()

    def _stop_waiting(self, held: _Held) -> None:
        for answer in held.waiting.values():
            if not answer.done():
                answer.set_exception(CallStopped("the run stopped waiting for this call's batch (--resume collects "
                                                 "it)"))
        held.waiting.clear()

    async def aclose(self) -> None:
        """Let every batch being sent reach the journal with its id (never cut between the provider's acceptance
        and the record), then stop the polls."""
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        for task in list(self._watching):
            task.cancel()
        await asyncio.gather(*self._watching, return_exceptions=True)

    @property
    def waiting(self) -> bool:
        """Whether a batch is still being sent or waited for."""
        return bool(self._sending or self._watching)


def _recording(record: BatchRecord) -> Callable[[Journal], None]:
    """The journal change that records `record`."""
    def put(journal: Journal) -> None:
        journal.put_batch(record)
    return put


def _stop_all(gathered: list[_Gathered]) -> None:
    for g in gathered:
        if not g.answer.done():
            g.answer.set_exception(CallStopped("the run stopped before this call's batch was sent"))


def _settle(waiting: asyncio.Future[_Answer], answer: _Answer) -> None:
    if not waiting.done():
        waiting.set_result(answer)


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

