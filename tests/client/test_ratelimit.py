"""The rate-limit module as data: header parsing, the token bucket, and a budget over a simulated clock."""

from __future__ import annotations

import importlib.util
import math
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from multidict import CIMultiDict

from engine.client import ratelimit, retry
from engine.client.ratelimit import Bucket, Budget, Limit
from engine.client.ratelimit.cost import IMAGE_TOKENS
from engine.client.ratelimit.pace import BACKOFF, RATE_MARGIN, RECOVERY_S, Pace
from engine.errors import HTTPStatusError
from engine.model.model_config import ModelConfig, RateLimit

NOW = 1_800_000_000.0   # a fixed wall clock (seconds since the epoch)
SIM = Path(__file__).resolve().parents[2] / "bench" / "ratelimit_sim.py"


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


# (capacity, rate, level, [(now, cost)]) -> each try's wait, each taken once it has waited
@pytest.mark.parametrize("capacity, rate, level, steps, waits", [
    (5, 1.0, 5, [(0, 1)] * 5, [0, 0, 0, 0, 0]),                 # a full bucket's burst goes at once
    (5, 1.0, 5, [(0, 1)] * 7, [0, 0, 0, 0, 0, 1, 1]),           # then one a second
    (5, 2.0, 0, [(0, 1), (0, 1), (2, 1)], [0.5, 0.5, 0]),       # refilled while the clock runs
    (5, 1.0, 0, [(10, 5), (10, 1)], [0, 1]),                    # refilled, but never past the capacity
    (100, 10.0, 100, [(0, 150)], [0]),                          # a cost past the capacity costs the capacity
    (100, 10.0, 0, [(0, 150)], [10]),
])
def test_bucket_waits(capacity: float, rate: float, level: float, steps: list[tuple[float, float]],
                      waits: list[float]) -> None:
    bucket = Bucket(capacity=capacity, rate=rate, level=level, at=0.0)
    got = []
    for now, cost in steps:
        at = max(now, bucket.at)
        got.append(bucket.wait_for(cost, at))
        bucket.take(cost, at + got[-1])
    assert got == [pytest.approx(w) for w in waits]


def test_bucket_refund_and_lowering() -> None:
    bucket = Bucket(capacity=4, rate=1.0, level=1, at=0.0)
    bucket.take(1, 0.0)
    bucket.refund(1, 0.0)
    assert bucket.level == pytest.approx(1.0)
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
     (16 + 40 + 4 * IMAGE_TOKENS) // 4),
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
     (8 + 16 + 400 + 4 * IMAGE_TOKENS) // 4 + 32),
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


def _server_headers(limit: int, remaining: float, rate: float) -> CIMultiDict[str]:
    return CIMultiDict({"x-ratelimit-limit-requests": str(limit), "x-ratelimit-remaining-requests": str(int(remaining)),
                        "x-ratelimit-reset-requests": f"{(limit - remaining) / rate:.3f}s"})


def _send(budget: Budget, clock: Clock, tokens: float = 10) -> ratelimit.Ticket:
    """A try let through once the pace allows it (the clock moves to then), its request written."""
    clock.now += budget.wait_s(tokens)
    ticket = budget.grant(tokens)
    budget.written(ticket)
    return ticket


def test_a_refusal_where_nothing_is_published_lowers_the_rate_and_successes_bring_it_back() -> None:
    clock = Clock()
    budget = Budget(clock=clock, wall=lambda: NOW)
    tickets = []
    for i in range(10):                      # ten calls a second, unpaced: nothing is known yet
        clock.now = i * 0.1
        tickets.append(budget.grant(10))
        budget.written(tickets[-1])
        assert budget.wait_s(10) == 0
    budget.observe(tickets[-1], 429, CIMultiDict())
    lowered = budget.request_rate()
    assert lowered is not None and lowered == pytest.approx(BACKOFF * 10, rel=0.15)
    budget.observe(tickets[-2], 429, CIMultiDict())   # sent before the decrease: the same refusal, not lowered again
    assert budget.request_rate() == lowered
    rates = []
    for _ in range(200):                     # successes at the pace: the rate climbs back, slowly at first
        budget.observe(_send(budget, clock), 200, CIMultiDict())
        rates.append(budget.request_rate() or math.inf)
    assert rates == sorted(rates) and rates[0] < 10 and rates[-1] > 10


def test_a_refusal_below_the_last_refused_rate_climbs_back_to_less_than_either() -> None:
    """Refused at 10 a second, then again at 7 on the way back: the limit is under 7, so after `RECOVERY_S` of
    successes the pace is back at less than 7, not at 7 (where it would only be refused again)."""
    pace = Pace()
    for i in range(20):                                  # 10 a second, nothing published
        pace.grant(1, i * 0.1)
    pace.refused(1.9, None, 2.0)
    assert pace.rate() == pytest.approx(BACKOFF * 10, rel=0.1)
    first = pace.rate()
    assert first is not None
    pace.refused(2.1, None, 2.5)                         # at the lowered pace, refused again
    pace.succeeded(2.6, 2.5 + RECOVERY_S)
    again = pace.rate()
    assert again is not None and again < first


