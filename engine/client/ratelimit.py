"""Pacing model calls to what a provider allows: one budget per endpoint, API key and model.

A `Budget` paces the calls to one model at one endpoint with one key; every entry naming that model there
shares it, and so do other models' entries once the provider's replies show that their limit is one and the
same (`Budget.absorb`). It holds a `Pace` for requests and one for tokens: a token bucket refilled at the lowest
rate known, of the smallest size known, from three sources:

- declared: a `rate_limit:` in models.yaml;
- published: the provider's rate-limit headers (OpenAI's `x-ratelimit-*`, Anthropic's `anthropic-ratelimit-*`),
  read as a hint. `remaining` and `reset` describe the bucket that is counted (remaining = size - rate x
  reset, as the bucket is full again after `reset`): fitted over recent replies (`fit_bucket`) they give that
  bucket's real size and rate even where `limit` counts another period (a per-minute figure beside a
  one-second bucket); until they do, a single reply gives (limit - remaining) / reset, but no more a second
  than the bucket holds now (`remaining` and what was sent by then);
- learned: a 429 is the truth. A refusal the pace did not foresee lowers the rate (x `BACKOFF` of what was
  actually sent, as AIMD does; x `EDGE_BACKOFF` when the try went at the bucket's very edge, the rate only a
  little too fast). While calls succeed the rate climbs back as TCP CUBIC's window does: quickly at first,
  slowly near the rate that was refused (reached again after `RECOVERY_S`), then probing beyond it, until the
  published or declared limits, which stay a ceiling, bind again.

The bucket never holds more than one second's worth (`BURST_S`) whatever size is published: a per-minute limit
may be enforced over any shorter period, and a burst of a minute's worth would meet it as a storm of 429s.
Calls wait for the pace in turn (`take`: first come, first served, and a change of pace reaches the calls
already waiting). Until a first reply has said what the limits are (or models.yaml declares them), one call goes
alone and the others wait for its reply (`probe`): a burst of every worker at once would only meet the limit as
a storm of 429s. The buckets are plain data over the times passed in; every wait is bounded by the call's
deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import re
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from engine.base.jsontext import dumps_compact
from engine.model.model_config import ModelConfig, RateLimit

__all__ = ["Bucket", "Budget", "Limit", "Pace", "PastDeadline", "Published", "Ticket", "budget_key", "fit_bucket",
           "key_digest", "parse_duration", "parse_reset", "read_headers", "request_tokens"]

RATE_MARGIN = 0.98          # run a little under a known rate and size: the server's clock and rounding decide
EDGE_S = 0.1                # a refused try that left less than this many seconds' worth in the bucket was at its edge
MAX_RESET_S = 86400.0       # a reset further off than a day is not a rate this module can pace to
MIN_RATE = 1.0 / 600.0      # the slowest pace (one call in ten minutes): every wait stays finite
BURST_S = 1.0               # a burst of one second's worth: what a limit enforced over any period allows
BACKOFF = 0.7               # a refusal the pace did not foresee multiplies the rate by this
EDGE_BACKOFF = 0.95         # ...and one at the bucket's edge (the rate a little too fast) by this
RECOVERY_S = 10.0           # while calls succeed, a lowered rate is back where it was refused after this long
RECENT_S = 2.0              # sends counted to estimate the rate a refusal lowers
RECENT_MIN_SENDS = 4        # fewer sends than this tell no rate
RECENT_MIN_SPAN_S = 0.25    # sends closer together than this count as spread over it
FIT_POINTS = 32             # the replies' (remaining, reset) pairs a bucket is fitted to
FIT_PRECISION = 0.02        # a fit whose rate is less sure than this (its standard error, relative) is not taken
SHARED_WINDOW_S = 2.0       # how far back another model's use of a budget's bucket is looked for
IMAGE_TOKENS = 1000         # an image part's cost estimate (providers charge a few hundred to ~1,500)
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_DURATION = re.compile(r"(?:\d+(?:\.\d*)?(?:ms|us|µs|ns|h|m|s))+")
_PART = re.compile(r"(\d+(?:\.\d*)?)(ms|us|µs|ns|h|m|s)")


def parse_duration(text: str) -> float | None:
    """Seconds in a Go-style duration (`6m0s`, `1s`, `20ms`, `1h2m3.5s`) or a plain number of seconds, else None."""
    text = text.strip()
    if len(text) > 64:
        return None
    if _DURATION.fullmatch(text):
        return sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(text))
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def parse_reset(text: str, now_epoch: float) -> float | None:
    """Seconds until a reset: a duration (OpenAI) or an RFC 3339 time (Anthropic); None when unreadable or too far."""
    seconds = parse_duration(text)
    if seconds is None and 10 <= len(text) <= 64:
        try:
            when = datetime.fromisoformat(text.strip())
        except ValueError:
            return None
        if when.tzinfo is None:
            return None
        seconds = max(0.0, when.timestamp() - now_epoch)
    if seconds is None or seconds > MAX_RESET_S:
        return None
    return seconds


def _number(text: str | None) -> float | None:
    if text is None or len(text) > 32:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


@dataclass(frozen=True)
class Limit:
    """One published limit: the bucket's size, what is left in it, seconds until it is full again (None: not sent)."""

    limit: float | None = None
    remaining: float | None = None
    reset_s: float | None = None

    def rate(self) -> float | None:
        """The refill per second it implies on its own (what is used comes back by the reset), or None when it
        cannot tell."""
        if self.limit is None or self.remaining is None or self.reset_s is None:
            return None
        used = self.limit - self.remaining
        if used <= 0 or self.reset_s <= 0:
            return None
        return used / self.reset_s


