"""The runner: per-model worker pools, the slots every model call waits for, scoring, and durable rows.

Each model's calls go through its own adaptive window (`engine.client.window.Window`: it starts at one call in
flight and finds how many the server or the rate limit lets go at once, never above the model's
`concurrency:`), then through the run's `--concurrency` slots, if given (`_RunDispatch`). A try waiting for the
rate limit holds only its model's window slot, never one of the run's, so a limited model never holds slots
another model could use. Workers pull from the model's lazy job iterator: a model starts with a few and gains a
worker each time its window grows (`_Lane`), so no coroutine exists per job (100k jobs start at once and memory
stays flat). Agent conversations get a fixed number of workers instead (the model's `concurrency`, else
`CONVERSATIONS`): a conversation holds a window slot only for each model call, not across its tool delays.
The worker scores its answer where each check belongs (engine.evaluators.scoring: bounded checks on a short
answer inline, a judge awaited, exec checks in a thread, every other check in a scoring process under its time
limit, `ScoringPool`), builds the row, hands it to the committer and counts its cost. The committer
(engine.results.committer) is a thread: it makes the rows durable every `commit_interval_s` or `commit_rows`
rows and flushes a Parquet part every `rows_per_part` committed rows, so the event loop that reads the replies
(and stamps their first token) neither scores nor writes; a row counts as done (progress, summary) only once
committed.

Stopping: `stop()` (first Ctrl-C, or the `--max-cost` budget) ends dispatch: calls still waiting to be sent
(for the rate limit, a slot or a retry's delay) end at once without a row (`CallStopped`; `--resume` sends
them), calls in flight finish (and are scored, each check within its time limit); `cancel()` (second Ctrl-C,
SIGTERM) cancels those too and kills the scoring processes - a cancelled call writes no row, so `--resume` runs
it again, while an answer that had arrived keeps its row, marked not scored (`STOPPED`; `engine rescore` scores
it). A failed journal or part write (`StorageError`: disk full, I/O error) stops spending at once: dispatch
ends, calls in flight are cancelled, and `run` raises it; what was committed before stays.

A batch model's single-turn calls (and a batched judge's) go through its `Batcher` (engine/run/batches.py): a
worker waits there for its answer, so such a lane has a worker per waiting call, and all after the call is the same.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from engine.agent.mcp.servers import McpServers
from engine.base.hosts import is_loopback_url
from engine.client.client import ModelClient
from engine.client.request import PreparedRequest, prepare, temperature_of
from engine.client.response import CallResult
from engine.client.response_cache import use_cache
from engine.client.session import Sessions
from engine.client.window import Dispatch, Held, Window, unless_stopped
from engine.errors import CallStopped, ClientError, SendLive, StorageError
from engine.evaluators.scoring import context
from engine.evaluators.scoring_pool import STOPPED, ScoringPool
from engine.judge.cache import JudgeCache, default_path
from engine.judge.caller import JudgeRun, ModelJudgeCaller
from engine.local.registry import GOLDEN
from engine.model.answer import Answer
from engine.model.model_config import BatchSettings, ModelConfig, ceiling_of
from engine.model.scoring import Record, ScoringContext
from engine.model.test import Test
from engine.model.verdict import Verdict
from engine.results.committer import Committer
from engine.results.rows import build_row, record_of, set_verdict
from engine.run.batches import MOST_WAITING, Batcher, BatchRun
from engine.run.conversation import golden_reply, run_agent_job
from engine.run.jobs import Job, attempts
from engine.run.run_config import ModelStats, RowSummary, RunConfig, RunStats
from engine.suite.content_parts import ImageUnavailable

__all__ = ["SPARE_WORKERS", "ModelStats", "RunConfig", "RunStats", "Runner"]

if TYPE_CHECKING:
    from engine.results.journal import BatchRecord, Journal
    from engine.results.writer import ResultsWriter
    from engine.run.until_decided import DecisionGate

class Scored(NamedTuple):
    """An answer's verdict (None: the call failed, or scoring crashed) and the row's evaluator error."""

    verdict: Verdict | None
    error: str | None


class _Call(NamedTuple):
    """A call made: the request as sent, its result, and when it started (microseconds since the epoch)."""

    request: PreparedRequest
    result: CallResult
    started_us: int


_NOT_SCORED = Scored(None, None)


def _answer(result: CallResult) -> Answer:
    """What the evaluators see of a successful reply."""
    return Answer(text=result.text, tool_calls=result.tool_calls, finish_reason=result.finish_reason,
                  reasoning=result.reasoning)


def _crashed(exc: BaseException) -> str:
    return f"the evaluator crashed: {type(exc).__name__}: {exc}"[:500]


def _outcome(verdict: Verdict) -> Scored:
    """The verdict, with its reason as the row's evaluator error when the evaluator could not judge."""
    return Scored(verdict, verdict.reason if verdict.error else None)


