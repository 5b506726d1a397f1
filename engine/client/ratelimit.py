"""Pacing model calls to what a provider allows: one budget per endpoint and API key.

A `Budget` holds two token buckets, one for requests and one for tokens, refilled at the rate the provider
allows. The rate comes from the provider's rate-limit headers (OpenAI's `x-ratelimit-*`, Anthropic's
`anthropic-ratelimit-*`), from a `rate_limit:` declared in models.yaml, or, where neither says anything, from
the 429 answers themselves (AIMD: halve the rate on a 429, add a little back with each success). Until a
first reply has said what the limits are (or models.yaml declares them), one call goes alone and the others
wait for its reply (`probe`): a burst of every worker at once would only meet the limit as a storm of 429s. A call
reserves its cost before it is sent and waits until the buckets have refilled it; reservations are taken in
order, so waiting calls go first come, first served. The buckets are plain data over the times passed in;
the client does the sleeping, and bounds every wait by the call's deadline.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from engine.base.jsontext import dumps_compact
from engine.model.model_config import ModelConfig, RateLimit

__all__ = ["Bucket", "Budget", "Limit", "Published", "Ticket", "budget_key", "key_digest", "parse_duration",
           "parse_reset", "read_headers", "request_tokens"]

RATE_MARGIN = 0.98          # run a little under a known rate: the server's clock and rounding, not ours, decide
MAX_RESET_S = 86400.0       # a reset further off than a day is not a rate this module can pace to
MIN_RATE = 1.0 / 600.0      # the slowest pace (one call in ten minutes): every wait stays finite
AIMD_WINDOW_S = 2.0         # sends counted to estimate the rate a first 429 halves
AIMD_MIN_SENDS = 4          # fewer sends than this tell no rate
AIMD_MIN_SPAN_S = 0.25      # sends closer together than this count as spread over it
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
        """The refill per second it implies (what is used comes back by the reset), or None when it cannot tell."""
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
    """What one budget is shared by: the endpoint (host, port and path of `base_url`) and the key's digest."""
    try:
        parts = urlsplit(model.base_url or "")
        endpoint = f"{(parts.hostname or '').lower()}:{parts.port or ''}{parts.path.rstrip('/')}"
    except ValueError:
        endpoint = model.base_url or ""
    return f"{endpoint}#{digest}"


@dataclass
class Bucket:
    """A token bucket as data: up to `capacity`, refilled at `rate` a second, holding `level` at time `at`.

    `reserve` may take the level below zero: the caller then waits until the refill has paid the debt back,
    so callers that reserve in turn are let through in turn.
    """

    capacity: float
    rate: float
    level: float
    at: float

    def refill(self, now: float) -> None:
        """Bring the level up to `now`."""
        if now > self.at:
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
            self.at = now

    def reserve(self, cost: float, now: float) -> float:
        """Take `cost` (at most the capacity, so any cost passes in time); the seconds to wait before using it."""
        self.refill(now)
        self.level -= min(cost, self.capacity)
        return 0.0 if self.level >= 0 else -self.level / self.rate

    def refund(self, cost: float, now: float) -> None:
        """Give back a reservation that was not used."""
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


@dataclass(frozen=True)
class Ticket:
    """One call's reservation: its costs, the seconds it waits, when it goes out, and what was reserved before it."""

    requests: float
    tokens: float
    wait: float
    sends_at: float
    requests_before: float
    tokens_before: float


