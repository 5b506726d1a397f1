"""A budget: what one model at one endpoint with one key may send, its calls waiting their turn at its pace.

It holds a `Pace` for requests and one for tokens. Calls wait for the pace in turn (`take`: first come, first
served, and a change of pace reaches the calls already waiting). Until a first reply has said what the limits are
(or models.yaml declares them), one call goes alone and the others wait for its reply (`probe`): a burst of every
worker at once would only meet the limit as a storm of 429s. Budgets of other models on the same endpoint and key
(a group) merge once the provider's replies show that their limit is one and the same (`absorb`): the server
counted about as many requests a budget did not send as another sent, against the bucket as the last reply
showed it (refilled at its published rate, not at the pace's, so a pace slowed by refusals hides nothing). A
budget starting beside others of its group goes at a share of the limit meanwhile. Every wait is bounded by the
call's deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from engine.client.ratelimit.headers import Published, read_headers
from engine.client.ratelimit.pace import RATE_MARGIN, Pace
from engine.model.model_config import ModelConfig, RateLimit

__all__ = ["Budget", "PastDeadline", "Ticket", "budget_key", "key_digest"]

SHARED_WINDOW_S = 2.0       # how far back another model's use of a budget's bucket is looked for
SHARE_S = 1.0               # how long a budget starting beside others of its group goes at its share of the limit


def key_digest(api_key: str | None) -> str:
    """A digest an API key's budget is found by (the key itself is kept nowhere here)."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:16] if api_key else "-"


def budget_key(model: ModelConfig, digest: str) -> str:
    """The endpoint (host, port and path of `base_url`) and the key's digest: the budgets of the models called
    there with that key (one per model id) may turn out to share one limit."""
    try:
        parts = urlsplit(model.base_url or "")
        endpoint = f"{(parts.hostname or '').lower()}:{parts.port or ''}{parts.path.rstrip('/')}"
    except ValueError:
        endpoint = model.base_url or ""
    return f"{endpoint}#{digest}"


@dataclass
class Ticket:
    """One call's try let through: its costs, how long it waited, when it was let through and when its request
    was written (the server counts it from then), and what had been written before it."""

    requests: float
    tokens: float
    granted_at: float
    sent_at: float
    owner: Budget                        # the budget that let it through (the one to tell how it went)
    requests_before: float = 0.0         # written before it (set as it is written)
    tokens_before: float = 0.0
    requests_left: float | None = None   # what it left in each bucket (None: not paced)
    tokens_left: float | None = None
    waited: float = 0.0
    state: str = "granted"               # then "written", or "returned" (never sent: its cost given back)


