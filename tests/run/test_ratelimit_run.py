"""Runs against a rate-limited server (bench/ratelimit_server.py, a real subprocess on loopback) at the engine's
defaults: every row completes and few requests are refused, whatever the headers say; one model's limit never
touches another's rows; the calls in flight follow the server, under an explicit `concurrency:`; a stopped run
sends nothing more. The assertions count requests, refusals and calls in flight (the server's own counters),
never seconds: how near the limit's bound the serving time comes is measured in bench/bench_ratelimit.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.model.model_config import RateLimit
from engine.results.journal import Journal
from engine.results.writer import ResultsWriter
from engine.run.jobs import count_jobs, iter_jobs
from engine.run.runner import RunConfig, Runner
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.helpers import make_model, make_test, run_jobs

SERVER = Path(__file__).resolve().parents[2] / "bench" / "ratelimit_server.py"


class Limited:
    """bench/ratelimit_server.py in a subprocess; `stats` are its counters."""

    def __init__(self, *args: str) -> None:
        self.args = args
        self.proc = subprocess.Popen([sys.executable, str(SERVER), *args], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=10) as resp:
            out: dict[str, Any] = json.loads(resp.read())
            return out

    def serving_s(self) -> float:
        stats = self.stats()
        return float(stats["last_s"] - stats["first_s"])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def limited() -> Iterator[list[Limited]]:
    started: list[Limited] = []
    yield started
    for server in started:
        server.stop()


def start(started: list[Limited], *args: str) -> Limited:
    server = Limited(*args)
    started.append(server)
    return server


def _rows(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir)


async def _check_paced(tmp_path: Path, server: Limited, calls: int, models: int = 1,
                       **model_fields: Any) -> dict[str, Any]:
    """`calls` calls at the engine's defaults (no `concurrency` anywhere): all answered, at most 2% refused (or 4,
    in a run this short: a refusal at the bucket's edge is a matter of this machine's timing)."""
    entries = [make_model(server.base_url, name=f"m{i}", params={"max_tokens": 16}, **model_fields)
               for i in range(models)]
    await run_jobs(tmp_path, entries, [make_test(i) for i in range(calls // models)], concurrency=None)
    rows = _rows(tmp_path)
    stats = server.stats()
    assert len(rows) == calls and rows["error_kind"].isna().all()
    assert stats["answered"] == calls
    assert stats["limited"] <= max(4, 0.02 * stats["requests"]), stats
    return stats


# Each server answers in 0.05 s on average, so the calls in flight could outrun the limit: the pace comes from the
# budget, not from the concurrency.
@pytest.mark.parametrize("headers", ["bucket", "minute-limit", "per-minute"])
async def test_a_request_limit_is_met_without_refusals_whatever_the_headers_say(
        tmp_path: Path, limited: list[Limited], headers: str) -> None:
    """Honest headers; `limit` per minute beside a one-second bucket's `remaining` and `reset` (their ratio says
    thousands a second); an honest per-minute bucket while a one-second one is enforced unpublished."""
    server = start(limited, "--rps", "50", "--latency", "0.05", "--headers", headers)
    await _check_paced(tmp_path, server, 150)


@pytest.mark.parametrize("headers", ["bucket", "minute-limit"])
async def test_a_token_limit_that_binds_first_is_met(tmp_path: Path, limited: list[Limited], headers: str) -> None:
    # A call costs the server 2 + 4 + 16 = 22 tokens: 500 tokens a second bind before 50 requests a second.
    server = start(limited, "--rps", "50", "--tps", "500", "--latency", "0.05", "--headers", headers)
    await _check_paced(tmp_path, server, 80)


async def test_two_entries_on_one_key_share_one_budget(tmp_path: Path, limited: list[Limited]) -> None:
    server = start(limited, "--rps", "50", "--latency", "0.05")
    await _check_paced(tmp_path, server, 150, models=2, model="same-model")


@pytest.mark.parametrize("headers", ["bucket", "minute-limit"])
async def test_two_models_on_one_key_sharing_one_bucket_are_paced_as_one(
        tmp_path: Path, limited: list[Limited], headers: str) -> None:
    """Two models (two ids, so two budgets) on one key and one bucket of 50 a second: each starts at its share
    of what the first replies publish, the replies show each model's calls counted in the other's bucket and
    the budgets join, so the pair is refused no more than one model alone. Before, each paced to the whole
    bucket and the two never joined: 9 to 33 refusals in 300 requests, as each learned its share by 429s."""
    server = start(limited, "--rps", "50", "--latency", "0.05", "--headers", headers)
    stats = await _check_paced(tmp_path, server, 300, models=2)
    assert {name: counts["answered"] for name, counts in stats["models"].items()} == {"m0-id": 150, "m1-id": 150}


async def test_one_models_limit_never_touches_another_models_rows(tmp_path: Path, limited: list[Limited]) -> None:
    """Two models on one key, only one limited, its first reply publishing `remaining 0` and a reset hours away:
    its later calls end as rate-limit error rows; the other model's calls all go, none a rate-limit error."""
    server = start(limited, "--rps", "0.0002", "--burst", "1", "--latency", "0.05", "--limited-model", "slow-id")
    entries = [make_model(server.base_url, name="slow", rate_limit_deadline_s=60.0), make_model(server.base_url,
                                                                                                name="free")]
    await run_jobs(tmp_path, entries, [make_test(i) for i in range(40)], concurrency=None)
    rows = _rows(tmp_path)
    free, slow = rows[rows["model"] == "free"], rows[rows["model"] == "slow"]
    assert len(free) == 40 and free["error_kind"].isna().all()
    assert len(slow) == 40 and slow["error_kind"].notna().sum() == 39
    assert server.stats()["models"]["free-id"]["answered"] == 40


