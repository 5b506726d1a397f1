"""The `--until-decided` dispatch gate (engine/run/until_decided.py): in order, within the lookahead, errors left
out, and in a real runner against the fake OpenAI server (errors, a budget stop)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from engine.errors import UsageError
from engine.results.journal import Journal
from engine.results.writer import ResultsWriter
from engine.run.runner import RunConfig, Runner
from engine.run.until_decided import DecisionGate, UntilDecided
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.helpers import make_model, make_test


def _row(score: float | None, error: str | None = None) -> dict:
    return {"score": score, "error_kind": error}


def _gate(n_tests: int, *, concurrency: int = 4, repeat: int | None = None) -> tuple[DecisionGate, list]:
    models = [make_model("http://x", "a"), make_model("http://x", "b")]
    tests = [make_test(i) for i in range(n_tests)]
    return DecisionGate(UntilDecided("a", "b"), models, tests, repeat, seed=1, concurrency=concurrency), models


def test_the_order_is_a_seeded_permutation_of_test_clusters() -> None:
    first, _ = _gate(30)
    again, _ = _gate(30)
    order = [c.key for c in first.order]
    assert order == [c.key for c in again.order] and sorted(order) == sorted(("s", f"t{i}") for i in range(30))
    assert order != sorted(order)
    jobs = list(first.jobs(first.models[0]))
    assert [(j.test.suite, j.test.id) for j in jobs] == order   # one attempt each, in the gate's order


def test_results_are_read_in_dispatch_order_whatever_finishes_first() -> None:
    """A cluster that finishes early waits for those before it: the statistic sees the permutation order."""
    gate, (a, b) = _gate(10)
    jobs_a, jobs_b = list(gate.jobs(a)), list(gate.jobs(b))
    for job in reversed(jobs_a[1:]):
        gate.record(job, _row(1.0))
    for job in reversed(jobs_b[1:]):
        gate.record(job, _row(0.0))
    assert gate.read == 0 and gate.decision.tests == 0   # the first cluster is still out
    gate.record(jobs_a[0], _row(1.0))
    assert gate.read == 0
    gate.record(jobs_b[0], _row(0.0))
    # all ten read at once; A won each, so it decided at the 8th (the fewest at α = 0.05) and stayed decided
    assert gate.read == 10 and gate.decided_at == 8 and gate.decision.tests == 8 and gate.decision.mean == 1.0


def test_a_test_with_an_error_is_left_out_not_counted_as_a_loss() -> None:
    gate, (a, b) = _gate(3, repeat=2)
    jobs_a, jobs_b = list(gate.jobs(a)), list(gate.jobs(b))
    # first cluster: A scores once and errs once (its mean is the scored attempt), B errs on both
    gate.record(jobs_a[0], _row(1.0))
    gate.record(jobs_a[1], _row(None, "http_500"))
    gate.record(jobs_b[0], _row(None, "timeout"))
    gate.record(jobs_b[1], _row(None, "timeout"))
    assert gate.read == 1 and gate.excluded == 1 and gate.decision.tests == 0
    # second: B has one scored attempt of two
    for job, row in zip(jobs_a[2:4] + jobs_b[2:4], [_row(1.0), _row(0.0), _row(0.0), _row(None, "http_429")],
                        strict=True):
        gate.record(job, row)
    assert gate.read == 2 and gate.decision.tests == 1 and gate.decision.mean == pytest.approx(0.5)


async def test_admit_waits_past_the_lookahead_and_says_no_once_closed() -> None:
    gate, (a, b) = _gate(10, concurrency=2)
    assert gate.lookahead == 2
    jobs_a, jobs_b = list(gate.jobs(a)), list(gate.jobs(b))
    assert await gate.admit(jobs_a[0]) and await gate.admit(jobs_a[1])
    third = asyncio.create_task(gate.admit(jobs_a[2]))
    await asyncio.sleep(0.01)
    assert not third.done()                      # two clusters open, none read yet
    gate.record(jobs_a[0], _row(1.0))
    gate.record(jobs_b[0], _row(0.0))
    assert await asyncio.wait_for(third, 60) is True   # a hang guard
    fourth = asyncio.create_task(gate.admit(jobs_a[4]))
    await asyncio.sleep(0.01)
    gate.close()
    assert await asyncio.wait_for(fourth, 60) is False


def test_the_option_is_checked() -> None:
    assert UntilDecided.parse(" a , b ") == UntilDecided("a", "b")
    for bad in ("a", "a,b,c", "a,", "a,a"):
        with pytest.raises(UsageError, match="--until-decided"):
            UntilDecided.parse(bad)
    with pytest.raises(UsageError, match="--alpha"):
        UntilDecided.parse("a,b", alpha=1.5)
    with pytest.raises(UsageError, match="'c' is not among the run's models"):
        UntilDecided("a", "c").check_models([make_model("http://x", "a"), make_model("http://x", "b")])


def _scripted(body: dict) -> Reply:
    """Model a right on every question, b right on odd ones; b's questions 0, 7, 14 ... fail with HTTP 400."""
    n = int(re.search(r"question (\d+)", body["messages"][-1]["content"]).group(1))
    if body["model"] == "a-id":
        return Reply(content="ok")
    if n % 7 == 0:
        return Reply(fault="http_400")
    return Reply(content="ok" if n % 2 else "no")


async def _run(tmp_path: Path, server: FakeOpenAI, tests: int, *, max_cost: float | None = None, **model) -> tuple:
    models = [make_model(server.base_url, "a", **model), make_model(server.base_url, "b", **model)]
    gate = DecisionGate(UntilDecided("a", "b"), models, [make_test(i) for i in range(tests)], None, seed=4,
                        concurrency=4)
    journal = Journal(tmp_path / "_journal.sqlite")
    runner = Runner(RunConfig(run_id="r", concurrency=4, max_cost=max_cost), journal, ResultsWriter(tmp_path, journal),
                    gate=gate)
    try:
        stats = await runner.run({m.name: (m, gate.jobs(m)) for m in models}, gate.total_jobs(),
                                 {m.name: None for m in models})
        return gate, stats, journal.count()
    finally:
        journal.close()


async def test_runner_stops_dispatch_once_decided_with_error_rows_left_out(tmp_path: Path,
                                                                           fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = _scripted
    gate, stats, (rows, errors) = await _run(tmp_path, fake_openai, 200, max_retries=0)
    summary = gate.summary(stats.stopped)
    assert summary["verdict"] == "a better" and summary["tests_excluded"] > 0
    assert summary["tests_used"] + summary["tests_excluded"] == summary["tests_decided_at"]
    assert len(fake_openai.requests) == rows == summary["jobs_made"] < 400
    assert errors > 0   # the error rows are kept in the run folder, only left out of the statistic
    # the run did not race ahead: what was dispatched past the decision is at most the lookahead
    assert summary["tests_dispatched"] <= summary["tests_decided_at"] + gate.lookahead


async def test_a_budget_stop_leaves_it_undecided(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = _scripted
    gate, stats, _ = await _run(tmp_path, fake_openai, 200, max_cost=1e-9, price_in=1.0, price_out=1.0)
    summary = gate.summary(stats.stopped)
    assert stats.stopped == "budget" and summary["reason"] == "budget" and summary["verdict"] == "undecided"
    assert summary["tests_not_run"] > 150
