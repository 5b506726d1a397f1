"""How many of a model's calls go at once: the slots each try waits for, and a window that finds their number.

A try waits twice (`Dispatch`): for a slot of its model (`hold`), held while the rate limit paces it, since no
other model could use that slot, and then for a slot of the run (`send`), held only while the try is in flight,
so a try waiting on a limit holds nothing another model could use. The runner decides what the slots are (an
adaptive `Window` per model under the run's `--concurrency`); the client tells each try's outcome (`Held`),
which is what the window adapts to. `Unlimited` is the dispatch of a caller with no run around it.

The `Window` measures in rounds: the tries sent at one size, until as many of them as the size are answered.
A round's throughput is the work its answers did a second: by Little's law, the calls in flight on average
times the work one call does a second (its completion tokens over its latency: an LLM server's work grows with
them, `Held.work`). It starts with one call (alone: the baseline), then eight, and doubles the size each full
round while the throughput grows by `GROWTH` at least (a slow start, as TCP's). Once it stops growing, the
window settles: at the calls a server needs to reach the best throughput with no queue (the best throughput
times the least seconds a unit of work took, x `KNEE_GAIN`: a server with a few slots and a queue behind
them), checked for one round, else at the size that first reached it (a server whose latency grows with its
batch while its throughput does too). It holds there, and every `HOLD_ROUNDS` full rounds probes a quarter
more, kept while the throughput grows by half as much at least. Where the provider publishes its rate limit
(the try's `Held.published_rate`), the slow start need not find by doubling what the provider has said: it
grows at once to the calls in flight that pace needs (Little's law: its rate times the tries' mean latency, x
`PACED_HEADROOM`), and the pace, not the window, then sets the speed. A server that publishes no limit (a
local CPU server, an embedded model) starts from one call as before. An overload (503, 529, a timeout, a failed
connection) or a refusal while every slot was in flight (some providers cap the calls in flight with 429)
shrinks it (x `SHRINK`, once a round). A round whose slots were not kept in flight (tries paced by the rate
limit wait inside the window without being in flight; or the jobs ran out) decides nothing: the pace, not the
window, then sets the speed. It never goes above its ceiling (an explicit `concurrency:`).

A growth does not send its new calls at one instant (as TCP paces its window's growth): past `BURST` new slots
at once, the rest open as good answers come, spread over about one round trip. A doubling from 128 to 256 sent
128 calls at once, past a limit no header told (a provider that publishes nothing): ~110 were refused before the
first refusal came back. Spread, the first refusal comes back after a few, and shrinks the window and teaches
the pace. A published pace's opening is not spread (the pace spaces the calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Literal, Protocol, TypeVar

from engine.errors import CallStopped

__all__ = ["Dispatch", "Held", "Outcome", "Unlimited", "Window", "unless_stopped"]

_T = TypeVar("_T")

Outcome = Literal["ok", "refused", "overloaded", "failed"]

START_GROWTH = 2      # a full round multiplies the window by this while the throughput grows (the slow start)
GROWTH = 1.25         # ...by at least this much
KNEE_GAIN = 1.25      # the settled window: this many times the calls in flight that reach the best throughput
SLOWER = 1.5         # a round whose work took this many times longer than the last one's is measured again
SETTLED_SHARE = 0.9   # a smaller window is kept when its throughput is at least this share of the best
FULL = 0.8            # a round is full when this share of its open slots was in flight on average
HOLD_ROUNDS = 8       # full rounds held at one size before probing more
PROBE_STEP = 0.25     # a probe adds this share of the window (one slot at least)
PROBE_GAIN = 0.5      # ...kept when the throughput grew by this share of what it added at least
SHRINK = 0.7          # an overload multiplies the window by this
PACED_HEADROOM = 2.0  # a published pace's calls in flight (rate x latency) times this: room for the latency's spread
LATENCY_WEIGHT = 0.1  # each answer's weight in the mean latency a published pace's calls in flight are reckoned by
BURST = 16            # a growth opens this many new slots at once at most; the rest as good answers come


async def unless_stopped(waiting: Awaitable[_T], stopping: asyncio.Event | None) -> _T:
    """`waiting`'s result, or `CallStopped` as soon as `stopping` is set (what it waited for is cancelled)."""
    if stopping is None:
        return await waiting
    if stopping.is_set():
        if asyncio.iscoroutine(waiting):
            waiting.close()
        raise CallStopped("the run stopped before this call was sent")
    task = asyncio.ensure_future(waiting)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise CallStopped("the run stopped before this call was sent")
    return task.result()