@dataclass(frozen=True)
class Published:
    """What one response's rate-limit headers say, for requests and for tokens."""

    requests: Limit
    tokens: Limit


def _limit(headers: Mapping[str, str], limit: str, remaining: str, reset: str, now_epoch: float) -> Limit:
    text = headers.get(reset)
    return Limit(_number(headers.get(limit)), _number(headers.get(remaining)),
                 None if text is None else parse_reset(text, now_epoch))


def read_headers(headers: Mapping[str, str], now_epoch: float) -> Published | None:
    """The rate limits a response publishes (OpenAI's `x-ratelimit-*`, Anthropic's `anthropic-ratelimit-*`), or None.

    Args:
        headers: The response headers (case-insensitive, as aiohttp gives them).
        now_epoch: The time now (seconds since the epoch), for Anthropic's reset times.
    """
    if "x-ratelimit-limit-requests" in headers or "x-ratelimit-limit-tokens" in headers:
        return Published(
            _limit(headers, "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
                   "x-ratelimit-reset-requests", now_epoch),
            _limit(headers, "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens",
                   "x-ratelimit-reset-tokens", now_epoch))
    if "anthropic-ratelimit-requests-limit" in headers or "anthropic-ratelimit-tokens-limit" in headers:
        return Published(
            _limit(headers, "anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining",
                   "anthropic-ratelimit-requests-reset", now_epoch),
            _limit(headers, "anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining",
                   "anthropic-ratelimit-tokens-reset", now_epoch))
    return None


def _text_bytes(content: Any) -> int:
    """UTF-8 bytes of what a message says: text, text parts, a tool call or result as sent; an image at a fixed
    estimate. Every API's shapes: OpenAI's `content` parts, Anthropic's blocks, Gemini's `parts`."""
    if isinstance(content, str):
        return len(content.encode("utf-8", "replace"))
    if isinstance(content, list):
        return sum(_text_bytes(part) for part in content)
    if not isinstance(content, Mapping):
        return 0
    if isinstance(content.get("text"), str):
        return len(content["text"].encode("utf-8", "replace"))
    if content.get("type") in ("image", "image_url") or "inlineData" in content or "fileData" in content:
        return 4 * IMAGE_TOKENS
    try:   # a tool call or a tool's result: its JSON text, as the provider counts it
        return len(dumps_compact(content))
    except TypeError:
        return 0


def request_tokens(body: Mapping[str, Any]) -> int:
    """The tokens a request costs against a token limit: its reply's room and its prompt at 4 bytes a token.

    Reads every API's wire body: `messages` (OpenAI, Anthropic; with Anthropic's `system`), `contents` and
    `systemInstruction` (Gemini), `prompt` / `input`; the reply's room is `max_tokens` or Gemini's
    `generationConfig.maxOutputTokens`.
    """
    size = 0
    for key in ("messages", "contents"):
        turns = body.get(key)
        if isinstance(turns, list):
            for turn in turns:
                if isinstance(turn, Mapping):   # a turn's framing: a few tokens
                    size += 16 + _text_bytes(turn.get("content", turn.get("parts")))
                    size += _text_bytes(turn.get("tool_calls"))
    size += _text_bytes(body.get("system"))
    instruction = body.get("systemInstruction")
    if isinstance(instruction, Mapping):
        size += _text_bytes(instruction.get("parts"))
    for key in ("prompt", "input"):
        value = body.get(key)
        if isinstance(value, str):
            size += len(value.encode("utf-8", "replace"))
        elif isinstance(value, list):
            size += sum(len(v.encode("utf-8", "replace")) for v in value if isinstance(v, str))
    tools = body.get("tools")
    if isinstance(tools, list):
        size += 64 * len(tools)   # a rough floor: definitions are sent as text
    reply = body.get("max_tokens")
    config = body.get("generationConfig")
    if reply is None and isinstance(config, Mapping):
        reply = config.get("maxOutputTokens")
    return size // 4 + (reply if isinstance(reply, int) and not isinstance(reply, bool) and reply > 0 else 0)


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