# Conversations at once for a model whose entry sets no `concurrency`: a server on this machine serves a few at a
# time; a hosted API's conversations mostly wait for their tools.
CONVERSATIONS = {"local": 8, "hosted": 64}
SPARE_WORKERS = 2   # workers beyond a window's slots: scoring and building rows while the window stays full


class _RunDispatch:
    """One model's tries under the run's caps: its window, then (as the try is sent) the cluster-wide cap of
    `--ray`, if any, and the run's `--concurrency` slots, if given; counted in flight while sent."""

    def __init__(self, window: Window, shared: AbstractAsyncContextManager[Any] | None,
                 run_slots: asyncio.Semaphore | None, stopping: asyncio.Event, count: Callable[[int], None]) -> None:
        self.window = window
        self._shared = shared
        self._run_slots = run_slots
        self._stopping = stopping
        self._count = count

    def hold(self, stoppable: bool = True) -> AbstractAsyncContextManager[Held]:
        return self.window.hold(stoppable)

    @asynccontextmanager
    async def send(self, held: Held) -> AsyncIterator[None]:
        stopping = self._stopping if held.stoppable else None
        async with AsyncExitStack() as stack:
            if self._shared is not None:
                await unless_stopped(stack.enter_async_context(self._shared), stopping)
            if self._run_slots is not None:
                await unless_stopped(self._run_slots.acquire(), stopping)
                stack.callback(self._run_slots.release)
            await stack.enter_async_context(self.window.send(held))
            self._count(1)
            stack.callback(self._count, -1)
            yield


class _Lane:
    """One model's jobs and the workers that take them."""

    def __init__(self, model: ModelConfig, jobs: Iterator[Job], dispatch: _RunDispatch) -> None:
        self.model = model
        self.jobs = jobs
        self.dispatch = dispatch
        self.workers = 0
        self.conversations = False   # its workers hold conversations: a fixed number of them
        self.exhausted = False
        self.batcher: Batcher | None = None   # its single-turn calls go through the provider's batch API


