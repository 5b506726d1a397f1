"""The runner: per-model worker pools under a global cap, scoring, and durable rows.

Each model gets `min(model.concurrency, --concurrency, its job count)` workers pulling from its own lazy job
iterator (`min(model.concurrency, its job count)` when its first jobs are agent conversations: a
conversation holds a global slot only for each model call, not across its tool delays); a worker
already holds its model's slot when it waits for one of the global slots (a semaphore), so a slow
model never holds global slots it cannot use, and no coroutine exists per job (100k jobs start at once
and memory stays flat). The worker scores its answer where each check belongs (engine.evaluators.scoring:
bounded checks on a short answer inline, a judge awaited, exec checks in a thread, every other check in a
scoring process under its time limit, `ScoringPool`), builds the row, hands it to the committer and counts
its cost. The committer (engine.results.committer) is a thread: it makes the rows durable every
`commit_interval_s` or `commit_rows` rows and flushes a Parquet part every `rows_per_part` committed rows, so
the event loop that reads the replies (and stamps their first token) neither scores nor writes; a row counts as
done (progress, summary) only once committed.

Stopping: `stop()` (first Ctrl-C, or the `--max-cost` budget) ends dispatch and lets calls in flight finish
(and be scored, each check within its time limit); `cancel()` (second Ctrl-C, SIGTERM) cancels them and kills
the scoring processes - a cancelled call writes no row, so `--resume` runs it again, while an answer that
had arrived keeps its row, marked not scored (`STOPPED`; `engine rescore` scores it). A failed journal or
part write (`StorageError`: disk full, I/O error) stops spending at once: dispatch ends, calls in flight are
cancelled, and `run` raises it; what was committed before stays.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, NamedTuple

from engine.agent.mcp.servers import McpServers
from engine.client.judge import ModelJudgeCaller
from engine.client.judge_cache import JudgeCache, default_path
from engine.client.openai import CallResult, OpenAIClient, PreparedRequest, prepare, temperature_of
from engine.client.response_cache import use_cache
from engine.client.session import Sessions
from engine.errors import ClientError, StorageError
from engine.evaluators.scoring import context
from engine.evaluators.scoring_pool import STOPPED, ScoringPool
from engine.local.registry import GOLDEN
from engine.model.answer import Answer
from engine.model.model_config import ModelConfig
from engine.model.scoring import Record, ScoringContext
from engine.model.test import Test
from engine.model.verdict import Verdict
from engine.results.committer import Committer
from engine.results.rows import build_row, record_of, set_verdict
from engine.run.conversation import golden_reply, run_agent_job
from engine.run.jobs import Job, attempts
from engine.run.run_config import ModelStats, RowSummary, RunConfig, RunStats
from engine.suite.content_parts import ImageUnavailable

__all__ = ["ModelStats", "RunConfig", "RunStats", "Runner"]

if TYPE_CHECKING:
    from engine.results.journal import Journal
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


class _BothSlots:
    """The model's shared slot, then a global one: a worker never holds a global slot while it waits."""

    def __init__(self, shared: AbstractAsyncContextManager[Any], global_slots: asyncio.Semaphore) -> None:
        self._shared = shared
        self._global = global_slots

    async def __aenter__(self) -> None:
        await self._shared.__aenter__()
        try:
            await self._global.acquire()
        except BaseException as exc:
            await self._shared.__aexit__(type(exc), exc, exc.__traceback__)
            raise

    async def __aexit__(self, *exc: Any) -> None:
        self._global.release()
        await self._shared.__aexit__(*exc)


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
        self._client: OpenAIClient | None = None
        self._storage_error: StorageError | None = None
        self._judge: ModelJudgeCaller | None = None
        self._gate = gate
        self._mcp = McpServers()   # the run's `scope: run` MCP servers, stopped when the run ends

    def stop(self, reason: str = "interrupted") -> None:
        """Stop dispatching; calls in flight finish and are recorded."""
        if not self._stopping:
            self._stopping = True
            self.stats.stopped = reason
            if self._gate is not None:   # workers waiting at the gate end too
                self._gate.close()

    def cancel(self) -> None:
        """Cancel calls in flight too (their rows are not written; resume runs them) and their scoring (an
        answer that had arrived keeps its row, marked not scored)."""
        self.stop()
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
        global_slots = asyncio.Semaphore(self.config.concurrency)
        committer = self._committer = Committer(
            self.journal, self.writer, asyncio.get_running_loop(), self._committed, self._write_failed,
            interval_s=self.config.commit_interval_s, rows=self.config.commit_rows)
        try:
            async with Sessions(self.config.concurrency) as sessions:
                client = self._client = OpenAIClient(sessions, api_keys, self.config.response_cache)
                cache = None
                if self.config.judges is not None:
                    cache = JudgeCache(self.config.judge_cache or default_path())
                    self._judge = ModelJudgeCaller(self.config.judges, cache, client, global_slots=global_slots,
                                                   on_cost=self._spend, in_flight=self._count_in_flight)
                for model, jobs in jobs_by_model.values():
                    # No more workers than jobs: `--concurrency 1000000` for one test starts one.
                    first = list(itertools.islice(jobs, max(1, model.concurrency)))
                    if not any(job.test.agent is not None for job in first):
                        cap = max(1, min(model.concurrency, self.config.concurrency))
                        first, jobs = first[:cap], itertools.chain(first[cap:], jobs)
                    # else: a worker holds a conversation, the global slot only its model calls, so up to
                    # `model.concurrency` conversations go on while their tools answer
                    queue = itertools.chain(first, jobs)
                    for _ in range(len(first)):
                        self._workers.append(asyncio.create_task(self._worker(client, model, queue, global_slots)))
                try:
                    results = await asyncio.gather(*self._workers, return_exceptions=True)
                finally:
                    await self._mcp.aclose()
                    if cache is not None:
                        cache.close()
                for outcome in results:
                    if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
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

    async def _worker(self, client: OpenAIClient, model: ModelConfig, jobs: Iterator[Job],
                      global_slots: asyncio.Semaphore) -> None:
        settings = self.config.settings
        slots: AbstractAsyncContextManager[Any] = global_slots
        shared = self.config.model_slots(model.name) if self.config.model_slots is not None else None
        if shared is not None:
            slots = _BothSlots(shared, global_slots)
        try:
            for job in jobs:
                if self._stopping:
                    return
                if self._gate is not None and not await self._gate.admit(job):
                    continue   # `--until-decided` has no use for it (engine/run/until_decided.py)
                if job.test.agent is not None:
                    row = await run_agent_job(
                        client=client, model=model, test=job.test, attempt=job.attempt, run_id=self.config.run_id,
                        settings=settings, global_slots=slots, on_cost=self._spend,
                        in_flight=self._count_in_flight, caller=self._judge,
                        cache_as=self._cache_as(model, job, temperature_of(model, job.test, settings)),
                        score=self._score_answer, mcp=self._mcp)
                    self._record(job, row, spent=True)   # its cost was counted reply by reply
                    continue
                call = await self._call(client, model, job, slots)
                if call is None:
                    return   # stopped while it waited for a slot
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
        except Exception:
            self._stopping = True   # a bug (a row that cannot be built): no more calls lost the same way
            raise

    async def _call(self, client: OpenAIClient, model: ModelConfig, job: Job,
                    slots: AbstractAsyncContextManager[Any]) -> _Call | None:
        """Make the job's call under its slots; None when the run stopped while it waited for them."""
        settings = self.config.settings
        try:
            request = prepare(model, job.test, settings, attempt=job.attempt)
        except ImageUnavailable as exc:   # deleted or edited since load: an error row, nothing sent
            request = prepare(model, job.test, settings, inline_images=False, attempt=job.attempt)
            return _Call(request, CallResult(error=ClientError(str(exc), kind="image")), time.time_ns() // 1000)
        cache_as = self._cache_as(model, job, request.temperature)
        async with slots:
            if self._stopping:
                return None
            started_us = time.time_ns() // 1000
            self.stats.in_flight += 1
            try:
                if model.builtin == GOLDEN:   # the scripted model: its golden, in-process
                    result = golden_reply(model, job.test)
                else:
                    result = await client.call(model, request, cache_as=cache_as)
            finally:
                self.stats.in_flight -= 1
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

    def _count_in_flight(self, delta: int) -> None:
        self.stats.in_flight += delta

    def _committed(self, summaries: list[RowSummary]) -> None:
        """The committer made these rows durable: count them as done."""
        self.stats.count(summaries)
        if self.on_progress is not None:
            self.stats.retrying = self._client.retrying if self._client is not None else 0
            self.stats.rate_limited = self._client.rate_limited if self._client is not None else 0
            self.on_progress(self.stats)

    def _write_failed(self, exc: BaseException) -> None:
        """A journal or part write failed: stop spending (every call from now on would be paid and lost)."""
        if self._storage_error is not None:
            return
        self._storage_error = exc if isinstance(exc, StorageError) else StorageError(
            f"could not record the rows: {type(exc).__name__}: {exc}")
        self.cancel()
        self.stats.stopped = "storage"
