"""The run's settings and counters: the command line as given, what `engine run` asks of the runner, and what it
reports back."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from engine.client.request import RequestSettings
from engine.client.response_cache import ResponseCache
from engine.errors import UsageError
from engine.judge.caller import JudgeModels

#: The environment variable that sets the pause between polls of a batch, `FIRST[,MOST]` seconds (tests and
#: benchmarks poll their loopback servers often; the default suits a provider's hours).
POLL_SETTING = "ENGINE_BATCH_POLL_S"


@dataclass
class Invocation:
    """The run's settings as given on the command line (None / empty = not given).

    Stored in the journal so `--resume` reuses them; options given again on resume win.
    """

    paths: list[str] = field(default_factory=list)
    models_file: str | None = None
    model_names: list[str] = field(default_factory=list)
    out: str | None = None
    concurrency: int | None = None
    repeat: int | None = None
    seed: int | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    filters: list[str] = field(default_factory=list)
    filter_file: str | None = None   # --filter-file: exactly the tests listed (engine.run.jobs.select_listed)
    stream: bool | None = None
    max_retries: int | None = None
    max_cost: float | None = None
    max_response_mb: float | None = None
    run_id: str | None = None
    shard: str | None = None   # "I/N" (engine.run.shards)
    cache: bool | None = None  # --cache / --no-cache; None: deterministic requests only (engine.client.response_cache)
    batch: bool | None = None  # --batch: single-turn calls through the providers' batch APIs (engine.run.batches)

    def over(self, stored: dict[str, Any]) -> Invocation:
        """These settings, with anything not given taken from `stored`."""
        merged = dict(stored)
        for name, value in dataclasses.asdict(self).items():
            if value not in (None, []):
                merged[name] = value
        known = {f.name for f in dataclasses.fields(Invocation)}
        return Invocation(**{k: v for k, v in merged.items() if k in known})

    def absolute(self) -> Invocation:
        """These settings with the suite and models paths made absolute, so `--resume` works from any directory."""
        return dataclasses.replace(self, paths=[os.path.abspath(p) for p in self.paths],
                                   models_file=self.models_file and os.path.abspath(self.models_file))

    def request_settings(self) -> RequestSettings:
        """What every request of the run is sent with, from `--temperature`, `--max-tokens` and `--no-stream`."""
        return RequestSettings(temperature=self.temperature, max_tokens=self.max_tokens,
                               stream=self.stream is not False)


class RowSummary(NamedTuple):
    """What the counters need of a row until it is committed (the row itself is freed once journaled)."""

    model: str
    retries: int
    completion_tokens: int | None
    cost: float | None
    latency_s: float | None
    fallback: bool | None
    error_kind: str | None
    passed: bool | None
    cached: bool

    @classmethod
    def of(cls, row: dict[str, Any]) -> RowSummary:
        """The summary of a results row."""
        return cls(row["model"], row["retries"], row["completion_tokens"], row["cost"], row["latency_s"],
                   row["fallback"], row["error_kind"], row["passed"], bool(row["cached"]))


@dataclass
class RowCounts:
    """What every committed row of this session adds to: one model's counters, and the run's."""

    done: int = 0
    passed: int = 0
    errors: int = 0
    unscored: int = 0                    # rows recorded unscored on purpose (`eval: {none: true}`)
    retries: int = 0
    completion_tokens: int = 0


@dataclass
class ModelStats(RowCounts):
    """Counters for one model (committed rows of this session)."""

    failed: int = 0
    fallbacks: int = 0
    cost: float = 0.0
    priced: int = 0                      # rows with a known cost (0: the model has no price, show "-")
    latency_sum: float = 0.0
    timed: int = 0                       # rows with a latency (a reply from the response cache has none)
    cached: int = 0                      # rows answered from the response cache
    error_kinds: dict[str, int] = field(default_factory=dict)


@dataclass
class RunStats(RowCounts):
    """What the progress display and the summary read."""

    total: int = 0
    token_rows: int = 0                  # rows whose server reported token counts (llama.cpp streams none)
    in_flight: int = 0
    retrying: int = 0                    # calls in flight that are waiting to retry
    rate_limited: int = 0                # calls paced: waiting for the rate limit to let them go
    spend: float = 0.0
    started: float = field(default_factory=time.monotonic)
    stopped: str | None = None           # None | "interrupted" | "budget" | "storage"
    batches_submitted: int = 0           # batches sent (or taken over from a stopped run) and waited for
    batches_done: int = 0                # ...of them, ended and their answers handed out
    batch_rows_held: int = 0             # calls in the batches still in progress
    batch_rows_gathered: int = 0         # calls gathered into a batch not sent yet
    by_model: dict[str, ModelStats] = field(default_factory=dict)

    def count(self, summaries: list[RowSummary]) -> None:
        """Count rows just committed (their summaries) as done."""
        for name, retries, completion_tokens, cost, latency_s, fallback, kind, passed, cached in summaries:
            model = self.by_model[name]
            model.done += 1
            self.done += 1
            model.retries += retries
            self.retries += retries
            if completion_tokens is not None:
                model.completion_tokens += completion_tokens
                self.completion_tokens += completion_tokens
                self.token_rows += 1
            if cost is not None:
                model.cost += cost
                model.priced += 1
            if latency_s is not None:
                model.latency_sum += latency_s
                model.timed += 1
            model.cached += cached
            if fallback:
                model.fallbacks += 1
            if kind:
                model.errors += 1
                self.errors += 1
                model.error_kinds[kind] = model.error_kinds.get(kind, 0) + 1
            elif passed is None:
                model.unscored += 1
                self.unscored += 1
            elif passed:
                model.passed += 1
                self.passed += 1
            else:
                model.failed += 1


@dataclass(frozen=True)
class PollPlan:
    """The pause between two polls of a batch: `first_s`, growing by `factor` each poll to at most `most_s`."""

    first_s: float = 10.0
    most_s: float = 600.0
    factor: float = 1.5

    @classmethod
    def from_env(cls) -> PollPlan:
        """The plan `ENGINE_BATCH_POLL_S` sets (`FIRST,MOST` seconds, or `EVERY` for a pause that stays), else the
        default.

        Raises:
            UsageError: The setting is not one or two positive numbers.
        """
        text = os.environ.get(POLL_SETTING, "").strip()
        if not text:
            return cls()
        try:
            values = [float(part) for part in text.split(",")]
        except ValueError:
            values = []
        if not 1 <= len(values) <= 2 or not all(0 < v <= 86_400 for v in values):
            raise UsageError(f"{POLL_SETTING}={text!r}: give the pause between polls of a batch in seconds, FIRST "
                             f"or FIRST,MOST (e.g. 10,600), each above 0 and at most 86400")
        return cls(first_s=values[0], most_s=max(values))

    def pauses(self) -> Iterator[float]:
        """The pauses, one per poll, without end."""
        pause = self.first_s
        while True:
            yield pause
            pause = min(self.most_s, pause * self.factor)


@dataclass(frozen=True)
class RunConfig:
    """How to run.

    Args:
        run_id: The run's id (copied to every row).
        concurrency: `--concurrency`: a cap on calls in flight over all models, or None for none (each model's
            window finds its own number, `engine.client.window`).
        settings: Request settings (temperature, max_tokens, seed, stream).
        max_cost: Stop dispatch once priced spend passes this, or None.
        commit_interval_s: The longest a finished row waits to be committed.
        commit_rows: Commit as soon as this many rows wait.
        judges: The judge models the suites' `judge` evaluators may call (resolved before the run), or None.
        judge_cache: Where judge replies are kept (opened by the runner), or None for the default path.
        response_cache: The open response cache, or None for none (`engine.client.response_cache`).
        cache: `--cache` (True), `--no-cache` (False) or neither (None): `response_cache.use_cache`.
        repeat: `--repeat`, or None for each test's own (how many attempts a test gets decides the cache).
        model_slots: model name -> a cap shared beyond this process (`engine.run.ray_dispatch`: one Ray actor
            per model holds the cluster-wide cap), entered around each model call before the global slot; None
            when this process's workers are the only ones calling the model.
        batch_poll: The pause between polls of a batch (engine.run.batches).
    """

    run_id: str
    concurrency: int | None = None
    settings: RequestSettings = field(default_factory=RequestSettings)
    max_cost: float | None = None
    commit_interval_s: float = 0.05
    commit_rows: int = 512
    judges: JudgeModels | None = None
    judge_cache: Path | None = None
    response_cache: ResponseCache | None = None
    cache: bool | None = None
    repeat: int | None = None
    model_slots: Callable[[str], AbstractAsyncContextManager[Any] | None] | None = None
    batch_poll: PollPlan = field(default_factory=PollPlan)