class Budget:
    """What one endpoint and key allow, shared by every model entry that calls it with that key.

    Args:
        clock: Monotonic seconds (the pace is kept in them).
        wall: Seconds since the epoch (for reset times given as dates).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._wall = wall
        self.requests: Bucket | None = None   # None: not paced (nothing known yet)
        self.tokens: Bucket | None = None
        self._declared_rps: float | None = None
        self._declared_tps: float | None = None
        self._published_rps: float | None = None
        self._published_tps: float | None = None
        self._aimd_rps: float | None = None
        self._requests_limit: float | None = None   # the bucket sizes last published
        self._tokens_limit: float | None = None
        self._decreased_at = -math.inf
        self._sends: deque[float] = deque(maxlen=4096)
        self._requests_total = 0.0   # reserved so far: a published `remaining` is matched to the ones after it
        self._tokens_total = 0.0
        self.heard = asyncio.Event()   # set once a reply (or a declared limit) has told what the limits are
        self._probing = False

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
        if limit.requests_per_minute is not None:
            rate = limit.requests_per_minute / 60.0 * RATE_MARGIN
            self._declared_rps = rate if self._declared_rps is None else min(self._declared_rps, rate)
        if limit.tokens_per_minute is not None:
            rate = limit.tokens_per_minute / 60.0 * RATE_MARGIN
            self._declared_tps = rate if self._declared_tps is None else min(self._declared_tps, rate)
        self._tune(self._clock())

    def request_rate(self) -> float | None:
        """Requests a second the budget paces to now, or None when it does not pace requests."""
        return self.requests.rate if self.requests is not None else None

    def reserve(self, tokens: float) -> Ticket:
        """Reserve one request of `tokens`; the ticket says how long to wait before sending it."""
        now = self._clock()
        wait = 0.0
        if self.requests is not None:
            wait = self.requests.reserve(1.0, now)
        if self.tokens is not None:
            wait = max(wait, self.tokens.reserve(tokens, now))
        ticket = Ticket(1.0, float(tokens), wait, now + wait, self._requests_total, self._tokens_total)
        self._requests_total += 1.0
        self._tokens_total += tokens
        self._sends.append(now + wait)
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """Give a ticket back unused (its call gave up before it was sent)."""
        now = self._clock()
        if self.requests is not None:
            self.requests.refund(ticket.requests, now)
        if self.tokens is not None:
            self.tokens.refund(ticket.tokens, now)

    def observe(self, ticket: Ticket, status: int, headers: Mapping[str, str]) -> None:
        """Learn from a response to the ticket's request: its published limits, a 429, or a success."""
        self.hear()
        now = self._clock()
        published = read_headers(headers, self._wall())
        if published is not None:
            self._publish(ticket, published, now)
        if status == 429:
            if self.requests is not None:
                self.requests.lower_to(0.0, now)   # what the server had is spent: start from empty
            current = self._aimd_rps or self.request_rate() or self._recent_rate(now)
            if self._published_rps is None and ticket.sends_at >= self._decreased_at and current is not None:
                self._aimd_rps = max(MIN_RATE, 0.5 * current)
                self._decreased_at = now
                self._tune(now)
                if self.requests is not None:
                    self.requests.lower_to(0.0, now)
        elif status < 300 and self._aimd_rps is not None and self._published_rps is None:
            self._aimd_rps += max(1.0, 0.05 * self._aimd_rps) / max(1.0, self._aimd_rps)
            self._tune(now)

    def _recent_rate(self, now: float) -> float | None:
        """Requests a second sent lately, or None from too few to tell (one refused call says nothing of a rate)."""
        recent = [t for t in self._sends if now - AIMD_WINDOW_S < t <= now]
        if len(recent) < AIMD_MIN_SENDS:
            return None
        return len(recent) / max(recent[-1] - recent[0], AIMD_MIN_SPAN_S)

    def _publish(self, ticket: Ticket, published: Published, now: float) -> None:
        """Take the published rates, and hold no more than the server says is left."""
        new = (self.requests is None, self.tokens is None)
        rps, tps = published.requests.rate(), published.tokens.rate()
        if rps is not None:
            self._published_rps = rps * RATE_MARGIN
            self._aimd_rps = None
        if tps is not None:
            self._published_tps = tps * RATE_MARGIN
        if published.requests.limit is not None:
            self._requests_limit = published.requests.limit
        if published.tokens.limit is not None:
            self._tokens_limit = published.tokens.limit
        self._tune(now)
        since = max(0.0, now - ticket.sends_at)
        for bucket, limit, first, after in (
                (self.requests, published.requests, new[0],
                 self._requests_total - ticket.requests_before - ticket.requests),
                (self.tokens, published.tokens, new[1], self._tokens_total - ticket.tokens_before - ticket.tokens)):
            if bucket is None or limit.remaining is None:
                continue
            # The server counted this request and those before it; the ones reserved after it are ours to count.
            left = limit.remaining + since * bucket.rate - max(0.0, after)
            if first:
                bucket.refill(now)
                bucket.level = min(bucket.capacity, left)
            else:
                bucket.lower_to(left, now)

    def _tune(self, now: float) -> None:
        """Set the buckets to the lowest known rate (declared, published, AIMD)."""
        rps = _lowest(self._declared_rps, self._published_rps, self._aimd_rps)
        tps = _lowest(self._declared_tps, self._published_tps)
        self.requests = _retuned(self.requests, rps, self._requests_limit, now)
        self.tokens = _retuned(self.tokens, tps, self._tokens_limit, now)


def _lowest(*rates: float | None) -> float | None:
    known = [r for r in rates if r is not None]
    return min(known) if known else None


def _retuned(bucket: Bucket | None, rate: float | None, limit: float | None, now: float) -> Bucket | None:
    """The bucket at `rate`: a published limit is its size, else one second's worth (a burst no provider refuses)."""
    if rate is None:
        return None
    capacity = max(1.0, limit if limit is not None else rate)
    if bucket is None:
        return Bucket(capacity=capacity, rate=max(MIN_RATE, rate), level=capacity, at=now)
    bucket.retune(capacity, max(MIN_RATE, rate), now)
    return bucket