def _headers(limit: float, remaining: float, reset_s: float) -> CIMultiDict[str]:
    return CIMultiDict({"x-ratelimit-limit-requests": str(int(limit)),
                        "x-ratelimit-remaining-requests": str(int(remaining)),
                        "x-ratelimit-reset-requests": f"{reset_s:.3f}s"})


def test_a_429_while_the_headers_claim_room_lowers_the_pace_under_the_published_ceiling() -> None:
    """The headers publish 20 a second with room left, yet the server refuses: the 429 is the truth, the pace
    drops under the published rate (multiplicatively), climbs back while calls succeed, never above it."""
    clock = Clock()
    budget = Budget(clock=clock, wall=lambda: NOW)
    for i in range(5):                       # replies that spread (remaining, reset): the bucket is fitted
        ticket = _send(budget, clock)
        budget.observe(ticket, 200, _headers(1200, 1199 - i, (1 + i) / 20))
    published = budget.request_rate()
    assert published is not None and published == pytest.approx(20 * RATE_MARGIN, rel=0.05)
    for _ in range(8):
        ticket = _send(budget, clock)
        clock.now += 0.01
    budget.observe(ticket, 429, _headers(1200, 1100, 5.0))   # refused with 1,100 said to be left
    lowered = budget.request_rate()
    assert lowered is not None and lowered <= BACKOFF * published * 1.2
    rates = []
    for _ in range(600):
        budget.observe(_send(budget, clock), 200, CIMultiDict())
        rates.append(budget.request_rate() or math.inf)
    assert rates == sorted(rates) and rates[0] < published
    assert rates[-1] == pytest.approx(published)   # back to the published rate: a ceiling, not passed


def test_a_per_minute_limit_beside_a_one_second_bucket_paces_to_the_bucket() -> None:
    """`limit` counts a minute while `remaining` and `reset` count the one-second bucket that binds: a single
    reply's (limit - remaining) / reset is 23,620 a second, but the pace takes no more than the bucket holds."""
    clock = Clock()
    budget = Budget(clock=clock, wall=lambda: NOW)
    assert budget.probe() is True
    budget.observe(_send(budget, clock), 200, _headers(1200, 19, 0.05))
    rate = budget.request_rate()
    assert rate is not None and rate <= 20
    sent_at_once = 0
    while budget.wait_s(10) == 0:
        _send(budget, clock)
        sent_at_once += 1
    assert sent_at_once <= 19


def test_the_published_rate_is_the_pace_where_the_provider_publishes_one() -> None:
    """What a window may open to at once: the calls a second the pace lets go, by requests or by tokens, whichever
    binds; nothing where the provider publishes nothing, even under a declared limit."""
    clock = Clock()
    silent = Budget(clock=clock, wall=lambda: NOW)
    silent.declare(RateLimit(requests_per_minute=600))
    silent.observe(_send(silent, clock), 200, CIMultiDict())
    assert silent.published_rate(10) is None
    budget = Budget(clock=clock, wall=lambda: NOW)
    budget.observe(_send(budget, clock), 200, CIMultiDict({
        "x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "99",
        "x-ratelimit-reset-requests": "10ms", "x-ratelimit-limit-tokens": "10000",
        "x-ratelimit-remaining-tokens": "9990", "x-ratelimit-reset-tokens": "1ms"}))
    assert budget.published_rate(10) == pytest.approx(100 * RATE_MARGIN)      # requests bind
    assert budget.published_rate(1000) == pytest.approx(10 * RATE_MARGIN)     # 10,000 tokens a second bind


def test_one_refused_call_tells_no_rate() -> None:
    budget = Budget(clock=Clock(), wall=lambda: NOW)
    budget.observe(budget.grant(10), 429, CIMultiDict())
    assert budget.request_rate() is None


def test_a_declared_limit_paces_from_the_start_and_the_lowest_wins() -> None:
    clock = Clock()
    budget = Budget(clock=clock, wall=lambda: NOW)
    budget.declare(RateLimit(requests_per_minute=600))
    budget.declare(RateLimit(requests_per_minute=1200, tokens_per_minute=6000))
    assert budget.request_rate() == pytest.approx(10.0 * RATE_MARGIN)   # a little under the declared
    tokens = 100.0 * RATE_MARGIN     # a second's tokens at once, then a 50-token call each half second
    waits = []
    for _ in range(4):
        waits.append(budget.wait_s(50))
        _send(budget, clock, 50)
    assert waits == [0, pytest.approx((100 - tokens) / tokens), pytest.approx(50 / tokens), pytest.approx(50 / tokens)]


