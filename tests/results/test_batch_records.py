"""The journal's batch records: what a resumed run reads to wait for the batches it already paid for, made
durable through the committer's thread before the run goes on."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import StorageError
from engine.results.committer import Committer
from engine.results.journal import BatchRecord, Journal
from engine.results.writer import ResultsWriter


def test_a_batch_is_recorded_then_given_its_id_and_read_back_after_reopening(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "_journal.sqlite")
    first = BatchRecord("b1", "gpt", None, ("k\x1f0", "k\x1f1"), "2026-12-07T15:00:00Z")
    second = BatchRecord("b2", "claude", "msgbatch_2", ("k\x1f2",), "2026-12-07T15:00:01Z")
    journal.put_batch(first)
    journal.put_batch(second)
    journal.put_batch(BatchRecord("b1", "gpt", "batch_1", first.keys, first.at))   # its id, once the provider said
    journal.close()
    again = Journal(tmp_path / "_journal.sqlite")
    try:
        assert again.batches() == [BatchRecord("b1", "gpt", "batch_1", ("k\x1f0", "k\x1f1"), first.at), second]
    finally:
        again.close()


async def test_the_committers_write_is_durable_when_awaited_even_past_a_kill(tmp_path: Path) -> None:
    """What `write` returned from is in the file: another process reads it while this one still runs, and it
    survives this process's kill -9 (the journal's WAL, as committed rows do)."""
    script = f"""
import asyncio, os, signal, sys
sys.path.insert(0, {os.getcwd()!r})
from pathlib import Path
from engine.results.committer import Committer
from engine.results.journal import BatchRecord, Journal
from engine.results.writer import ResultsWriter

async def main():
    run = Path({str(tmp_path)!r})
    journal = Journal(run / "_journal.sqlite")
    committer = Committer(journal, ResultsWriter(run, journal), asyncio.get_running_loop(), lambda _: None,
                          lambda exc: None, interval_s=3600.0, rows=10**6)
    await committer.write(lambda j: j.put_batch(BatchRecord("b1", "m", "batch_1", ("a", "b"), "t")))
    os.kill(os.getpid(), signal.SIGKILL)   # no close, no commit of anything else

asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, timeout=60)
    assert done.returncode == -9, done.stderr.decode()
    journal = Journal(tmp_path / "_journal.sqlite")
    try:
        assert journal.batches() == [BatchRecord("b1", "m", "batch_1", ("a", "b"), "t")]
    finally:
        journal.close()


async def test_rows_and_writes_go_through_one_thread_and_a_write_after_close_is_refused(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "_journal.sqlite")
    heard: list[list[str]] = []
    committer = Committer(journal, ResultsWriter(tmp_path, journal), asyncio.get_running_loop(), heard.append,
                          lambda exc: heard.append(["failed", str(exc)]), interval_s=3600.0, rows=1000)
    try:
        committer.add("k0", {"error_kind": None, "test_id": "t0"}, "k0")
        await committer.write(lambda j: j.put_batch(BatchRecord("b1", "m", None, ("k1",), "t")))
        await asyncio.sleep(0)   # the rows' `on_commit`, queued with the write's answer
        assert journal.keys() == {"k0"} and heard == [["k0"]]   # the waiting row went with the write
        assert [b.local for b in journal.batches()] == ["b1"]
        committer.close()
        with pytest.raises(StorageError, match="takes no more writes"):
            await committer.write(lambda j: j.put_batch(BatchRecord("b2", "m", None, ("k2",), "t")))
    finally:
        journal.close()


async def test_a_failed_write_is_raised_to_the_writer_and_told_to_the_run(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "_journal.sqlite")
    failures: list[BaseException] = []
    committer = Committer(journal, ResultsWriter(tmp_path, journal), asyncio.get_running_loop(), lambda _: None,
                          failures.append, interval_s=3600.0, rows=1000)

    def full(_: Journal) -> None:
        raise StorageError("could not write the batch: database or disk is full", disk_full=True)

    try:
        with pytest.raises(StorageError, match="disk is full"):
            await committer.write(full)
        assert [str(f) for f in failures] == ["could not write the batch: database or disk is full"]
        with pytest.raises(StorageError):   # nothing more is written once a write failed
            await committer.write(lambda j: j.put_batch(BatchRecord("b1", "m", None, ("k1",), "t")))
        assert journal.batches() == []
    finally:
        committer.close()
        journal.close()


def test_a_row_answered_through_a_batch_carries_its_batch_and_the_batch_price_into_parquet(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from engine.client.request import PreparedRequest
    from engine.client.response import CallResult
    from engine.model.model_config import ModelConfig
    from engine.results.rows import build_row, row_key
    from tests.factories import make_test

    model = ModelConfig("m", "m-id", price_in=2.0, price_out=8.0)
    request = PreparedRequest(url="u", body={}, stream=False, temperature=0.0, max_tokens=64, seed=None)
    journal = Journal(tmp_path / "_journal.sqlite")
    for i, batch_id in enumerate(("batch_7", None)):
        test = make_test(id=f"t{i}", eval={"contains": "a"}, hash=f"h{i}")
        result = CallResult(text="a", prompt_tokens=1_000_000, completion_tokens=1_000_000, batch_id=batch_id)
        journal.add(row_key("m", test, 0), build_row(run_id="r", model=model, test=test, attempt=0, request=request,
                                                     result=result, verdict=None, evaluator_error=None,
                                                     started_us=0, ended_us=1))
    journal.commit()
    ResultsWriter(tmp_path, journal).flush()
    journal.close()
    table = pq.read_table(tmp_path / "part-00000.parquet", columns=["test_id", "batch_id", "cost"]).to_pylist()
    assert sorted(table, key=lambda r: r["test_id"]) == [{"test_id": "t0", "batch_id": "batch_7", "cost": 5.0},
                                                          {"test_id": "t1", "batch_id": None, "cost": 10.0}]