class Runner:
    """Runs jobs and records their rows.

    Args:
        config: The run configuration.
        journal: The open journal (rows are added and committed here).
        writer: The Parquet writer (parts flushed as rows accumulate).
        on_progress: Called after each commit with the stats.
        gate: `--until-decided`: consulted before each dispatch and told of each row (engine/run/until_decided.py).
    """

    def __init__(self, config: RunConfig, journal: Journal, writer: ResultsWriter,
                 on_progress: Callable[[RunStats], None] | None = None, gate: DecisionGate | None = None) -> None:
        self.config = config
        self.journal = journal
        self.writer = writer
        self.on_progress = on_progress
        self.stats = RunStats()
        self._stopping = False
        self._workers: list[asyncio.Task[None]] = []
        self._committer: Committer | None = None
        self._pool = ScoringPool()
        self._client: ModelClient | None = None
        self._storage_error: StorageError | None = None
        self._judge: ModelJudgeCaller | None = None
        self._gate = gate
        self._mcp = McpServers()   # the run's `scope: run` MCP servers, stopped when the run ends
        self._stopping_event: asyncio.Event | None = None   # made in the run's loop: calls not yet sent end
        self._run_slots: asyncio.Semaphore | None = None
        self._dispatches: dict[str, _RunDispatch] = {}
        self._lanes: list[_Lane] = []
        self._window_peak = 0   # the most workers one model's window asked for (the gate's lookahead)
        self._batchers: dict[str, Batcher] = {}

    def stop(self, reason: str = "interrupted") -> None:
        """Stop dispatching: calls waiting to be sent end without a row; calls in flight finish and are recorded."""
        if not self._stopping:
            self._stopping = True
            self.stats.stopped = reason
            if self._stopping_event is not None:
                self._stopping_event.set()
            if self._gate is not None:   # workers waiting at the gate end too
                self._gate.close()
        for batcher in self._batchers.values():   # Ctrl-C stops waiting for the batches sent; the budget does not
            batcher.stop(waiting=reason != "interrupted")

    def cancel(self) -> None:
        """Cancel calls in flight too (their rows are not written; resume runs them) and their scoring (an
        answer that had arrived keeps its row, marked not scored)."""
        self.stop()
        for batcher in self._batchers.values():
            batcher.stop(waiting=False)
        for task in self._workers:
            task.cancel()
        self._pool.close()

    async def run(self, jobs_by_model: dict[str, tuple[ModelConfig, Iterator[Job]]], total: int,
                  api_keys: dict[str, str | None]) -> RunStats:
        """Run every job; return the stats once all rows are committed and flushed.

        Args:
            jobs_by_model: model name -> (model, its lazy job iterator).
            total: The number of jobs (for progress).
            api_keys: model name -> API key (or None).
        """
        self.stats.total = total
        self.stats.by_model = {name: ModelStats() for name in jobs_by_model}
        self._stopping_event = asyncio.Event()
        if self._stopping:
            self._stopping_event.set()
        self._run_slots = asyncio.Semaphore(self.config.concurrency) if self.config.concurrency else None
        recorded = self.journal.batches()   # a stopped run's batches, read before the committer writes
        committer = self._committer = Committer(
            self.journal, self.writer, asyncio.get_running_loop(), self._committed, self._write_failed,
            interval_s=self.config.commit_interval_s, rows=self.config.commit_rows)
        try:
            async with Sessions(self.config.concurrency) as sessions:
                client = self._client = ModelClient(sessions, api_keys, self.config.response_cache,
                                                     stopping=self._stopping_event)
                cache = None
                if self.config.judges is not None:
                    cache = JudgeCache(self.config.judge_cache or default_path())
                    self._judge = ModelJudgeCaller(self.config.judges, cache, client, run=JudgeRun(
                        self._dispatch, self._spend, self._judged_in_batches))
                judges = list(self.config.judges.models.values()) if self.config.judges is not None else []
                for model in [model for model, _ in jobs_by_model.values()] + judges:
                    # A model, tested or judge (sharing its name's batcher), collects the batches a stopped run
                    # recorded for it even if no longer batched (paid: never sent twice), else follows its entry now.
                    settings = model.batch if isinstance(model.batch, BatchSettings) else None
                    if model.name not in self._batchers and (settings or any(r.model == model.name for r in recorded)):
                        self._batchers[model.name] = self._batcher(client, model, settings, committer, recorded)
                for model, jobs in jobs_by_model.values():
                    self._start(client, model, jobs)
                try:
                    while pending := [task for task in self._workers if not task.done()]:
                        await asyncio.wait(pending)   # workers started meanwhile are waited for next
                finally:
                    for batcher in self._batchers.values():   # a batch being sent reaches the journal with its id
                        await batcher.aclose()
                    await self._mcp.aclose()
                    if cache is not None:
                        cache.close()
                for task in self._workers:
                    outcome = None if task.cancelled() else task.exception()
                    if outcome is not None:
                        raise outcome
        finally:
            self._pool.close()
            committer.close()
            await asyncio.sleep(0)   # its last `on_commit`, queued as it ended
            if not committer.failed:
                self.writer.flush()
        if self._storage_error is not None:
            raise self._storage_error
        return self.stats

    def _batcher(self, client: ModelClient, model: ModelConfig, settings: BatchSettings | None, committer: Committer,
                 recorded: list[BatchRecord]) -> Batcher:
        """The model's batcher, holding the batches a stopped run recorded for it."""
        wire, api = client.batch_api(model)
        batcher = Batcher(model, settings, wire, api, BatchRun(client.read_whole, committer.write, self.stats,
                                                               self._show, self._spend, self._affordable,
                                                               self.config.batch_poll))
        if any(record.model == model.name for record in recorded):
            retried = self.journal.keys(errors_only=True) if self.journal.replace_errors else None
            batcher.adopt(recorded, self.journal.keys(), retried)
        return batcher

    def _judged_in_batches(self, judge: ModelConfig,
                           key: str) -> Callable[[PreparedRequest], Awaitable[CallResult]] | None:
        """The judge call `key` through batches: a recorded batch holds it, or the judge's entry says `batch:`."""
        batcher, opted_in = self._batchers.get(judge.name), isinstance(judge.batch, BatchSettings)   # not --batch
        return None if batcher is None or not batcher.takes(key, opted_in) else functools.partial(batcher.call, key)

    def _dispatch(self, model: ModelConfig) -> _RunDispatch:
        """The slots of `model`'s tries (its window, made on first use; judges share it with a model of the same
        name)."""
        found = self._dispatches.get(model.name)
        if found is None:
            assert self._stopping_event is not None, "made in run()"
            ceiling = min(ceiling_of(model), self.config.concurrency or ceiling_of(model))
            # An embedded model's server was started with `concurrency` slots: its window starts full.
            window = Window(ceiling, start=ceiling if model.builtin is not None else 1,
                            on_grow=functools.partial(self._grown, model.name), stopping=self._stopping_event)
            shared = self.config.model_slots(model.name) if self.config.model_slots is not None else None
            found = self._dispatches[model.name] = _RunDispatch(window, shared, self._run_slots,
                                                                self._stopping_event, self._count_in_flight)
        return found

    def _start(self, client: ModelClient, model: ModelConfig, jobs: Iterator[Job]) -> None:
        """Start the model's first workers: one per conversation for agent jobs, else enough to fill its
        window (more join as it grows)."""
        dispatch = self._dispatch(model)
        local = model.builtin is not None or is_loopback_url(model.base_url)
        conversations = model.concurrency if model.concurrency is not None else \
            CONVERSATIONS["local" if local else "hosted"]
        batcher = self._batchers.get(model.name)
        most = max(MOST_WAITING, model.batch.size) if isinstance(model.batch, BatchSettings) else MOST_WAITING
        first = list(itertools.islice(jobs, most if batcher is not None else max(1, conversations)))
        lane = _Lane(model, itertools.chain(first, jobs), dispatch)
        self._lanes.append(lane)
        if batcher is not None:   # a worker per call a batch may hold (its agent jobs go live among them)
            lane.batcher = batcher
            if len(first) < most:   # every job has its worker: the last batch goes once they have all joined
                batcher.close_intake()
            for _ in first:
                self._add_worker(client, lane)
            return
        lane.conversations = any(job.test.agent is not None for job in first)
        if lane.conversations:   # each holds a slot per model call only: as many calls may go as conversations
            dispatch.window.begin_at(len(first))
        # No more workers than jobs: a model with one test starts one.
        wanted = len(first) if lane.conversations else min(len(first), self._workers_for(dispatch.window.slots()))
        for _ in range(wanted):
            self._add_worker(client, lane)

    def _workers_for(self, slots: int) -> int:
        """Workers that keep `slots` calls in flight while others score and build rows; under `--concurrency`
        no more than it allows (`--concurrency 1`: one test at a time, in order)."""
        if self.config.concurrency is not None:
            return min(slots, self.config.concurrency) + (SPARE_WORKERS if self.config.concurrency > 1 else 0)
        return slots + SPARE_WORKERS

    def _grown(self, name: str, size: int) -> None:
        """A model's window grew to `size`: start workers to fill it (unless its jobs ran out)."""
        assert self._client is not None
        for lane in self._lanes:
            if lane.model.name != name or lane.conversations or lane.batcher or lane.exhausted or self._stopping:
                continue
            while lane.workers < self._workers_for(size):
                self._add_worker(self._client, lane)
        if self._gate is not None and size > self._window_peak:
            self._window_peak = size
            self._gate.widen(self._workers_for(size))

    def _add_worker(self, client: ModelClient, lane: _Lane) -> None:
        lane.workers += 1
        self._workers.append(asyncio.create_task(self._worker(client, lane)))

    async def _worker(self, client: ModelClient, lane: _Lane) -> None:
        settings = self.config.settings
        model, dispatch = lane.model, lane.dispatch
        try:
            for job in lane.jobs:
                if self._stopping:
                    return
                if self._gate is not None and not await self._gate.admit(job):
                    continue   # `--until-decided` has no use for it (engine/run/until_decided.py)
                if job.test.agent is not None:
                    try:
                        row = await run_agent_job(
                            client=client, model=model, test=job.test, attempt=job.attempt,
                            run_id=self.config.run_id, settings=settings, dispatch=dispatch, on_cost=self._spend,
                            caller=self._judge,
                            cache_as=self._cache_as(model, job, temperature_of(model, job.test, settings)),
                            score=self._score_answer, mcp=self._mcp)
                    except CallStopped:
                        return   # stopped before its first call was sent: no row, `--resume` runs it
                    self._record(job, row, spent=True)   # its cost was counted reply by reply
                    continue
                call = await self._call(client, model, job, dispatch, lane.batcher)
                if call is None:
                    return   # stopped before it was sent
                row = build_row(run_id=self.config.run_id, model=model, test=job.test, attempt=job.attempt,
                                request=call.request, result=call.result, verdict=None, evaluator_error=None,
                                started_us=call.started_us, ended_us=time.time_ns() // 1000)
                try:
                    scored = await self._scored(job.test, call.result, record_of(row))
                except asyncio.CancelledError:
                    set_verdict(row, None, STOPPED)   # the answer arrived (and was paid): its row is kept
                    self._record(job, row)
                    raise
                set_verdict(row, scored.verdict, scored.error)
                self._record(job, row)
            lane.exhausted = True
            if lane.batcher is not None:   # no call will join the open batch: send it now
                lane.batcher.close_intake()
        except Exception:
            self._stopping = True   # a bug (a row that cannot be built): no more calls lost the same way
            raise

    async def _call(self, client: ModelClient, model: ModelConfig, job: Job, dispatch: Dispatch,
                    batcher: Batcher | None = None) -> _Call | None:
        """Make the job's call through its slots, or its model's `batcher` when that takes it (answered whole, not
        streamed); None when the run stopped before it was sent (or, batched, stopped waiting for it)."""
        batcher = batcher if batcher is not None and batcher.takes(job.key) else None   # else live, as the entry says
        settings = self.config.settings if batcher is None else dataclasses.replace(self.config.settings, stream=False)
        try:
            request = prepare(model, job.test, settings, attempt=job.attempt)
        except ImageUnavailable as exc:   # deleted or edited since load: an error row, nothing sent
            request = prepare(model, job.test, settings, inline_images=False, attempt=job.attempt)
            return _Call(request, CallResult(error=ClientError(str(exc), kind="image")), time.time_ns() // 1000)
        started_us = time.time_ns() // 1000
        if model.builtin == GOLDEN:   # the scripted model: its golden, in-process
            return _Call(request, golden_reply(model, job.test), started_us)
        try:
            result = await client.call(model, request, cache_as=self._cache_as(model, job, request.temperature),
                                       dispatch=dispatch,
                                       via=None if batcher is None else functools.partial(batcher.call, job.key))
        except CallStopped:
            return None
        except SendLive:   # a batch failed it, and the model is no longer batched: live, as its entry says now
            return await self._call(client, model, job, dispatch)
        return _Call(request, result, started_us)

    async def _scored(self, test: Test, result: CallResult, record: Record) -> Scored:
        """The answer scored with the row's record (`_score_answer`); nothing for a failed call."""
        if result.error is not None:
            return _NOT_SCORED
        return await self._score_answer(test, _answer(result), context(test, caller=self._judge, record=record))

    async def _score_answer(self, test: Test, answer: Answer, ctx: ScoringContext) -> Scored:
        """The answer scored where each check belongs: a tree of bounded checks on a short answer inline, any
        other in the run's `ScoringPool` (threads, scoring processes) or awaited (a judge)."""
        try:
            return _outcome(await self._pool.score(test, answer, ctx))
        except Exception as exc:  # noqa: BLE001 - scoring promises never to raise; a bug becomes an error row
            return Scored(None, _crashed(exc))

    def _cache_as(self, model: ModelConfig, job: Job, temperature: float | None) -> int | None:
        """The sample index the job's calls are cached under, or None when the cache is not used for it."""
        if self.config.response_cache is None:
            return None
        if not use_cache(self.config.cache, model, temperature, attempts(job.test, self.config.repeat)):
            return None
        return job.attempt

    def _record(self, job: Job, row: dict[str, Any], *, spent: bool = False) -> None:
        """Hand a finished row to the committer (durable at its next commit) and count its cost, unless already
        `spent`."""
        summary = RowSummary.of(row)   # what the counters need: the row itself is not kept
        if self._gate is not None:   # `--until-decided` reads the row's score now
            self._gate.record(job, row)
        if summary.cost is not None and not spent:
            self._spend(summary.cost)
        assert self._committer is not None
        self._committer.add(job.key, row, summary)

    def _spend(self, cost: float) -> None:
        """Add to the priced spend; passing `--max-cost` ends dispatch (calls in flight finish)."""
        if self.config.max_cost is None:
            return
        self.stats.spend += cost
        if self.stats.spend > self.config.max_cost:
            self.stop("budget")

    def _affordable(self, estimates: list[float | None]) -> int:
        """How many of a batch's requests (their estimated costs, in order) the budget lets go; fewer than all
        stops dispatch, as passing it does."""
        if self.config.max_cost is None:
            return len(estimates)
        spend = self.stats.spend
        for index, estimate in enumerate(estimates):
            spend += estimate or 0.0
            if spend > self.config.max_cost:
                self.stop("budget")
                return index
        return len(estimates)

    def _count_in_flight(self, delta: int) -> None:
        self.stats.in_flight += delta

    def _committed(self, summaries: list[RowSummary]) -> None:
        """The committer made these rows durable: count them as done."""
        self.stats.count(summaries)
        if self.on_progress is not None:
            self.stats.retrying = self._client.retrying if self._client is not None else 0
            self.stats.rate_limited = self._client.rate_limited if self._client is not None else 0
            self.on_progress(self.stats)

    def _show(self) -> None:
        """Refresh the progress display (a batch was sent or ended)."""
        if self.on_progress is not None:
            self.on_progress(self.stats)

    def _write_failed(self, exc: BaseException) -> None:
        """A journal or part write failed: stop spending (every call from now on would be paid and lost)."""
        if self._storage_error is not None:
            return
        self._storage_error = exc if isinstance(exc, StorageError) else StorageError(
            f"could not record the rows: {type(exc).__name__}: {exc}")
        self.cancel()
        self.stats.stopped = "storage"
