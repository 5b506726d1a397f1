"""The rate-limit module as data: header parsing, the token bucket, and a budget over a simulated clock."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from multidict import CIMultiDict

from engine.client import ratelimit, retry
from engine.client.ratelimit import Bucket, Budget, Limit
from engine.errors import HTTPStatusError
from engine.model.model_config import ModelConfig, RateLimit

NOW = 1_800_000_000.0   # a fixed wall clock (seconds since the epoch)


@pytest.mark.parametrize("text, seconds", [
    ("6m0s", 360.0), ("1s", 1.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.5s", 0.5), ("250us", 0.00025),
    ("2", 2.0), ("0", 0.0), ("1.5", 1.5),
    ("", None), ("soon", None), ("-1", None), ("1d", None), ("s", None), ("nan", None), ("inf", None),
    ("1" * 80 + "s", None),
])
def test_durations(text: str, seconds: float | None) -> None:
    got = ratelimit.parse_duration(text)
    assert got == (None if seconds is None else pytest.approx(seconds))


@pytest.mark.parametrize("text, seconds", [
    ("1s", 1.0), ("6m0s", 360.0),
    (datetime.fromtimestamp(NOW + 30, UTC).isoformat().replace("+00:00", "Z"), 30.0),
    (datetime.fromtimestamp(NOW + 1.5, UTC).isoformat(), 1.5),
    (datetime.fromtimestamp(NOW - 10, UTC).isoformat(), 0.0),            # already past: no wait
    ("2026-01-01T00:00:00", None),                                       # no zone: unreadable, not guessed
    ("25h", None),                                                       # further than a day
    ("yesterday at noon", None),
])
def test_reset_times(text: str, seconds: float | None) -> None:
    got = ratelimit.parse_reset(text, NOW)
    assert got == (None if seconds is None else pytest.approx(seconds))


@pytest.mark.parametrize("headers, requests, tokens", [
    ({"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s",
      "x-ratelimit-limit-tokens": "150000", "x-ratelimit-remaining-tokens": "149984",
      "x-ratelimit-reset-tokens": "6ms"},
     Limit(60, 59, 1.0), Limit(150000, 149984, 0.006)),
    ({"X-RateLimit-Limit-Requests": "20", "X-RateLimit-Remaining-Requests": "0",
      "X-RateLimit-Reset-Requests": "1s"},
     Limit(20, 0, 1.0), Limit()),
    ({"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "40",
      "anthropic-ratelimit-requests-reset": datetime.fromtimestamp(NOW + 12, UTC).isoformat(),
      "anthropic-ratelimit-tokens-limit": "40000", "anthropic-ratelimit-tokens-remaining": "39000",
      "anthropic-ratelimit-tokens-reset": datetime.fromtimestamp(NOW + 1.5, UTC).isoformat()},
     Limit(50, 40, 12.0), Limit(40000, 39000, 1.5)),
    ({"x-ratelimit-limit-requests": "lots", "x-ratelimit-remaining-requests": "-3",
      "x-ratelimit-reset-requests": "whenever"},
     Limit(), Limit()),
])
def test_published_headers(headers: dict[str, str], requests: Limit, tokens: Limit) -> None:
    published = ratelimit.read_headers(CIMultiDict(headers), NOW)
    assert published is not None
    for got, want in ((published.requests, requests), (published.tokens, tokens)):
        assert (got.limit, got.remaining) == (want.limit, want.remaining)
        assert got.reset_s == (None if want.reset_s is None else pytest.approx(want.reset_s))


def test_no_rate_limit_headers_publish_nothing() -> None:
    assert ratelimit.read_headers(CIMultiDict({"content-type": "application/json", "retry-after": "1"}), NOW) is None


@pytest.mark.parametrize("limit, rate", [
    (Limit(60, 59, 1.0), 1.0),           # one used, back in a second: a request a second (60 a minute)
    (Limit(20, 10, 0.5), 20.0),
    (Limit(20, 20, 0.0), None),          # nothing used: no rate to tell
    (Limit(20, 5, None), None),
    (Limit(None, 5, 1.0), None),
])
def test_the_rate_a_limit_implies(limit: Limit, rate: float | None) -> None:
    assert limit.rate() == (None if rate is None else pytest.approx(rate))


# (capacity, rate, level, [(now, cost)]) -> each reservation's wait
@pytest.mark.parametrize("capacity, rate, level, steps, waits", [
    (5, 1.0, 5, [(0, 1)] * 5, [0, 0, 0, 0, 0]),                 # a full bucket's burst goes at once
    (5, 1.0, 5, [(0, 1)] * 7, [0, 0, 0, 0, 0, 1, 2]),           # then one a second, in the order asked
    (5, 2.0, 0, [(0, 1), (0, 1), (1, 1)], [0.5, 1.0, 0.5]),     # refilled while the clock runs
    (5, 1.0, 0, [(10, 1)], [0]),                                # refilled, but never past the capacity
    (100, 10.0, 100, [(0, 150)], [0]),                          # a cost past the capacity costs the capacity
    (100, 10.0, 0, [(0, 150)], [10]),
])
def test_bucket_reservations(capacity: float, rate: float, level: float, steps: list[tuple[float, float]],
                             waits: list[float]) -> None:
    bucket = Bucket(capacity=capacity, rate=rate, level=level, at=0.0)
    assert [bucket.reserve(cost, now) for now, cost in steps] == [pytest.approx(w) for w in waits]


def test_bucket_refund_and_lowering() -> None:
    bucket = Bucket(capacity=4, rate=1.0, level=0, at=0.0)
    assert bucket.reserve(1, 0.0) == pytest.approx(1.0)
    bucket.refund(1, 0.0)
    assert bucket.level == pytest.approx(0.0)
    bucket.refill(10.0)
    assert bucket.level == 4
    bucket.lower_to(1.5, 10.0)
    assert bucket.level == 1.5
    bucket.lower_to(3.0, 10.0)                 # never raised by it
    assert bucket.level == 1.5
    bucket.retune(2, 5.0, 10.0)
    assert (bucket.capacity, bucket.rate, bucket.level) == (2, 5.0, 1.5)


@pytest.mark.parametrize("body, tokens", [
    ({"messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 64}, (400 + 16) // 4 + 64),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "abcd" * 10},
                                                {"type": "image_url", "image_url": {"url": "data:..."}}]}]},
     (16 + 40 + 4 * ratelimit.IMAGE_TOKENS) // 4),
    ({"prompt": "é" * 10, "max_tokens": 5}, 20 // 4 + 5),      # bytes, not characters
    ({"input": ["abcd", "efgh"]}, 2),
    ({"messages": "not a list", "max_tokens": "ten"}, 0),
    # Anthropic: the top-level system prompt and content blocks; a tool result counted as its JSON text
    ({"system": "s" * 40, "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]},
     (40 + 16 + len('{"type":"tool_result","tool_use_id":"t","content":"ok"}')) // 4 + 10),
    # Gemini: contents of parts, systemInstruction, and the reply's room in generationConfig
    ({"systemInstruction": {"parts": [{"text": "s" * 8}]}, "generationConfig": {"maxOutputTokens": 32},
      "contents": [{"role": "user", "parts": [{"text": "x" * 400}, {"inlineData": {"mimeType": "image/png"}}]}]},
     (8 + 16 + 400 + 4 * ratelimit.IMAGE_TOKENS) // 4 + 32),
])
def test_request_token_estimate(body: dict[str, object], tokens: int) -> None:
    assert ratelimit.request_tokens(body) == tokens


def test_budget_keys_share_an_endpoint_and_key_only() -> None:
    def key(url: str, api_key: str | None) -> str:
        return ratelimit.budget_key(ModelConfig(name="m", model="x", base_url=url), ratelimit.key_digest(api_key))

    same = key("https://API.example.com/v1/", "sk-1")
    assert same == key("https://api.example.com/v1", "sk-1")
    assert same != key("https://api.example.com/v1", "sk-2")
    assert same != key("https://api.example.com/v2", "sk-1")
    assert same != key("https://api.example.com:8443/v1", "sk-1")
    assert "sk-1" not in same


class Clock:
    """A simulated monotonic clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _server_headers(limit: int, remaining: float, rate: float) -> CIMultiDict[str]:
    return CIMultiDict({"x-ratelimit-limit-requests": str(limit), "x-ratelimit-remaining-requests": str(int(remaining)),
                        "x-ratelimit-reset-requests": f"{(limit - remaining) / rate:.3f}s"})


