"""The adaptive window over a simulated clock: calls through `Window.hold` / `send` to a simulated server, so
what the window settles at is decided by the server's shape, never by this machine's speed."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import sys
from collections import Counter
from pathlib import Path

import pytest

from engine.client.window import BURST, Outcome, Window
from engine.errors import CallStopped

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
from ratelimit_sim import SimRun  # bench/ratelimit_sim.py: the engine's pace on a simulated clock


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Server:
    """`slots` calls served at once, each for `service_s` (+ `per_call_s` for each other call in service, as a
    batching server slows down), x 1 +- `jitter` (seeded); the rest wait in line. `overload_at`: more calls than
    this in line at once are refused as overloaded (a 503)."""

    def __init__(self, clock: Clock, slots: int | None, service_s: float = 1.0, per_call_s: float = 0.0,
                 overload_at: int | None = None, jitter: float = 0.0) -> None:
        self.clock, self.slots, self.service_s, self.per_call_s = clock, slots, service_s, per_call_s
        self.overload_at, self.jitter = overload_at, jitter
        self.rng = random.Random(1)
        self.sent: Counter[float] = Counter()   # calls that arrived at each instant
        self.serving = 0
        self.line: list[asyncio.Future[None]] = []
        self.done: list[tuple[float, int, asyncio.Future[None]]] = []
        self.order = itertools.count()
        self.in_flight = 0
        self.max_in_flight = 0
        self.latencies: list[float] = []

    async def call(self) -> Outcome:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        started = self.clock.now
        self.sent[started] += 1
        try:
            if self.overload_at is not None and self.in_flight > self.overload_at:
                return "overloaded"
            if self.slots is not None and self.serving >= self.slots:
                turn = asyncio.get_running_loop().create_future()
                self.line.append(turn)
                await turn
            else:
                self.serving += 1
            finished = asyncio.get_running_loop().create_future()
            took = (self.service_s + self.per_call_s * (self.serving - 1)) * \
                self.rng.uniform(1 - self.jitter, 1 + self.jitter)
            heapq.heappush(self.done, (self.clock.now + took, next(self.order), finished))
            await finished
            if self.line:
                self.line.pop(0).set_result(None)   # its slot goes to the next in line
            else:
                self.serving -= 1
            self.latencies.append(self.clock.now - started)
            return "ok"
        finally:
            self.in_flight -= 1


async def _run(window: Window, server: Server, calls: int, workers: int,
               published_rate: float | None = None) -> list[int]:
    """`calls` calls by `workers` workers, each holding a slot of the window (and telling it the calls a second
    the provider publishes, if any); the window's sizes over time."""
    left = iter(range(calls))
    sizes = [window.size]

    async def worker() -> None:
        for _ in left:
            async with window.hold() as held:
                async with window.send(held):
                    outcome = await server.call()
                held.outcome = outcome
                held.published_rate = published_rate
            sizes.append(window.size)

    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    while not all(task.done() for task in tasks):
        for _ in range(30):
            await asyncio.sleep(0)
        if server.done:
            at, _, finished = heapq.heappop(server.done)
            server.clock.now = max(server.clock.now, at)
            finished.set_result(None)
    for task in tasks:
        task.result()
    return sizes