async def test_the_calls_in_flight_follow_a_loopback_server_that_takes_many(tmp_path: Path,
                                                                           limited: list[Limited]) -> None:
    """A loopback server with no limit and a steady 0.2 s latency (a gateway, a vLLM): far more than the 8 calls
    a fixed default allowed go at once."""
    server = start(limited, "--latency", "0.2")
    await run_jobs(tmp_path, [make_model(server.base_url)], [make_test(i) for i in range(600)], concurrency=None)
    assert _rows(tmp_path)["error_kind"].isna().all()
    assert server.stats()["max_in_flight"] >= 32


async def test_an_explicit_concurrency_is_a_hard_ceiling(tmp_path: Path, limited: list[Limited]) -> None:
    server = start(limited, "--latency", "0.05")
    await run_jobs(tmp_path, [make_model(server.base_url, concurrency=3)], [make_test(i) for i in range(120)],
                   concurrency=None)
    assert _rows(tmp_path)["error_kind"].isna().all()
    assert server.stats()["max_in_flight"] == 3


async def test_a_stop_during_a_rate_limit_wait_sends_nothing_more(tmp_path: Path, limited: list[Limited]) -> None:
    """One call a minute allowed: the first goes, the others wait on the pace. A stop (Ctrl-C) ends the run at
    once: no further request, no row for a call never sent (`--resume` sends it)."""
    server = start(limited, "--rps", "0.0167", "--burst", "1", "--latency", "0.05")
    journal = Journal(tmp_path / "_journal.sqlite")
    writer = ResultsWriter(tmp_path, journal)
    model, tests = make_model(server.base_url), [make_test(i) for i in range(20)]
    runner = Runner(RunConfig(run_id="run-1"), journal, writer)
    run = asyncio.create_task(runner.run({model.name: (model, iter_jobs(model, tests, None))},
                                         count_jobs([model], tests, None), {model.name: None}))
    while server.stats()["answered"] < 1:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)   # the other calls are waiting on the pace (a minute each) by now
    runner.stop()
    await run
    journal.close()
    assert server.stats()["requests"] == 1
    rows = _rows(tmp_path)
    assert len(rows) == 1 and rows["error_kind"].isna().all()