def test_a_budget_paces_to_the_published_rate_over_a_simulated_run() -> None:
    """A simulated server (burst 20, 20 a second, 0.3 s latency) and a budget: few refusals, near the bound."""
    clock = Clock()
    budget = Budget(clock=clock, wall=lambda: NOW)
    server_level, server_at, rate, limit = 20.0, 0.0, 20.0, 20
    refused = sent = 0
    pending: list[tuple[float, ratelimit.Ticket, int, CIMultiDict[str]]] = []
    rng = random.Random(3)
    calls_left, in_flight_cap, last_done = 200, 8, 0.0
    while calls_left or pending:
        # send while fewer than the cap are in flight (as the runner's workers do)
        while calls_left and len(pending) < in_flight_cap:
            ticket = budget.reserve(70)
            at = clock.now + ticket.wait
            server_level = min(limit, server_level + (at - server_at) * rate)
            server_at = at
            sent += 1
            if server_level >= 1:
                server_level -= 1
                status = 200
            else:
                status, refused = 429, refused + 1
            pending.append((at + 0.3 * rng.uniform(0.7, 1.3), ticket, status,
                            _server_headers(limit, server_level, rate)))
            calls_left -= 1 if status == 200 else 0
            pending.sort(key=lambda p: p[0])
            if ticket.wait:
                break   # this worker waits; the others go on after their answers
        done_at, ticket, status, headers = pending.pop(0)
        clock.now = max(clock.now, done_at)
        last_done = clock.now
        budget.observe(ticket, status, headers)
    bound = (200 - limit) / rate + 0.3
    assert refused <= 0.02 * sent
    assert last_done <= 1.15 * bound