@pytest.mark.parametrize("slots", [1, 4])
async def test_a_server_with_a_few_slots_is_not_overloaded(slots: int) -> None:
    """A CPU server serving a few calls at once and queueing the rest: the window settles near its slots, so the
    latency stays near one call's time rather than growing with a queue, and the throughput is the server's."""
    clock = Clock()
    server = Server(clock, slots=slots)
    window = Window(1024, clock=clock)
    calls = 150 * slots
    sizes = await _run(window, server, calls, workers=256)
    assert max(sizes[-calls // 3:]) <= 2.5 * slots + 1
    late = server.latencies[-calls // 3:]
    assert sum(late) / len(late) <= 2.0 * server.service_s
    assert clock.now <= 1.1 * calls / slots * server.service_s


async def test_a_server_that_takes_many_at_once_gets_them() -> None:
    """A server whose latency does not grow with the calls in flight (a batching server with room): the window
    grows far past a fixed 8 or 64, up to what the jobs need."""
    clock = Clock()
    server = Server(clock, slots=None)
    window = Window(1024, clock=clock)
    await _run(window, server, 5000, workers=1024)
    assert server.max_in_flight >= 256


@pytest.mark.parametrize("published_rate, after_first", [(None, 8), (50.0, 100)])
async def test_a_published_pace_opens_the_slow_start_at_once(published_rate: float | None, after_first: int) -> None:
    """A provider that publishes 50 calls a second and answers in 1 s: after the first answer the window holds the
    calls in flight that pace needs (50, with room for the latency's spread) rather than the eight a slow start
    tries next; a server that publishes no limit (a local one) goes from one call to eight."""
    clock = Clock()
    server = Server(clock, slots=None)
    window = Window(1024, clock=clock)
    sizes = await _run(window, server, 40, workers=40, published_rate=published_rate)
    assert sizes[:2] == [1, after_first]
    if published_rate is not None:
        assert server.sent[server.latencies[0]] == 39   # all at once: the pace, not the window, spaces them


async def test_a_published_pace_never_passes_the_ceiling() -> None:
    clock = Clock()
    server = Server(clock, slots=None)
    window = Window(12, clock=clock)
    sizes = await _run(window, server, 100, workers=64, published_rate=50.0)
    assert max(sizes) == 12 and server.max_in_flight <= 12


async def test_an_explicit_concurrency_is_a_hard_ceiling() -> None:
    clock = Clock()
    server = Server(clock, slots=None)
    window = Window(12, clock=clock)
    sizes = await _run(window, server, 600, workers=64)
    assert max(sizes) <= 12 and server.max_in_flight <= 12
    assert server.max_in_flight == 12   # and it is reached


async def test_overloads_shrink_the_window() -> None:
    """A server that answers 503 past 16 calls at once: the window comes back under it."""
    clock = Clock()
    server = Server(clock, slots=None, overload_at=16)
    window = Window(1024, clock=clock)
    sizes = await _run(window, server, 2000, workers=256)
    assert max(sizes) > 16 and max(sizes[-200:]) <= 24


async def test_a_stopped_run_ends_the_tries_waiting_for_a_slot() -> None:
    stopping = asyncio.Event()
    window = Window(1, stopping=stopping)
    async with window.hold():
        waiting = asyncio.create_task(window.hold().__aenter__())
        await asyncio.sleep(0)
        assert not waiting.done()
        stopping.set()
        with pytest.raises(CallStopped):
            await waiting
    assert window.held == 0


async def test_a_growth_opens_its_new_slots_as_answers_come() -> None:
    """A server with room for every call, answering in 1 s +-30%: each doubling of the slow start (up to 512)
    sends `BURST` new calls at one instant at most, the rest as the answers come (a limit met on the way is met
    by a few calls, not the hundreds a doubling added at once), and the window grows about as fast."""
    clock = Clock()
    server = Server(clock, slots=None, jitter=0.3)
    window = Window(1024, clock=clock)
    await _run(window, server, 3000, workers=1024)
    assert server.max_in_flight >= 512
    assert max(server.sent.values()) <= BURST + 2, server.sent.most_common(3)
    assert clock.now <= 16.0   # 14.6 s when each growth went at once: half a round trip more


async def test_a_limit_that_publishes_nothing_is_met_by_a_few_calls() -> None:
    """200 calls a second and no rate-limit header, through the engine's window and pace (bench/ratelimit_sim.py):
    the slow start passes the limit growing from 128 calls in flight to 256, and nothing tells the pace a rate
    before a refusal comes back. Before the growth was spread, its 128 new calls went at one instant and ~110
    were refused; now the first refusal comes back after a few, and the run takes no longer."""
    sim = SimRun(["--rps", "200", "--headers", "none"])
    await sim.run(2000)
    bound = (2000 - 200) / 200 + 0.3
    assert sim.refused <= 0.01 * sim.sent, (sim.refused, sim.sent)
    assert sim.serving_s() <= 1.17 * bound, (sim.serving_s(), bound)