def test_a_try_never_sent_gives_its_cost_back() -> None:
    clock = Clock()
    budget = Budget(clock=clock, wall=lambda: NOW)
    budget.declare(RateLimit(requests_per_minute=60))
    budget.grant(1)
    second = budget.grant(1)
    rate = RATE_MARGIN
    assert budget.wait_s(1) == pytest.approx(2 / rate)
    budget.returned(second)
    budget.returned(second)                    # once only
    assert budget.wait_s(1) == pytest.approx(1 / rate)


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
    budget.observe(budget.grant(1), 200, {})   # its reply, whatever it says
    assert budget.heard.is_set() and budget.probe() is False
    failed = Budget()
    assert failed.probe() is True
    failed.hear()                                 # a first try that failed with no reply also lets the rest go
    assert failed.probe() is False
    declared = Budget()
    declared.declare(RateLimit(requests_per_minute=60))
    assert declared.probe() is False              # a declared limit paces from the first call


def _sim_module() -> Any:
    spec = importlib.util.spec_from_file_location("ratelimit_sim", SIM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SimRun = _sim_module().SimRun
Clock = _sim_module().Clock   # a simulated monotonic clock
LATENCY_S = 0.3


def _bound(calls: int, rps: float, tps: float | None = None, cost: int = 22) -> float:
    """The least time the limit allows: past the first second's burst, the rest at the rate, plus a reply."""
    by_requests = (calls - rps) / rps
    by_tokens = (calls * cost - tps) / tps if tps else 0.0
    return max(by_requests, by_tokens) + LATENCY_S


@pytest.mark.parametrize("headers", ["bucket", "minute-limit", "per-minute", "none"])
@pytest.mark.parametrize("tps", [None, 330.0])
async def test_a_budget_meets_the_limit_that_binds_whatever_the_headers_say(headers: str, tps: float | None) -> None:
    """400 calls at 20 requests a second (or 15 by a token limit), from one slot (bench/ratelimit_sim.py): headers
    that count the one-second bucket against a per-minute limit, or a per-minute bucket over a per-second
    enforcement, are corrected by the 429s, and where nothing is published (no `retry-after` either) the 429s
    alone set the pace."""
    server = ["--rps", "20", "--headers", headers] + (["--tps", str(tps)] if tps else [])
    sim = SimRun(server)
    await sim.run(400)
    assert sim.refused <= 0.02 * sim.sent, (sim.refused, sim.sent)
    assert sim.serving_s() <= 1.15 * _bound(400, 20.0, tps), (sim.serving_s(), _bound(400, 20.0, tps))


async def test_2000_calls_at_200_a_second_on_loopback_from_one_slot() -> None:
    """The provider publishes 200 a second: after the first reply the window opens to what that pace needs, so
    the run is not held back by a slow start doubling its way up from one call."""
    sim = SimRun(["--rps", "200"])
    await sim.run(2000)
    assert sim.refused <= 0.02 * sim.sent
    assert sim.serving_s() <= 1.15 * _bound(2000, 200.0), (sim.serving_s(), _bound(2000, 200.0))


@pytest.mark.parametrize("headers", ["bucket", "minute-limit"])
async def test_two_models_sharing_one_bucket_are_paced_as_one(headers: str) -> None:
    """Two models on one key, one bucket of 20 a second for both: the replies show each model's calls counted in
    the other's bucket, the budgets join, and the pair is paced as one model alone would be (before: never
    joined, 2.9% refused and 1.42x the bound with this seed, the model refused first crawling back by itself)."""
    sim = SimRun(["--rps", "20", "--headers", headers], models=2)
    await sim.run(400)
    assert sim.joined()
    assert sim.refused <= 0.02 * sim.sent, (sim.refused, sim.sent)
    assert sim.serving_s() <= 1.15 * _bound(400, 20.0), (sim.serving_s(), _bound(400, 20.0))


@pytest.mark.parametrize("server", [["--per-model"], ["--limited-model", "bench-model-a"]])
async def test_models_with_limits_of_their_own_are_never_joined(server: list[str]) -> None:
    """Each model its own bucket of the same published size and rate, or only one limited: neither budget sees
    the other's calls counted, so each keeps its own pace (joined, they would go at half the speed)."""
    sim = SimRun(["--rps", "20", "--headers", "minute-limit", *server], models=2)
    await sim.run(400)
    assert not sim.joined()
    assert sim.refused <= 0.02 * sim.sent, (sim.refused, sim.sent)


def test_joined_paces_go_at_what_the_two_went_at_together() -> None:
    """The rates two models' refusals taught each while they spent one bucket add up (none, where either had
    none: it went at the ceiling alone); a refusal of a try let through before the join lowers nothing."""
    def learned(rate: float | None) -> Pace:
        pace = Pace()
        pace.published = 20.0
        pace.learned = rate
        pace.tune(0.0)
        return pace

    joined = learned(6.0)
    joined.join(learned(8.0), 1.0)
    assert joined.rate() == pytest.approx(14.0)
    joined.refused(0.5, None, 1.2)
    assert joined.rate() == pytest.approx(14.0)
    capped = learned(12.0)
    capped.join(learned(9.0), 1.0)
    assert capped.rate() == pytest.approx(20.0)    # back at the published ceiling
    alone = learned(6.0)
    alone.join(learned(None), 1.0)
    assert alone.rate() == pytest.approx(20.0)