def test_aimd_halves_on_a_429_and_adds_back_on_success() -> None:
    clock = Clock()
    budget = Budget(clock=clock, wall=lambda: NOW)
    tickets = []
    for i in range(10):                      # ten calls a second, unpaced: nothing is known yet
        clock.now = i * 0.1
        tickets.append(budget.reserve(10))
        assert tickets[-1].wait == 0
    budget.observe(tickets[-1], 429, CIMultiDict())
    halved = budget.request_rate()
    assert halved is not None and 4 <= halved <= 6
    budget.observe(tickets[-2], 429, CIMultiDict())   # sent before the decrease: the same congestion, not halved again
    assert budget.request_rate() == halved
    for _ in range(20):
        budget.observe(budget.reserve(10), 200, CIMultiDict())
    grown = budget.request_rate()
    assert grown is not None and grown > halved


def test_one_refused_call_tells_no_rate() -> None:
    budget = Budget(clock=Clock(), wall=lambda: NOW)
    budget.observe(budget.reserve(10), 429, CIMultiDict())
    assert budget.request_rate() is None


def test_a_declared_limit_paces_from_the_start_and_the_lowest_wins() -> None:
    clock = Clock()
    budget = Budget(clock=clock, wall=lambda: NOW)
    budget.declare(RateLimit(requests_per_minute=600))
    budget.declare(RateLimit(requests_per_minute=1200, tokens_per_minute=6000))
    assert budget.request_rate() == pytest.approx(10.0 * ratelimit.RATE_MARGIN)   # a little under the declared
    tokens = 100.0 * ratelimit.RATE_MARGIN     # a second's tokens at once, then a 50-token call each half second
    waits = [budget.reserve(50).wait for _ in range(4)]
    assert waits == [0] + [pytest.approx((50 * n - tokens) / tokens) for n in (2, 3, 4)]


def test_a_cancelled_ticket_gives_its_place_back() -> None:
    budget = Budget(clock=Clock(), wall=lambda: NOW)
    budget.declare(RateLimit(requests_per_minute=60))
    budget.reserve(1)
    second = budget.reserve(1)
    assert second.wait == pytest.approx(1.0 / ratelimit.RATE_MARGIN)
    budget.cancel(second)
    assert budget.reserve(1).wait == pytest.approx(1.0 / ratelimit.RATE_MARGIN)


@pytest.mark.parametrize("status, rate_limited", [(429, True), (503, True), (529, True), (500, False), (408, False)])
def test_rate_limits_and_overloads_are_waits(status: int, rate_limited: bool) -> None:
    assert retry.rate_limited(retry.status_error(status, CIMultiDict(), "")) is rate_limited
    refused = retry.status_error(status, CIMultiDict({"x-should-retry": "false"}), "")
    assert not retry.rate_limited(refused)


@pytest.mark.parametrize("headers, waits_taken, low, high", [
    ({"retry-after": "300"}, 0, 300, 300),          # honoured however long: the deadline decides
    ({"retry-after-ms": "20"}, 5, 0.02, 0.02),
    ({}, 0, 0.375, 0.5),
    ({}, 40, 6.0, 8.0),                             # backoff capped
])
def test_rate_limit_delays(headers: dict[str, str], waits_taken: int, low: float, high: float) -> None:
    delay = retry.rate_limit_delay(CIMultiDict(headers), waits_taken, random.Random(1))
    assert low <= delay <= high


def test_past_the_deadline_the_error_says_so() -> None:
    error = retry.past_deadline(HTTPStatusError("HTTP 429 from the server", kind="http_429", retryable=True,
                                                status=429), 600, 900)
    assert error.kind == "http_429" and not error.retryable
    assert "rate_limit_deadline_s (600 s" in str(error) and "900 s" in str(error)


def test_the_first_call_goes_alone_until_a_reply_or_a_declared_limit_tells_the_limits() -> None:
    budget = Budget()
    assert [budget.probe(), budget.probe(), budget.probe()] == [True, None, None]   # one goes, the rest wait
    budget.observe(budget.reserve(1), 200, {})   # its reply, whatever it says
    assert budget.heard.is_set() and budget.probe() is False
    failed = Budget()
    assert failed.probe() is True
    failed.hear()                                 # a first try that failed with no reply also lets the rest go
    assert failed.probe() is False
    declared = Budget()
    declared.declare(RateLimit(requests_per_minute=60))
    assert declared.probe() is False              # a declared limit paces from the first call