async def test_a_declared_limit_paces_without_any_429(tmp_path: Path, limited: list[Limited]) -> None:
    server = start(limited, "--rps", "30", "--latency", "0.05", "--no-headers")
    await run_jobs(tmp_path, [make_model(server.base_url, rate_limit=RateLimit(requests_per_minute=1800))],
                   [make_test(i) for i in range(60)])
    assert _rows(tmp_path)["error_kind"].isna().all()
    # paced from the first call: none of a burst's refusals (at most one at the edge, from this machine's timing)
    assert server.stats()["limited"] <= 1
    assert server.stats()["answered"] == 60


async def test_a_server_without_headers_still_completes_every_row(tmp_path: Path, limited: list[Limited]) -> None:
    server = start(limited, "--rps", "30", "--latency", "0.05", "--no-headers")
    await run_jobs(tmp_path, [make_model(server.base_url, max_retries=0)], [make_test(i) for i in range(90)])
    rows = _rows(tmp_path)
    assert len(rows) == 90 and rows["error_kind"].isna().all()
    stats = server.stats()
    assert stats["answered"] == 90
    # AIMD slows the run down after the first refusals: far fewer than one refusal per call.
    assert stats["limited"] < 0.5 * stats["answered"], stats
    assert (rows["rate_limit_wait_s"] > 0).any()


async def test_a_429_storm_past_the_deadline_is_an_error_row_saying_so(tmp_path: Path,
                                                                       fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(fault="http_429", retry_after_ms="50")
    await run_jobs(tmp_path, [make_model(fake_openai.base_url, rate_limit_deadline_s=0.5)], [make_test(0)])
    row = _rows(tmp_path).iloc[0]
    assert row["error_kind"] == "http_429"
    assert "rate_limit_deadline_s (0.5 s" in row["error_message"]
    assert 0.2 <= row["rate_limit_wait_s"] <= 0.5   # waited up to the deadline, stopped before passing it
    assert 4 <= len(fake_openai.requests) <= 12   # waited out, never hammered: about one try per 50 ms


async def test_a_retry_after_longer_than_the_deadline_ends_the_call_at_once(tmp_path: Path,
                                                                           fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(fault="http_429", retry_after="3600"))
    await run_jobs(tmp_path, [make_model(fake_openai.base_url)], [make_test(0)])
    row = _rows(tmp_path).iloc[0]
    assert row["error_kind"] == "http_429" and "the next wait (3600 s) would pass" in row["error_message"]
    assert len(fake_openai.requests) == 1 and row["rate_limit_wait_s"] == 0


async def test_an_overload_is_waited_out_past_max_retries(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.script(*[Reply(fault="http_529", retry_after_ms="5")] * 4, Reply(content="ok"))
    await run_jobs(tmp_path, [make_model(fake_openai.base_url, max_retries=1)], [make_test(0)])
    row = _rows(tmp_path).iloc[0]
    assert pd.isna(row["error_kind"]) and row["retries"] == 4


@pytest.mark.slow
@pytest.mark.parametrize("headers", ["bucket", "minute-limit", "per-minute"])
async def test_400_calls_at_20_a_second_at_default_settings(tmp_path: Path, limited: list[Limited],
                                                            headers: str) -> None:
    server = start(limited, "--rps", "20", "--latency", "0.3", "--headers", headers)
    await _check_paced(tmp_path, server, 400)


@pytest.mark.slow
async def test_400_calls_with_a_token_limit_binding_at_default_settings(tmp_path: Path,
                                                                        limited: list[Limited]) -> None:
    server = start(limited, "--rps", "20", "--tps", "330", "--latency", "0.3")   # 22 tokens a call: 15 a second
    await _check_paced(tmp_path, server, 400)


@pytest.mark.slow
async def test_2000_calls_at_200_a_second_on_loopback_at_default_settings(tmp_path: Path,
                                                                          limited: list[Limited]) -> None:
    server = start(limited, "--rps", "200", "--latency", "0.3")
    stats = await _check_paced(tmp_path, server, 2000)
    assert stats["max_in_flight"] > 8   # more than a fixed default for loopback allowed: the pace sets the speed
