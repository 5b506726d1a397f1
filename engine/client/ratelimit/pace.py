"""One resource's pace (requests, or tokens): a token bucket at the lowest rate known from what is declared, what
the provider publishes and what its 429s taught, never holding more than one second's worth (`BURST_S`).

A refusal the pace did not foresee lowers the rate (x `BACKOFF` of what was actually sent, as AIMD does;
x `EDGE_BACKOFF` when the try went at the bucket's very edge). While calls succeed the rate climbs back as TCP
CUBIC's window does: quickly at first, slowly near the rate that was refused (reached again after `RECOVERY_S`),
then probing beyond it, until the published or declared limits, which stay a ceiling, bind again. A refusal below
the rate refused last time sets that mark lower still (CUBIC's fast convergence): the limit is under both, and a
pace climbing back to the last refused rate would only be refused again. Plain data over
the times passed in.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from engine.client.ratelimit.headers import Limit, fit_bucket

__all__ = ["BACKOFF", "BURST_S", "RATE_MARGIN", "Bucket", "Pace"]

RATE_MARGIN = 0.98          # run a little under a known rate and size: the server's clock and rounding decide
EDGE_S = 0.1                # a refused try that left less than this many seconds' worth in the bucket was at its edge
MIN_RATE = 1.0 / 600.0      # the slowest pace (one call in ten minutes): every wait stays finite
BURST_S = 1.0               # a burst of one second's worth: what a limit enforced over any period allows
BACKOFF = 0.7               # a refusal the pace did not foresee multiplies the rate by this
EDGE_BACKOFF = 0.95         # ...and one at the bucket's edge (the rate a little too fast) by this
RECOVERY_S = 10.0           # while calls succeed, a lowered rate is back where it was refused after this long
RECENT_S = 2.0              # sends counted to estimate the rate a refusal lowers
RECENT_MIN_SENDS = 4        # fewer sends than this tell no rate
RECENT_MIN_SPAN_S = 0.25    # sends closer together than this count as spread over it
FIT_POINTS = 32             # the replies' (remaining, reset) pairs a bucket is fitted to


@dataclass
class Bucket:
    """A token bucket as data: up to `capacity`, refilled at `rate` a second, holding `level` at time `at`."""

    capacity: float
    rate: float
    level: float
    at: float

    def refill(self, now: float) -> None:
        """Bring the level up to `now`."""
        if now > self.at:
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
            self.at = now

    def wait_for(self, cost: float, now: float) -> float:
        """Seconds until `cost` (at most the capacity, so any cost passes in time) is in the bucket."""
        self.refill(now)
        short = min(cost, self.capacity) - self.level
        return 0.0 if short <= 0 else short / self.rate

    def take(self, cost: float, now: float) -> None:
        """Take `cost` (at most the capacity) now."""
        self.refill(now)
        self.level -= min(cost, self.capacity)

    def refund(self, cost: float, now: float) -> None:
        """Give back what was taken and not used."""
        self.refill(now)
        self.level = min(self.capacity, self.level + min(cost, self.capacity))

    def lower_to(self, level: float, now: float) -> None:
        """Hold no more than `level` (what the server says is left)."""
        self.refill(now)
        self.level = min(self.level, level)

    def retune(self, capacity: float, rate: float, now: float) -> None:
        """A new size and refill rate from now on; what was earned so far is kept."""
        self.refill(now)
        self.capacity = capacity
        self.rate = rate
        self.level = min(self.level, capacity)



@dataclass
class _Seen:
    """The server's bucket as a reply showed it: what it left for the tries it had not counted (`left`, at
    `at`), and what this pace let through since. Refilled at the published rate, not at this pace's: what
    another user of the bucket took is told apart from how fast this pace goes."""

    left: float
    at: float
    taken: float = 0.0


class Pace:
    """One resource's pace (requests, or tokens): its declared, published and learned limits and its bucket."""

    def __init__(self) -> None:
        self.bucket: Bucket | None = None    # None: not paced (nothing known)
        self.declared: float | None = None
        self.published: float | None = None        # the rate the headers give, a little under it
        self.published_size: float | None = None   # the bucket size they give
        self.fitted = False                        # both from several replies (`fit_bucket`)
        self.learned: float | None = None          # a rate refusals lowered it to, climbing back
        self.refused_rate = 0.0                    # the rate it was lowered from
        self.adjusted_at = -math.inf               # when a refusal last changed it
        self.total = 0.0                           # let through so far
        self.written = 0.0                         # of it, written to the server
        self.unsent = 0.0                          # let through, not yet written nor given back
        self._seen: _Seen | None = None   # the server's bucket as the last reply showed it
        self.share = 1.0   # of the rate and size it goes at (less while others may be spending the same bucket)
        self._points: deque[tuple[float, float]] = deque(maxlen=FIT_POINTS)
        self._granted: deque[tuple[float, float]] = deque(maxlen=4096)   # (when, cost) of recent tries

    def rate(self) -> float | None:
        """The rate it paces to now (the lowest known), or None."""
        return _lowest(self.declared, self.published, self.learned)

    def ceiling(self) -> float | None:
        """The rate it climbs back to: the declared or published one."""
        return _lowest(self.declared, self.published)

    def tune(self, now: float) -> None:
        """The bucket at the lowest rate known, of one second's worth at most (the published size, if smaller),
        times its `share`."""
        rate = self.rate()
        if rate is None:
            self.bucket = None
            return
        rate = max(MIN_RATE, rate * self.share)
        size = rate * BURST_S
        if self.published_size is not None:
            size = min(size, self.published_size * RATE_MARGIN * self.share)
        size = max(1.0, size)
        if self.bucket is None:
            self.bucket = Bucket(capacity=size, rate=rate, level=size, at=now)
        else:
            self.bucket.retune(size, rate, now)

    def wait_s(self, cost: float, now: float) -> float:
        """Seconds until a try of `cost` may go."""
        return 0.0 if self.bucket is None else self.bucket.wait_for(cost, now)

    def queue_wait_s(self, cost: float, now: float) -> float:
        """Seconds until `cost` (the costs of the tries waiting before one, and its own) is paid at the pace."""
        if self.bucket is None:
            return 0.0
        self.bucket.refill(now)
        return max(0.0, cost - self.bucket.level) / self.bucket.rate

    def grant(self, cost: float, now: float) -> float | None:
        """Let a try of `cost` through now; what it left in the bucket (None: not paced)."""
        self.total += cost
        self.unsent += cost
        self._granted.append((now, cost))
        if self._seen is not None:
            self._seen.taken += cost
        if self.bucket is None:
            return None
        self.bucket.take(cost, now)
        return self.bucket.level

    def sent(self, cost: float) -> float:
        """A try let through is written to the server; what was written before it."""
        before = self.written
        self.written += cost
        self.unsent = max(0.0, self.unsent - cost)
        return before

    def refund(self, cost: float, now: float) -> None:
        """A try let through was not sent: its cost back."""
        self.unsent = max(0.0, self.unsent - cost)
        self.uncounted(cost)
        if self.bucket is not None:
            self.bucket.refund(cost, now)

    def uncounted(self, cost: float) -> None:
        """A try let through took nothing of the server's bucket (never sent, or refused)."""
        if self._seen is not None:
            self._seen.taken -= cost

    def not_counted(self, before: float, cost: float) -> float:
        """What the server had not counted when it counted a try (written after it, or not written yet)."""
        return self.written - before - cost + self.unsent

    def granted_since(self, since: float) -> float:
        """What was let through after `since`."""
        return sum(cost for at, cost in self._granted if at > since)

    def recent_rate(self, now: float) -> float | None:
        """What was let through a second lately, or None from too few tries to tell."""
        recent = [(at, cost) for at, cost in self._granted if now - RECENT_S < at <= now]
        if len(recent) < RECENT_MIN_SENDS:
            return None
        return sum(cost for _, cost in recent) / max(recent[-1][0] - recent[0][0], RECENT_MIN_SPAN_S)

    def publish(self, limit: Limit, *, counted: float, after: float, since: float, now: float) -> float | None:
        """Take what one reply publishes of this resource.

        Args:
            limit: The published figures.
            counted: What this pace had written when the server counted the reply's request (that one included).
            after: What the server had not counted as it counted the reply's request (let through and written
                after it, or not yet written): ours to count.
            since: Seconds since that request was written.
            now: The time now.

        Returns:
            What the server counted that this pace did not expect (another user of the same bucket, or a pace
            too fast), or None when nothing is compared.
        """
        if limit.remaining is not None and limit.reset_s is not None:
            self._points.append((limit.remaining, limit.reset_s))
        fitted = fit_bucket(self._points)
        if fitted is not None:
            self.fitted = True
            self.published_size, rate = fitted
            self.published = rate * RATE_MARGIN
        elif not self.fitted:   # a fit, once found, stands until a new one (steady pacing spreads no points)
            rate_ = limit.rate()
            if rate_ is not None and limit.remaining is not None:
                # `remaining` is what the counted bucket holds now: however large `limit` says it is, it refills
                # no faster than what is left in it and what this pace had sent by then, each second
                rate_ = min(rate_, (limit.remaining + counted) / BURST_S)
            if rate_ is not None:
                self.published = rate_ * RATE_MARGIN
            if limit.limit is not None:
                self.published_size = limit.limit
        if self.learned is not None and self.published is not None and self.learned >= self.published:
            self.learned = None
        new = self.bucket is None
        self.tune(now)
        if self.bucket is None or limit.remaining is None:
            return None
        # The server counted this request and those before it, and its bucket refilled since, up to its size;
        # the tries it has not counted yet are ours to count.
        size = self.published_size if self.published_size is not None else self.bucket.capacity
        rate = self.published / RATE_MARGIN if self.published is not None else self.bucket.rate
        refilled = limit.remaining + since * rate
        left = min(size, refilled) - max(0.0, after)
        unexpected = None
        seen = self._seen
        if seen is not None:   # what it should hold had the server counted only this pace's tries since
            expected = seen.left + (now - seen.at) * rate
            if max(expected, refilled) < size:   # a bucket that may have filled up hides what was taken of it
                unexpected = expected - seen.taken - left
        self._seen = _Seen(left, now)
        self.bucket.refill(now)
        if new:
            self.bucket.level = min(self.bucket.capacity, left)
            return None
        self.bucket.lower_to(left, now)
        return unexpected

    def refused(self, sent_at: float, left: float | None, now: float) -> None:
        """A 429 to a try this pace let through, leaving `left` in the bucket: empty the bucket and, unless an
        earlier refusal already answered for the try, lower the rate the budget thought there was room for: by
        `BACKOFF` of what was sent lately, or by `EDGE_BACKOFF` when the try went at the bucket's edge (the rate
        is then only a little too fast)."""
        rate = self.rate()
        if self.bucket is not None:
            self.bucket.lower_to(0.0, now)
        if sent_at < self.adjusted_at:
            return
        at_edge = left is not None and rate is not None and left < max(1.0, EDGE_S * rate)
        base = rate if at_edge else _lowest(rate, self.recent_rate(now))
        if base is None:
            return   # one refused try tells no rate: the server's retry-after paces it
        self.refused_rate = base if base >= self.refused_rate else base * (1.0 + BACKOFF) / 2.0
        self.learned = max(MIN_RATE, (EDGE_BACKOFF if at_edge else BACKOFF) * base)
        self.adjusted_at = now
        self.tune(now)
        if self.bucket is not None:
            self.bucket.lower_to(0.0, now)

    def join(self, other: Pace, now: float) -> None:
        """Pace `other`'s tries here too (the server counts both in one bucket). The learned rate is the sum of
        the two, which together went at it (none, if either has none: it went at the ceiling alone); the
        bucket holds what the lower of the two held (each spent it unaware of the other); a refusal of a try
        either let through before now was of the two spending one bucket, and lowers no rate."""
        if self.learned is None or other.learned is None:
            self.learned = None
        else:
            self.learned += other.learned
            self.refused_rate += other.refused_rate
            ceiling = self.ceiling()
            if ceiling is not None and self.learned >= ceiling:
                self.learned = None
        self.adjusted_at = now
        self.tune(now)
        if self.bucket is not None and other.bucket is not None:
            other.bucket.refill(now)
            self.bucket.lower_to(other.bucket.level, now)

    def succeeded(self, sent_at: float, now: float) -> None:
        """A try this pace let through was answered: a lowered rate climbs back (`RECOVERY_S`)."""
        if self.learned is None or sent_at < self.adjusted_at:
            return
        # CUBIC: BACKOFF x refused at the refusal, the refused rate after RECOVERY_S, then faster and faster
        lag = (now - self.adjusted_at - RECOVERY_S) / RECOVERY_S
        self.learned = max(self.learned, self.refused_rate * (1.0 + (1.0 - BACKOFF) * lag ** 3))
        ceiling = self.ceiling()
        if ceiling is not None and self.learned >= ceiling:
            self.learned = None
        self.tune(now)


def _lowest(*rates: float | None) -> float | None:
    """The lowest of the rates known, or None."""
    known = [r for r in rates if r is not None]
    return min(known) if known else None
