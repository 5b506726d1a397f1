"""Runs against a rate-limited server (bench/ratelimit_server.py, a real subprocess on loopback): every row
completes, few requests are refused, and the serving time (the server's own first request to last answer) stays
near the least the limit allows."""

from __future__ import annotations

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
from engine.run.session import DEFAULT_CONCURRENCY
from engine.suite.models_file import HOSTED_CONCURRENCY
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


async def _check_paced(tmp_path: Path, server: Limited, calls: int, bound_s: float, ratio: float,
                       models: int = 1, hosted: bool = False, **model_fields: Any) -> None:
    """`hosted`: the engine's defaults for a hosted API (its calls in flight, per model and over the run)."""
    if hosted:
        model_fields["concurrency"] = HOSTED_CONCURRENCY
    entries = [make_model(server.base_url, name=f"m{i}", params={"max_tokens": 16}, **model_fields)
               for i in range(models)]
    await run_jobs(tmp_path, entries, [make_test(i) for i in range(calls // models)],
                   concurrency=DEFAULT_CONCURRENCY if hosted else 8)
    rows = _rows(tmp_path)
    stats = server.stats()
    assert len(rows) == calls and rows["error_kind"].isna().all()
    assert stats["answered"] == calls
    assert stats["limited"] <= 0.02 * stats["requests"], stats
    assert server.serving_s() <= ratio * bound_s, (server.serving_s(), bound_s, stats)


# Each server answers in 0.05 s on average, so 8 calls in flight (the default concurrency) can outrun the limit:
# the pace comes from the budget, not from the concurrency.
async def test_a_published_request_limit_is_met_without_refusals(tmp_path: Path, limited: list[Limited]) -> None:
    server = start(limited, "--rps", "50", "--latency", "0.05")
    await _check_paced(tmp_path, server, 150, (150 - 50) / 50 + 0.05, 1.3)


async def test_a_hosted_apis_ceiling_meets_the_limit_without_a_storm_of_refusals(tmp_path: Path,
                                                                                 limited: list[Limited]) -> None:
    # 64 calls may be in flight, more than the burst of 50: the first call goes alone, and its reply's headers pace
    # the rest (without it, 14 of the first 64 would be refused).
    server = start(limited, "--rps", "50", "--latency", "0.05")
    await _check_paced(tmp_path, server, 150, (150 - 50) / 50 + 0.05, 1.3, hosted=True)


async def test_a_published_token_limit_that_binds_first_is_met(tmp_path: Path, limited: list[Limited]) -> None:
    # A call costs the server 2 + 4 + 16 = 22 tokens: 500 tokens a second bind before 50 requests a second.
    server = start(limited, "--rps", "50", "--tps", "500", "--latency", "0.05")
    await _check_paced(tmp_path, server, 80, (80 * 22 - 500) / 500 + 0.05, 1.3)


async def test_two_entries_on_one_key_share_one_budget(tmp_path: Path, limited: list[Limited]) -> None:
    server = start(limited, "--rps", "50", "--latency", "0.05")
    await _check_paced(tmp_path, server, 150, (150 - 50) / 50 + 0.05, 1.3, models=2)


async def test_a_declared_limit_paces_without_any_429(tmp_path: Path, limited: list[Limited]) -> None:
    server = start(limited, "--rps", "30", "--latency", "0.05", "--no-headers")
    await run_jobs(tmp_path, [make_model(server.base_url, rate_limit=RateLimit(requests_per_minute=1800))],
                   [make_test(i) for i in range(60)])
    assert _rows(tmp_path)["error_kind"].isna().all()
    assert server.stats()["limited"] == 0
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
async def test_400_calls_at_20_a_second_at_default_settings(tmp_path: Path, limited: list[Limited]) -> None:
    server = start(limited, "--rps", "20", "--latency", "0.3")
    await _check_paced(tmp_path, server, 400, (400 - 20) / 20 + 0.3, 1.15, hosted=True)


@pytest.mark.slow
async def test_400_calls_with_a_token_limit_binding_at_default_settings(tmp_path: Path,
                                                                        limited: list[Limited]) -> None:
    server = start(limited, "--rps", "20", "--tps", "330", "--latency", "0.3")   # 22 tokens a call: 15 a second
    await _check_paced(tmp_path, server, 400, (400 * 22 - 330) / 330 + 0.3, 1.15, hosted=True)


@pytest.mark.slow
async def test_400_calls_from_two_entries_on_one_key(tmp_path: Path, limited: list[Limited]) -> None:
    server = start(limited, "--rps", "20", "--latency", "0.3")
    await _check_paced(tmp_path, server, 400, (400 - 20) / 20 + 0.3, 1.15, models=2, hosted=True)
