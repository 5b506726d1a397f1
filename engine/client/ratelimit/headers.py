"""What a provider publishes of its rate limits: the `x-ratelimit-*` / `anthropic-ratelimit-*` headers read as
`Limit`s, and the bucket a run of their (remaining, reset) pairs describes (`fit_bucket`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

__all__ = ["Limit", "Published", "fit_bucket", "parse_duration", "parse_reset", "read_headers"]

MAX_RESET_S = 86400.0       # a reset further off than a day is not a rate a budget can pace to
FIT_PRECISION = 0.02        # a fit whose rate is less sure than this (its standard error, relative) is not taken
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


# Each provider's header names for (limit, remaining, reset), with `{}` for "requests" or "tokens".
_HEADER_NAMES = (("x-ratelimit-limit-{}", "x-ratelimit-remaining-{}", "x-ratelimit-reset-{}"),
                 ("anthropic-ratelimit-{}-limit", "anthropic-ratelimit-{}-remaining", "anthropic-ratelimit-{}-reset"))


def _limit(headers: Mapping[str, str], names: tuple[str, str, str], resource: str, now_epoch: float) -> Limit:
    limit, remaining, reset = (name.format(resource) for name in names)
    text = headers.get(reset)
    return Limit(_number(headers.get(limit)), _number(headers.get(remaining)),
                 None if text is None else parse_reset(text, now_epoch))


def read_headers(headers: Mapping[str, str], now_epoch: float) -> Published | None:
    """The rate limits a response publishes (OpenAI's `x-ratelimit-*`, Anthropic's `anthropic-ratelimit-*`), or None.

    Args:
        headers: The response headers (case-insensitive, as aiohttp gives them).
        now_epoch: The time now (seconds since the epoch), for Anthropic's reset times.
    """
    for names in _HEADER_NAMES:
        if names[0].format("requests") in headers or names[0].format("tokens") in headers:
            return Published(_limit(headers, names, "requests", now_epoch),
                             _limit(headers, names, "tokens", now_epoch))
    return None


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

