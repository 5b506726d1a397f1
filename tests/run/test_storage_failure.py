"""A journal that cannot grow (SQLite's `max_page_count`: SQLITE_FULL, as on a full disk), without root.

The end-to-end case on a real full tmpfs is in test_run_folder.py (root only); this one runs everywhere.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from engine.errors import StorageError
from engine.results.journal import Journal
from engine.results.writer import ResultsWriter
from engine.run.jobs import count_jobs, iter_jobs
from engine.run.runner import RunConfig, Runner
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.helpers import make_model, make_test, run_jobs

CONCURRENCY = 4


def settled_requests(server: FakeOpenAI) -> int:
    """The server's request count once it stopped changing: a call cancelled on the client may still be
    read by the server a moment later, and it belongs to the run that made it, not to the next one."""
    seen, still = -1, 0
    while still < 5:
        time.sleep(0.05)
        now = len(server.requests)
        still = still + 1 if now == seen and server.in_flight == 0 else 0
        seen = now
    return seen


async def test_a_journal_that_cannot_grow_stops_spending_at_once(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="ok " + "x" * 3000, delay_s=0.02)
    model, tests = make_model(fake_openai.base_url), [make_test(i) for i in range(200)]
    journal = Journal(tmp_path / "_journal.sqlite")
    pages = journal._db.execute("PRAGMA page_count").fetchone()[0]
    journal._db.execute(f"PRAGMA max_page_count = {pages + 12}")   # room for a few rows, then "disk full"
    writer = ResultsWriter(tmp_path, journal)
    runner = Runner(RunConfig(run_id="run-1", concurrency=CONCURRENCY), journal, writer)
    jobs = {model.name: (model, iter_jobs(model, tests, None, skip=set()))}
    with pytest.raises(StorageError) as raised:
        await runner.run(jobs, count_jobs([model], tests, None), {model.name: None})
    assert raised.value.disk_full and "database or disk is full" in str(raised.value)
    assert "rollback" not in str(raised.value)
    saved = journal.keys()
    assert 0 < len(saved) < 200 and runner.stats.stopped == "storage"
    made = settled_requests(fake_openai)
    # Calls in flight were cancelled and nothing new dispatched: the lost calls are bounded by the
    # concurrency (in flight + finished since the last commit), not by the ~190 jobs left.
    assert made - len(saved) <= 4 * CONCURRENCY, (made, len(saved))
    journal.close()                                  # a failed journal does not try to commit again

    saved_ids = {key.split("\x1f")[2] for key in saved}
    await run_jobs(tmp_path, [model], tests, concurrency=CONCURRENCY)   # "free space": a fresh connection
    again = ["t" + body["messages"][0]["content"].split()[-1] for body in fake_openai.requests[made:]]
    assert not saved_ids & set(again)                # no saved row paid for twice
    assert sorted(again) == sorted({t.id for t in tests} - saved_ids)
    df = pd.read_parquet(tmp_path)
    assert len(df) == 200 and not df.duplicated(["test_id"]).any()
