"""A run holds the tests of the calls in flight, not the suite: jobs read their tests from the store as they go."""

from __future__ import annotations

import gc
from pathlib import Path

import pandas as pd

from engine.model.test import Test
from engine.results.journal import Journal
from engine.results.writer import ResultsWriter
from engine.run.jobs import count_jobs, iter_jobs, select_tests
from engine.run.runner import RunConfig, Runner, RunStats
from engine.suite import load_suites
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.helpers import make_model

ROWS = 800
CONCURRENCY = 8


def _live_tests() -> int:
    """Tests alive now (a Test is in no reference cycle: reference counting frees it, no collection needed)."""
    return sum(isinstance(o, Test) for o in gc.get_objects())


async def test_a_run_holds_the_tests_in_flight_not_the_suite(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content=f"It is {body['messages'][-1]['content'].split()[-1]}")
    (tmp_path / "rows.csv").write_text("n\n" + "".join(f"{i}\n" for i in range(ROWS)))
    (tmp_path / "s.yaml").write_text("suite: s\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"say {{ n }}\"\n"
                                     "    eval: {contains: \"{{ n }}\"}\n    cases_from: rows.csv\n"
                                     "  - id: left-out\n    prompt: no\n    eval: {contains: no}\n    tags: [skip]\n")
    gc.collect()
    before = _live_tests()
    [suite], _ = load_suites([tmp_path / "s.yaml"])
    tests = select_tests(suite.tests, ["q-*"])
    peak = 0

    def watch(stats: RunStats) -> None:
        nonlocal peak
        peak = max(peak, _live_tests() - before)

    model = make_model(fake_openai.base_url, concurrency=CONCURRENCY)
    (tmp_path / "run").mkdir()
    journal = Journal(tmp_path / "run" / "_journal.sqlite")
    writer = ResultsWriter(tmp_path / "run", journal, rows_per_part=500)
    runner = Runner(RunConfig(run_id="r", concurrency=CONCURRENCY, commit_rows=100), journal, writer,
                    on_progress=watch)
    stats = await runner.run({"m": (model, iter_jobs(model, tests, None))}, count_jobs([model], tests, None),
                             {"m": None})
    journal.close()
    df = pd.read_parquet(tmp_path / "run")
    assert stats.done == ROWS == len(df) and df["passed"].all()   # each row scored by its own rebuilt evaluator
    assert "left-out" not in set(df["test_id"])
    assert 0 < peak <= 3 * CONCURRENCY   # the jobs in flight and the next few; never the suite's 800