class Held:
    """One try's hold on its model's slot: when it was sent and answered, and how it went."""

    __slots__ = ("answered_at", "crowded", "outcome", "published_rate", "round", "sent_at", "stoppable", "work")

    def __init__(self, stoppable: bool = True) -> None:
        self.stoppable = stoppable          # a stop of the run ends its waits for slots
        self.round = 0                      # the round it was sent in (0: never sent)
        self.sent_at: float | None = None
        self.answered_at: float | None = None
        self.crowded = False                # every slot of its window was in flight when it was sent
        self.outcome: Outcome | None = None
        self.work = 1.0                     # what the server did for it (its completion tokens, at least 1)
        self.published_rate: float | None = None   # calls a second its pace allows, where the provider publishes it


class Dispatch(Protocol):
    """Where a model's tries wait for room: its own slot, then the run's."""

    def hold(self, stoppable: bool = True) -> AbstractAsyncContextManager[Held]:
        """A slot of the model, for one try (held while it is paced and in flight); `stoppable`: a stop of the
        run ends the wait for it, and for the run's slot (`CallStopped`)."""

    def send(self, held: Held) -> AbstractAsyncContextManager[None]:
        """A slot of the run, entered as the try is sent and left when it is answered."""


class Unlimited:
    """No slots: every try goes at once (a caller with no run around it)."""

    @asynccontextmanager
    async def hold(self, stoppable: bool = True) -> AsyncIterator[Held]:
        yield Held(stoppable)

    @asynccontextmanager
    async def send(self, held: Held) -> AsyncIterator[None]:
        held.sent_at = time.monotonic()
        try:
            yield
        finally:
            held.answered_at = time.monotonic()


class _Round:
    """The tries sent at one size of the window, and what their answers tell."""

    __slots__ = ("answered", "area", "ends", "latency", "number", "opened", "size", "started", "work")

    def __init__(self, number: int, size: int, started: float, area: float, opened: float) -> None:
        self.number = number
        self.size = size
        # It ends when a whole window's worth of the tries sent in it are answered (a round trip at its size).
        self.ends = size
        self.started = started
        self.area = area          # the window's in-flight x seconds when it started
        self.opened = opened      # ...and its open slots x seconds
        self.answered = 0
        self.work = 0.0           # of its answered tries that went well
        self.latency = 0.0


