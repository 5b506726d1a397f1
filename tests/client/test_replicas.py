"""Several endpoints per model (`base_urls`): least in flight, round-robin ties, a failing replica cooled down.

The choice is pinned on `ReplicaSet` with an injected clock; then the client spreads real calls over
three fake servers on loopback, one of them stopped or failing, the clock still injected (never slept through).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from engine.client.client import ModelClient
from engine.client.replicas import COOL_DOWN_S, ReplicaSet
from engine.client.request import RequestSettings, prepare
from engine.client.response import CallResult
from engine.client.session import Sessions
from engine.model.model_config import ModelConfig
from tests.factories import make_test
from tests.fake_openai import FakeOpenAI, Reply

TEST = make_test(messages=({"role": "user", "content": "hi"},), prompt="hi")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def replica_set(n: int = 3, clock: Clock | None = None) -> ReplicaSet:
    return ReplicaSet([f"http://r{i}/v1" for i in range(n)], clock=clock or Clock())


def names(picks: list[Any]) -> list[str]:
    return [p.shown.removeprefix("http://").removesuffix("/v1") for p in picks]


def test_sequential_calls_go_round_robin() -> None:
    replicas = replica_set()
    picks = []
    for _ in range(6):
        pick = replicas.acquire()
        replicas.release(pick, failed=False)
        picks.append(pick)
    assert names(picks) == ["r0", "r1", "r2", "r0", "r1", "r2"]
    assert picks[0].base == "http://r0/v1"


def test_the_replica_with_fewest_in_flight_wins_over_the_cursor() -> None:
    replicas = replica_set()
    held = replicas.acquire()                       # r0 stays busy
    second = replicas.acquire()
    replicas.release(second, failed=False)          # r1 done
    third = replicas.acquire()                      # cursor at r2: 0 in flight
    replicas.release(third, failed=False)
    fourth = replicas.acquire()                     # cursor back at r0, but r0 is busy: r1
    assert names([held, second, third, fourth]) == ["r0", "r1", "r2", "r1"]
    assert [r.in_flight for r in replicas.replicas] == [1, 1, 0]


def test_a_failed_replica_is_skipped_for_the_cool_down_then_taken_back() -> None:
    clock = Clock()
    replicas = replica_set(clock=clock)
    first = replicas.acquire()
    replicas.release(first, failed=True)            # r0 failed at t=100
    assert replicas.cooling() == ["http://r0/v1"]
    picks = []
    for _ in range(4):
        pick = replicas.acquire()
        replicas.release(pick, failed=False)
        picks.append(pick)
    assert "r0" not in names(picks)
    clock.now += COOL_DOWN_S - 0.001
    assert replicas.cooling() == ["http://r0/v1"]
    clock.now += 0.001
    assert replicas.cooling() == []
    back = [replicas.acquire() for _ in range(3)]
    assert sorted(names(back)) == ["r0", "r1", "r2"]
    assert (first.tries, first.failures) == (2, 1)


def test_when_every_replica_cools_down_the_one_back_soonest_is_tried() -> None:
    clock = Clock()
    replicas = replica_set(clock=clock)
    for step in range(3):
        pick = replicas.acquire()
        replicas.release(pick, failed=True)
        clock.now += 1.0 + step
    assert len(replicas.cooling()) == 3
    assert names([replicas.acquire()]) == ["r0"]    # failed first: back first


def test_userinfo_is_masked_in_what_a_replica_shows() -> None:
    replicas = ReplicaSet(["http://bob:hunter2-secret@gpu1:8000/v1"])
    (only,) = replicas.replicas
    assert only.shown == "http://***@gpu1:8000/v1"
    assert "hunter2" in only.base                  # the request still carries it (basic auth), nothing else


# -- the client over fake servers ---------------------------------------------------------------------------


@pytest.fixture
def servers() -> Any:
    started = [FakeOpenAI().start() for _ in range(3)]
    yield started
    for server in started:
        if server._thread is not None and server._thread.is_alive():   # one test stops its own
            server.stop()


def replica_model(servers: list[FakeOpenAI], **overrides: Any) -> ModelConfig:
    urls = tuple(s.base_url for s in servers)
    return replace(ModelConfig(name="m", model="fake-1", base_url=urls[0], base_urls=urls, timeout_s=5.0,
                               max_retries=2), **overrides)


async def calls(model: ModelConfig, n: int, clock: Clock, *, concurrent: bool = False,
                between: Any = None) -> tuple[list[CallResult], ModelClient]:
    async with Sessions(64) as sessions:
        client = ModelClient(sessions, {"m": None}, clock=clock)
        request = prepare(model, TEST, RequestSettings())
        if concurrent:
            return list(await asyncio.gather(*(client.call(model, request) for _ in range(n)))), client
        results = []
        for i in range(n):
            if between is not None:
                between(i, client)
            results.append(await client.call(model, request))
        return results, client


async def test_calls_spread_evenly_and_each_row_names_its_replica(servers: list[FakeOpenAI]) -> None:
    model = replica_model(servers)
    results, _ = await calls(model, 30, Clock())
    assert [len(s.requests) for s in servers] == [10, 10, 10]
    assert Counter(r.served_by for r in results) == {s.base_url: 10 for s in servers}
    assert all(r.error is None and r.retries == 0 for r in results)


async def test_concurrent_calls_spread_by_least_in_flight(servers: list[FakeOpenAI]) -> None:
    for server in servers:
        server.responder = lambda body: Reply(delay_s=0.05)
    # The first call goes alone (its reply tells the rate limits, engine.client.ratelimit), then 12 at once.
    results, _ = await calls(replica_model(servers), 13, Clock(), concurrent=True)
    assert [len(s.requests) for s in servers] == [5, 4, 4]
    assert [s.max_in_flight for s in servers] == [4, 4, 4]
    assert all(r.error is None for r in results)


async def test_a_stopped_replica_costs_one_retry_then_is_skipped_until_its_cool_down_ends(
        servers: list[FakeOpenAI]) -> None:
    clock = Clock()
    model = replica_model(servers)
    dead = servers[1]
    dead.stop()

    def later(i: int, client: ModelClient) -> None:
        if i == 10:
            clock.now += COOL_DOWN_S                 # the cool-down is over: the dead replica is tried again

    results, client = await calls(model, 14, clock, between=later)
    assert all(r.error is None for r in results), [str(r.error) for r in results if r.error]
    assert dead.base_url not in {r.served_by for r in results}
    assert [r.retries for r in results].count(1) == 2      # the first call that met it, and one after cool-down
    sets = client.replicas(model)
    assert sets is not None
    assert [(r.tries, r.failures) for r in sets.replicas][1] == (2, 2)
    assert len(servers[0].requests) + len(servers[2].requests) == 14


async def test_a_replica_answering_500_is_cooled_down_and_its_calls_go_elsewhere(servers: list[FakeOpenAI]) -> None:
    servers[2].responder = lambda body: Reply(fault="http_503")
    results, _ = await calls(replica_model(servers), 12, Clock())
    assert all(r.error is None for r in results)
    assert len(servers[2].requests) == 1                   # one failed try, then skipped (clock never moved)
    assert {r.served_by for r in results} == {servers[0].base_url, servers[1].base_url}
    assert sum(r.retries for r in results) == 1


async def test_a_4xx_is_not_the_replicas_fault(servers: list[FakeOpenAI]) -> None:
    servers[0].script(Reply(fault="http_400"))
    results, client = await calls(replica_model(servers, max_retries=0), 4, Clock())
    assert results[0].error is not None and results[0].error.kind == "http_400"
    assert results[0].served_by == servers[0].base_url      # an error row says where it failed
    sets = client.replicas(replica_model(servers))
    assert sets is not None and sets.cooling() == []
    assert [len(s.requests) for s in servers] == [2, 1, 1]


async def test_single_endpoint_models_have_no_served_by(servers: list[FakeOpenAI]) -> None:
    model = ModelConfig(name="m", model="fake-1", base_url=servers[0].base_url, timeout_s=5.0)
    results, client = await calls(model, 2, Clock())
    assert [r.served_by for r in results] == [None, None]
    assert client.replicas(model) is None


async def test_userinfo_in_a_replica_url_is_masked_in_served_by_and_errors(servers: list[FakeOpenAI]) -> None:
    secret_url = servers[0].base_url.replace("http://", "http://bob:hunter2-secret@")
    servers[0].responder = lambda body: Reply(fault="http_500", error_message="no luck")
    model = replica_model(servers[:1], base_urls=(secret_url,), base_url=secret_url, max_retries=0)
    results, _ = await calls(model, 1, Clock())
    (result,) = results
    assert result.served_by == servers[0].base_url.replace("http://", "http://***@")
    assert result.error is not None and "hunter2" not in str(result.error)