def fit_bucket(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """The bucket a provider's (remaining, reset) pairs describe, as (size, refill a second); None when they do not
    tell it to within `FIT_PRECISION` of its rate, or fit no bucket.

    A token bucket is full again `reset` seconds after it holds `remaining`, so remaining = size - rate x reset:
    a least-squares line through the pairs gives both, whatever `limit` says.
    """
    if len(points) < 3:
        return None
    rest = [p[0] for p in points]
    resets = [p[1] for p in points]
    if max(rest) - min(rest) < 2:
        return None
    mean_rest, mean_reset = sum(rest) / len(rest), sum(resets) / len(resets)
    sxx = sum((t - mean_reset) ** 2 for t in resets)
    if sxx <= 0:
        return None
    rate = -sum((t - mean_reset) * (r - mean_rest) for r, t in points) / sxx
    size = mean_rest + rate * mean_reset
    if rate <= 0 or size < max(rest):
        return None
    # `remaining` is a whole number: the residuals are at least its rounding, whatever the fit
    spread = max(1.0 / 12.0, sum((r - (size - rate * t)) ** 2 for r, t in points) / (len(points) - 2))
    if math.sqrt(spread) > max(2.0, 0.1 * size) or math.sqrt(spread / sxx) > FIT_PRECISION * rate:
        return None
    return size, rate


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
        self._points: deque[tuple[float, float]] = deque(maxlen=FIT_POINTS)
        self._granted: deque[tuple[float, float]] = deque(maxlen=4096)   # (when, cost) of recent tries

    def rate(self) -> float | None:
        """The rate it paces to now (the lowest known), or None."""
        return _lowest(self.declared, self.published, self.learned)

    def ceiling(self) -> float | None:
        """The rate it climbs back to: the declared or published one."""
        return _lowest(self.declared, self.published)

    def tune(self, now: float) -> None:
        """The bucket at the lowest rate known, of one second's worth at most (the published size, if smaller)."""
        rate = self.rate()
        if rate is None:
            self.bucket = None
            return
        rate = max(MIN_RATE, rate)
        size = rate * BURST_S
        if self.published_size is not None:
            size = min(size, self.published_size * RATE_MARGIN)
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
        if self.bucket is not None:
            self.bucket.refund(cost, now)

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
        left = min(size, limit.remaining + since * self.bucket.rate) - max(0.0, after)
        self.bucket.refill(now)
        if new:
            self.bucket.level = min(self.bucket.capacity, left)
            return None
        unexpected = self.bucket.level - left
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
        self.refused_rate = base
        self.learned = max(MIN_RATE, (EDGE_BACKOFF if at_edge else BACKOFF) * base)
        self.adjusted_at = now
        self.tune(now)
        if self.bucket is not None:
            self.bucket.lower_to(0.0, now)

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
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._wall = wall
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
        self._refused_at = -math.inf

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
        published = read_headers(headers, self._wall())
        if published is not None:
            self._publish(ticket, published, now)
        if status == 429:
            self._refused_at = now
            self._unexpected.clear()
            self._unexpected_sum = 0.0
            for pace in self._refused_paces(ticket, published):
                pace.refused(ticket.sent_at, ticket.requests_left if pace is self.requests else ticket.tokens_left,
                             now)
        elif status < 300:
            self.requests.succeeded(ticket.sent_at, now)
            self.tokens.succeeded(ticket.sent_at, now)
        self._changed.set()

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
        since = max(0.0, now - ticket.sent_at)
        unexpected = self.requests.publish(
            published.requests, counted=ticket.requests_before + ticket.requests,
            after=self.requests.not_counted(ticket.requests_before, ticket.requests), since=since, now=now)
        self.tokens.publish(published.tokens, counted=ticket.tokens_before + ticket.tokens,
                            after=self.tokens.not_counted(ticket.tokens_before, ticket.tokens), since=since, now=now)
        if unexpected is not None and self.requests.fitted and now - self._refused_at > SHARED_WINDOW_S:
            self._unexpected.append((now, unexpected))
            self._unexpected_sum += unexpected

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
        for waiter in other._queue:
            if not waiter.turn.done():
                waiter.turn.set_result(None)
        other._changed.set()
        self._changed.set()


def _lowest(*rates: float | None) -> float | None:
    known = [r for r in rates if r is not None]
    return min(known) if known else None