class Window:
    """The adaptive number of one model's tries in flight (the module docstring).

    Args:
        ceiling: The most it may reach (an explicit `concurrency:`, else the engine's default ceiling).
        start: Its size at first (one, but the slots of a server the engine started itself, which it knows).
        on_grow: Called with the new size when the window grows (the runner starts workers to fill it).
        stopping: Set when the run stops: a try waiting for a slot raises `CallStopped`.
        clock: Monotonic seconds.
    """

    def __init__(self, ceiling: int, *, start: int = 1, on_grow: Callable[[int], None] | None = None,
                 stopping: asyncio.Event | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.ceiling = max(1, ceiling)
        self.size = max(1, min(self.ceiling, start))
        self.open = self.size  # slots open now: a grown window opens its new ones as good answers come (`_resize`)
        self._step = 1         # slots each good answer opens until `open` reaches `size`
        self.held = 0          # slots taken: tries paced or in flight
        self.in_flight = 0     # tries sent and not yet answered
        self._on_grow = on_grow
        self._stopping = stopping
        self._clock = clock
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._area = 0.0                 # in-flight x seconds so far (Little's law: the mean in flight)
        self._opened = 0.0               # open slots x seconds so far
        self._changed_at = clock()
        self._round = _Round(1, self.size, self._changed_at, 0.0, 0.0)
        self._phase: Literal["start", "check", "hold", "probe"] = "start"
        self._best = 0.0                 # the best throughput measured (work a second)
        self._best_size = 1              # the size that first reached it
        self._unit_s = math.inf          # the least seconds a unit of work took (a round's mean)
        self._last_unit_s = math.inf     # the last full round's
        self._again = False              # this round measures the size of the last one again
        self._before = 1                 # the size a check or probe goes back to
        self._reference = 0.0            # the throughput a probe must beat
        self._held_rounds = 0
        self._shrunk_at = 0              # the round the last shrink started: earlier tries do not shrink it again
        self._latency_s: float | None = None   # the answered tries' mean latency, lately (for a published pace)

    def slots(self) -> int:
        """Tries that may be held once the window's slots are all open."""
        return self.size

    def begin_at(self, size: int) -> None:
        """Start at `size` slots (under the ceiling) rather than one, before any try was sent: the callers know
        this many go at once (conversations, each holding a slot only while it calls the model)."""
        if self._round.number == 1 and self.in_flight == 0:
            self.size = self.open = self._before = max(1, min(self.ceiling, size))
            self._round = _Round(1, self.size, self._changed_at, self._area, self._opened)

    @asynccontextmanager
    async def hold(self, stoppable: bool = True) -> AsyncIterator[Held]:
        await self._acquire(self._stopping if stoppable else None)
        held = Held(stoppable)
        try:
            yield held
        finally:
            self._release(held)

    @asynccontextmanager
    async def send(self, held: Held) -> AsyncIterator[None]:
        self._account()
        self.in_flight += 1
        held.round = self._round.number
        held.sent_at = self._changed_at
        held.crowded = self.in_flight >= self.open
        try:
            yield
        finally:
            self._account()
            self.in_flight -= 1
            held.answered_at = self._changed_at

    def _account(self) -> None:
        now = self._clock()
        self._area += self.in_flight * max(0.0, now - self._changed_at)
        self._opened += self.open * max(0.0, now - self._changed_at)
        self._changed_at = now

    async def _acquire(self, stopping: asyncio.Event | None) -> None:
        if stopping is not None and stopping.is_set():
            raise CallStopped("the run stopped before this call was sent")
        if self.held < self.open and not self._waiters:
            self.held += 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(turn)
        try:
            await unless_stopped(asyncio.shield(turn), stopping)
        except (asyncio.CancelledError, CallStopped):
            if turn.done() and not turn.cancelled():   # the slot was given as it was cancelled: pass it on
                self.held -= 1
                self._wake()
            else:
                self._waiters.remove(turn)
            raise

    def _wake(self) -> None:
        while self._waiters and self.held < self.open:
            turn = self._waiters.popleft()
            if not turn.done():
                self.held += 1
                turn.set_result(None)

    def _release(self, held: Held) -> None:
        self.held -= 1
        if held.round and held.sent_at is not None and held.answered_at is not None:
            self._answered(held, held.answered_at - held.sent_at)
            self._paced(held, held.answered_at - held.sent_at)
            if held.outcome == "ok" and self.open < self.size:   # a growth spread over a round trip (`_resize`)
                self._account()
                self.open = min(self.size, self.open + self._step)
        self._wake()

    def _answered(self, held: Held, latency: float) -> None:
        if held.outcome == "overloaded" or (held.outcome == "refused" and held.crowded):
            if held.round >= self._shrunk_at:
                self._resize(max(1, math.floor(self.size * SHRINK)), "hold")
                self._shrunk_at = self._round.number
            return
        if held.round != self._round.number:
            return   # sent at another size: it tells nothing of this one
        current = self._round
        current.answered += 1
        if held.outcome == "ok":
            current.work += max(1.0, held.work)
            current.latency += max(0.0, latency)
        if current.answered >= current.ends:
            self._ended(current)

    def _paced(self, held: Held, latency: float) -> None:
        """In its slow start, grow at once to the calls in flight the provider's published pace needs (by the
        tries' mean latency lately; a need that grew by less than `GROWTH` waits for the slow start)."""
        if self._phase != "start" or held.outcome != "ok" or held.published_rate is None:
            return
        latency = max(0.0, latency)
        self._latency_s = latency if self._latency_s is None else \
            self._latency_s + LATENCY_WEIGHT * (latency - self._latency_s)
        need = min(self.ceiling, math.ceil(PACED_HEADROOM * held.published_rate * self._latency_s))
        if need >= GROWTH * self.size:
            self._resize(need, "start", at_once=True)

    def _ended(self, done: _Round) -> None:
        """A round's last answer: what its throughput says of the size."""
        self._account()
        elapsed = self._changed_at - done.started
        full = elapsed > 0 and self._area - done.area >= FULL * (self._opened - done.opened)
        if not full or done.work <= 0 or done.latency <= 0:
            if self._phase in ("check", "probe"):   # the load changed: back to the size it was sure of
                self._resize(self._before, "hold")
            else:
                self._new_round()
            return
        unit_s = done.latency / done.work
        self._unit_s = min(self._unit_s, unit_s)
        rate = (self._area - done.area) / elapsed / unit_s
        slower, self._last_unit_s = unit_s > SLOWER * self._last_unit_s, unit_s
        again, self._again = self._again, False
        if self._phase == "start":
            if rate >= GROWTH * self._best and slower and not again:   # a queue may still be building: again
                self._again = True
                self._new_round()
                return
            if rate >= GROWTH * self._best:
                self._best, self._best_size = rate, done.size
                if done.size < self.ceiling:
                    self._resize(min(self.ceiling, max(8, done.size * START_GROWTH)), "start")
                    return
                self._resize(done.size, "hold")
                return
            knee = max(1, math.ceil(KNEE_GAIN * self._best * self._unit_s))
            if knee < self._best_size:
                self._before = self._best_size
                self._resize(knee, "check")
            else:
                self._resize(self._best_size, "hold")
        elif self._phase == "check":
            self._resize(done.size if rate >= SETTLED_SHARE * self._best else self._before, "hold")
        elif self._phase == "probe":
            if rate >= self._reference * (1.0 + PROBE_GAIN * (done.size - self._before) / self._before):
                self._best = max(self._best, rate)
                self._probe(done.size, rate)
            else:
                self._resize(self._before, "hold")
        else:
            self._held_rounds += 1
            if self._held_rounds >= HOLD_ROUNDS and done.size < self.ceiling:
                self._probe(done.size, rate)
            else:
                self._new_round()

    def _probe(self, size: int, rate: float) -> None:
        self._before, self._reference = size, rate
        self._resize(min(self.ceiling, size + max(1, math.ceil(PROBE_STEP * size))), "probe")

    def _resize(self, size: int, phase: Literal["start", "check", "hold", "probe"], at_once: bool = False) -> None:
        """A new size. A larger one opens `BURST` new slots at once, the rest over one round trip: each good
        answer opens its share (the rest over the slots open, as many answers as a round trip brings), so a
        window grown past an unpublished limit meets it after a few tries, not a burst of them. `at_once`: all
        now (a published pace, not the window, then spaces the tries)."""
        self._account()
        grew = size > self.size
        self.size = max(1, min(self.ceiling, size))
        self.open = self.size if at_once else min(self.size, self.open + BURST) if grew else min(self.open, self.size)
        self._step = max(1, math.ceil((self.size - self.open) / self.open))   # the rest over one round trip
        if phase != self._phase or phase == "hold":
            self._held_rounds = 0
        self._phase = phase
        self._new_round()
        if grew:
            self._wake()
            if self._on_grow is not None:
                self._on_grow(self.size)

    def _new_round(self) -> None:
        self._account()
        self._round = _Round(self._round.number + 1, self.size, self._changed_at, self._area, self._opened)