class PastDeadline(Exception):
    """The pace would let a call go only after its deadline."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"{wait_s:.0f} s")
        self.wait_s = wait_s


class _Waiter:
    """A call waiting for its turn at the pace."""

    __slots__ = ("ticket", "tokens", "turn")

    def __init__(self, tokens: float, turn: asyncio.Future[None]) -> None:
        self.tokens = tokens
        self.turn = turn                      # done: its turn came (with `ticket`: let through already)
        self.ticket: Ticket | None = None


class Budget:
    """What one model at one endpoint with one key may send, shared by every entry that calls it so (and by other
    models' entries whose limit the replies show to be the same, `absorb`).

    Args:
        clock: Monotonic seconds (the pace is kept in them).
        wall: Seconds since the epoch (for reset times given as dates).
        group: The budgets of the other models at the same endpoint with the same key (`budget_key`), this one
            added: those whose limit may turn out to be this one's.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 group: list[Budget] | None = None) -> None:
        self._clock = clock
        self._wall = wall
        self._group = group if group is not None else []
        self._group.append(self)
        self.requests = Pace()
        self.tokens = Pace()
        self.heard = asyncio.Event()   # set once a reply (or a declared limit) has told what the limits are
        self._probing = False
        self._queue: deque[_Waiter] = deque()
        self._changed = asyncio.Event()   # the pace changed: the first waiting call looks again
        self.absorbed_into: Budget | None = None
        self._unexpected: deque[tuple[float, float]] = deque()   # (when, count) others took, lately
        self._unexpected_sum = 0.0
        self._queued_tokens = 0.0   # the waiting tries' tokens
        self._sharing_until: float | None = None   # going at a share of the rate until then (`_start_at_a_share`)

    def active(self) -> Budget:
        """The budget that paces this one's calls now (itself, or the one that absorbed it)."""
        budget = self
        while budget.absorbed_into is not None:
            budget = budget.absorbed_into
        return budget

    def probe(self) -> bool | None:
        """Before the first reply: True, send this call alone (its reply tells the limits); None, wait for `heard`.

        False once the limits are known (or nothing more will be learnt by waiting): send.
        """
        if self.heard.is_set():
            return False
        if self._probing:
            return None
        self._probing = True
        return True

    def hear(self) -> None:
        """The first call's try is over (a reply, or a failure that told nothing): the calls held back may go."""
        self._probing = False
        self.heard.set()

    def declare(self, limit: RateLimit | None) -> None:
        """Add a `rate_limit:` declared in models.yaml (the lowest declared rate wins)."""
        if limit is None:
            return
        self.heard.set()   # a declared limit paces from the first call: nothing to probe
        now = self._clock()
        for pace, per_minute in ((self.requests, limit.requests_per_minute), (self.tokens, limit.tokens_per_minute)):
            if per_minute is not None:
                rate = per_minute / 60.0 * RATE_MARGIN
                pace.declared = rate if pace.declared is None else min(pace.declared, rate)
                pace.tune(now)
        self._changed.set()

    def request_rate(self) -> float | None:
        """Requests a second the budget paces to now, or None when it does not pace requests."""
        return self.requests.bucket.rate if self.requests.bucket is not None else None

    def published_rate(self, tokens: float) -> float | None:
        """Calls of `tokens` each a second that the pace lets go, where the provider publishes its limits (None:
        it publishes none): the provider has said it takes that many, so a window may open to them at once."""
        rates = []
        if self.requests.published is not None and self.requests.bucket is not None:
            rates.append(self.requests.bucket.rate)
        if self.tokens.published is not None and self.tokens.bucket is not None and tokens > 0:
            rates.append(self.tokens.bucket.rate / tokens)
        return min(rates) if rates else None

    def wait_s(self, tokens: float) -> float:
        """Seconds until a try of `tokens` could go at the pace, were no call waiting before it."""
        now = self._clock()
        return max(self.requests.wait_s(1.0, now), self.tokens.wait_s(tokens, now))

    def grant(self, tokens: float) -> Ticket:
        """Let a try of `tokens` through now (the caller has waited `wait_s`)."""
        now = self._clock()
        ticket = Ticket(1.0, float(tokens), now, now, self)
        ticket.requests_left = self.requests.grant(1.0, now)
        ticket.tokens_left = self.tokens.grant(tokens, now)
        return ticket

    def grant_now(self, tokens: float) -> Ticket | None:
        """A ticket at once when no call waits before this one and the pace lets it go now, else None."""
        if self._queue or self.wait_s(tokens) > 0:
            return None
        return self.grant(tokens)

    async def take(self, tokens: float, deadline: float) -> Ticket:
        """Wait for this try's turn and for its cost at the pace; the ticket it goes out with.

        Args:
            tokens: Its cost against a token limit (`request_tokens`).
            deadline: The monotonic time it must go by.

        Raises:
            PastDeadline: The pace would let it go only after `deadline`.
        """
        budget = self.active()
        ticket = budget.grant_now(tokens)
        if ticket is not None:
            return ticket
        started = self._clock()
        while True:
            ticket = await budget._in_turn(tokens, deadline)
            if ticket is not None:
                ticket.waited = self._clock() - started
                return ticket
            budget = budget.active()   # absorbed while it waited: wait there

    async def _in_turn(self, tokens: float, deadline: float) -> Ticket | None:
        """Queue for the turn, then wait for the cost; None when this budget was absorbed meanwhile."""
        ahead = len(self._queue)
        now = self._clock()
        estimate = max(self.requests.queue_wait_s(1.0 + ahead, now),
                       self.tokens.queue_wait_s(tokens + self._queued_tokens, now))
        if now + estimate > deadline:
            raise PastDeadline(estimate)
        waiter = _Waiter(tokens, asyncio.get_running_loop().create_future())
        self._queue.append(waiter)
        self._queued_tokens += tokens
        if ahead == 0:
            waiter.turn.set_result(None)
        try:
            await waiter.turn
            while self.absorbed_into is None and waiter.ticket is None:
                now = self._clock()
                wait = self.wait_s(tokens)
                if wait <= 0:
                    waiter.ticket = self.grant(tokens)
                    break
                if now + wait > deadline:
                    raise PastDeadline(wait)
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._changed.wait()
            return waiter.ticket
        finally:
            if waiter in self._queue:
                head = self._queue[0] is waiter
                self._queue.remove(waiter)
                self._queued_tokens -= tokens
                if head:
                    self._next_turns()

    def _next_turns(self) -> None:
        """The first waiting try's turn: those whose cost the pace has now are let through at once, in turn (a
        busy event loop then wakes each once, not once per hand-over), and the next one waits for its cost."""
        while self._queue and not self._queue[0].turn.done():
            waiter = self._queue[0]
            if self.absorbed_into is None and self.wait_s(waiter.tokens) <= 0:
                waiter.ticket = self.grant(waiter.tokens)
                self._queue.popleft()
                self._queued_tokens -= waiter.tokens
            waiter.turn.set_result(None)

    def written(self, ticket: Ticket) -> None:
        """The ticket's request is written: the server counts it from now."""
        if ticket.state != "granted":
            return
        ticket.state = "written"
        ticket.sent_at = self._clock()
        ticket.requests_before = self.requests.sent(ticket.requests)
        ticket.tokens_before = self.tokens.sent(ticket.tokens)

    def returned(self, ticket: Ticket) -> None:
        """The ticket's try was never written (stopped, or no connection): its cost back."""
        if ticket.state != "granted":
            return
        ticket.state = "returned"
        now = self._clock()
        self.requests.refund(ticket.requests, now)
        self.tokens.refund(ticket.tokens, now)

    def observe(self, ticket: Ticket, status: int, headers: Mapping[str, str]) -> None:
        """Learn from a response to the ticket's try: its published limits, a 429, or a success."""
        self.hear()
        self.written(ticket)   # a reply came: it was written, whether or not that was told
        if self.absorbed_into is not None:
            return   # the ticket counts in this budget's figures, which pace nothing now
        now = self._clock()
        if self._sharing_until is not None and now >= self._sharing_until:
            self._whole(now)
        if status == 429:   # refused: the server's bucket did not count it
            self.requests.uncounted(ticket.requests)
            self.tokens.uncounted(ticket.tokens)
        published = read_headers(headers, self._wall())
        if published is not None:
            self._publish(ticket, published, now)
        if status == 429:
            for pace in self._refused_paces(ticket, published):
                pace.refused(ticket.sent_at, ticket.requests_left if pace is self.requests else ticket.tokens_left,
                             now)
        elif status < 300:
            self.requests.succeeded(ticket.sent_at, now)
            self.tokens.succeeded(ticket.sent_at, now)
        if published is not None:
            self._join(now)
        self._changed.set()

    def _join(self, now: float) -> None:
        """Pace as one the models whose replies show one limit counting both: absorb any budget of the group
        whose calls this one saw counted."""
        if self.counted_by_others(now) < 3:
            return
        for other in self._group:
            if other.active() is not self and self.shares_a_bucket_with(other.active(), now):
                self.absorb(other.active())

    def _refused_paces(self, ticket: Ticket, published: Published | None) -> tuple[Pace, ...]:
        """The paces a 429 speaks of: the resource its headers show spent, else requests."""
        if published is None:
            return (self.requests,)
        requests_out = published.requests.remaining is not None and published.requests.remaining < 1
        tokens_out = published.tokens.remaining is not None and published.tokens.remaining < ticket.tokens
        if tokens_out and not requests_out:
            return (self.tokens,)
        return (self.requests, self.tokens) if tokens_out else (self.requests,)

    def _publish(self, ticket: Ticket, published: Published, now: float) -> None:
        first = self.requests.bucket is None and self.tokens.bucket is None
        since = max(0.0, now - ticket.sent_at)
        unexpected = self.requests.publish(
            published.requests, counted=ticket.requests_before + ticket.requests,
            after=self.requests.not_counted(ticket.requests_before, ticket.requests), since=since, now=now)
        self.tokens.publish(published.tokens, counted=ticket.tokens_before + ticket.tokens,
                            after=self.tokens.not_counted(ticket.tokens_before, ticket.tokens), since=since, now=now)
        if first:
            self._start_at_a_share(now)
        if unexpected is not None and self.requests.fitted:
            self._unexpected.append((now, unexpected))
            self._unexpected_sum += unexpected

    def _start_at_a_share(self, now: float) -> None:
        """Paced for the first time while other budgets of its group are sending to a published limit too (or
        finding it out), go at a share of the rate and burst for `SHARE_S`: until the replies show whether they
        count in one bucket (`absorb`), each going at the whole of it would be a storm of 429s where they do."""
        sending = sum(1 for other in self._group if other is not self and other.absorbed_into is None
                      and other.requests.total > 0 and (not other.heard.is_set() or other.requests.published
                                                        is not None or other.tokens.published is not None))
        if not sending:
            return
        self._sharing_until = now + SHARE_S
        for pace in (self.requests, self.tokens):
            pace.share = 1.0 / (1 + sending)
            if pace.bucket is not None:
                pace.tune(now)

    def _whole(self, now: float) -> None:
        """Go at the whole rate again (joined, or `SHARE_S` passed without a sign of a shared bucket)."""
        self._sharing_until = None
        for pace in (self.requests, self.tokens):
            if pace.share != 1.0:
                pace.share = 1.0
                pace.tune(now)
        self._changed.set()

    def counted_by_others(self, now: float) -> float:
        """Requests the server counted lately that this budget did not send (once its bucket is known)."""
        while self._unexpected and self._unexpected[0][0] <= now - SHARED_WINDOW_S:
            self._unexpected_sum -= self._unexpected.popleft()[1]
        return self._unexpected_sum if self._unexpected else 0.0

    def shares_a_bucket_with(self, other: Budget, now: float) -> bool:
        """Whether the replies show `other`'s calls counted in this budget's bucket: both publish the same
        fitted bucket, and this one saw about as many requests it did not send as `other` sent."""
        mine, theirs = self.requests, other.requests
        if not (mine.fitted and theirs.fitted and mine.published and theirs.published and mine.published_size
                and theirs.published_size):
            return False
        if abs(mine.published - theirs.published) > 0.1 * mine.published or \
                abs(mine.published_size - theirs.published_size) > 0.1 * mine.published_size:
            return False
        sent = theirs.granted_since(now - SHARED_WINDOW_S)
        counted = self.counted_by_others(now)
        return sent >= 3 and counted >= max(3.0, 0.5 * sent)

    def absorb(self, other: Budget) -> None:
        """Pace `other`'s calls here from now on (its calls waiting now move over)."""
        if other is self or other.active() is self:
            return
        other.absorbed_into = self
        now = self._clock()
        self._whole(now)
        self.requests.join(other.requests, now)
        self.tokens.join(other.tokens, now)
        for waiter in other._queue:
            if not waiter.turn.done():
                waiter.turn.set_result(None)
        other._changed.set()
        self._changed.set()
