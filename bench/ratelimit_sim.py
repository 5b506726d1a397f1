"""The engine's pace against bench/ratelimit_server.py's limits on a simulated clock: seconds of a run in a
fraction of one, the same on a loaded machine as on an idle one (no event loop falls behind the limit).

`SimRun` drives the engine's own parts as the client does: per model, a `Window` (from one slot, as a run starts
it) and a `Budget` (the models at one endpoint with one key in one group, as `ModelClient` keeps them, so they
join when the replies show one limit); the first call alone until its reply (`probe`), the others waiting their
turn at the pace; each try answered by the server's `Limits` (shared, per model, or one model's only, as its
options say) after 0.3 s +-30%, a 429 tried again after the client's `retry.rate_limit_delay`. What the server
counts is what `/stats` counts. Used by tests/client/test_ratelimit.py and by `bench_ratelimit.py --sim`.
"""

from __future__ import annotations

import asyncio
import heapq
import importlib.util
import itertools
import math
import random
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from multidict import CIMultiDict

from engine.client import retry
from engine.client.ratelimit import Budget
from engine.client.window import Window
from engine.model.model_config import DEFAULT_CEILING

SERVER = Path(__file__).resolve().parent / "ratelimit_server.py"
LATENCY_S = 0.3
NOW = 1_800_000_000.0   # the wall clock (seconds since the epoch) reset dates are read against


def server_module() -> Any:
    """bench/ratelimit_server.py as a module (its `Limits` and `parse`)."""
    found = sys.modules.get("ratelimit_server")
    if found is not None:
        return found
    spec = importlib.util.spec_from_file_location("ratelimit_server", SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Clock:
    """A simulated monotonic clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SimRun:
    """A run of calls spread evenly over `models` models (`bench-model`, or `bench-model-a`, `-b`, ...) on one
    endpoint and key, against the server `server_args` describe; `sent`, `refused` and `answered` count its
    requests, per model in `by_model`."""

    def __init__(self, server_args: list[str], *, models: int = 1, cost: int = 22, seed: int = 3) -> None:
        self.clock = Clock()
        self.names = ["bench-model"] if models == 1 else [f"bench-model-{chr(ord('a') + i)}" for i in range(models)]
        group: list[Budget] = []
        self.budgets = {name: Budget(clock=self.clock, wall=lambda: NOW, group=group) for name in self.names}
        self.windows = {name: Window(DEFAULT_CEILING, clock=self.clock) for name in self.names}
        module = server_module()
        self.server = module.Server(module.parse(server_args))
        self.limits = {name: self.server.limits(name) for name in self.names}   # None: not limited
        for limits in {id(x): x for x in self.limits.values() if x is not None}.values():
            for bucket, _ in limits._buckets():
                bucket.at = 0.0
        self.cost = cost
        self.rng = random.Random(seed)
        self.timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self.turns: dict[int, asyncio.Lock] = {}
        self.order = itertools.count()
        self.steps = 0
        self.sent = self.refused = self.answered = 0
        self.by_model = {name: {"requests": 0, "answered": 0, "limited": 0} for name in self.names}
        self.max_in_flight = self.in_flight = 0
        self.first_sent: float | None = None
        self.last_answer = 0.0

    def budget(self, name: str) -> Budget:
        """The budget that paces the model's calls now (its own, or the one that absorbed it)."""
        return self.budgets[name].active()

    def _turn(self, name: str) -> AbstractAsyncContextManager[Any]:
        """The turn of the budget pacing the model now: first come, first served."""
        return self.turns.setdefault(id(self.budget(name)), asyncio.Lock())

    async def _at(self, when: float) -> None:
        """Wait until the simulated clock reads `when`."""
        turn = asyncio.get_running_loop().create_future()
        heapq.heappush(self.timers, (when, next(self.order), turn))
        await turn
        self.steps += 1

    async def _call(self, name: str) -> None:
        probe = self.budget(name).probe()
        if probe is None:
            await self.budget(name).heard.wait()
        waits = 0
        counts, limits = self.by_model[name], self.limits[name]
        while True:
            async with self.windows[name].hold() as held:
                self.steps += 1
                async with self._turn(name):
                    self.steps += 1
                    while (wait := self.budget(name).wait_s(self.cost)) > 0:
                        await self._at(self.clock.now + max(wait, 1e-6))
                    ticket = self.budget(name).grant(self.cost)
                async with self.windows[name].send(held):
                    ticket.owner.written(ticket)
                    self.sent += 1
                    counts["requests"] += 1
                    self.in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, self.in_flight)
                    self.first_sent = self.clock.now if self.first_sent is None else self.first_sent
                    refused_for = 0.0 if limits is None else limits.wait_for(self.cost, self.clock.now)
                    headers: dict[str, str] = {}
                    if refused_for > 0 and limits is not None:   # answered as the server answers, waited as the client
                        self.refused += 1
                        counts["limited"] += 1
                        headers, status = limits.headers(), 429
                        if headers:
                            headers["retry-after-ms"] = str(max(1, math.ceil(refused_for * 1000)))
                        await self._at(self.clock.now + 0.01)
                        retry_at = self.clock.now + retry.rate_limit_delay(CIMultiDict(headers), waits, self.rng)
                        waits += 1
                    else:
                        if limits is not None:
                            limits.take(self.cost)
                            headers = limits.headers()
                        status = 200
                        await self._at(self.clock.now + LATENCY_S * self.rng.uniform(0.7, 1.3))
                    self.in_flight -= 1
                    ticket.owner.observe(ticket, status, CIMultiDict(headers))
                    if probe:
                        self.budgets[name].hear()
                        probe = False
                held.outcome = "ok" if status == 200 else "refused"
                held.published_rate = ticket.owner.active().published_rate(self.cost)
            if status == 200:
                self.last_answer = self.clock.now
                self.answered += 1
                counts["answered"] += 1
                return
            await self._at(retry_at)

    async def run(self, calls: int) -> None:
        """Make `calls` calls (each model its share) and wait until every one is answered."""
        tasks = [asyncio.create_task(self._call(self.names[i % len(self.names)])) for i in range(calls)]
        while True:
            seen, idle = self.steps, 0
            while idle < 8:   # every call that can act at this instant has acted (each resumption is a step)
                await asyncio.sleep(0)
                idle = idle + 1 if self.steps == seen else 0
                seen = self.steps
            if self.answered == calls:
                break
            assert self.timers, "every call waits for a slot or a turn that nothing will give"
            when, _, turn = heapq.heappop(self.timers)
            self.clock.now = max(self.clock.now, when)
            turn.set_result(None)
        for task in tasks:
            task.result()

    def serving_s(self) -> float:
        """From the first request sent to the last answer."""
        return self.last_answer - (self.first_sent or 0.0)

    def joined(self) -> bool:
        """Whether every model's calls are paced by one budget now."""
        return len({id(self.budget(name)) for name in self.names}) == 1
