"""Parts are the truth once written: damaged journals and parts, then a resume against the fake server.

Each case: a finished run of 30 rows in 5 parts (7, 7, 7, 7, 2), some damage, then a resume the way
`engine run --resume` does it (`folder.open_journal`, `ResultsWriter.recover`, the runner). After it
`pd.read_parquet` reads all 30 rows once each, no readable row was deleted, and the calls the fake
server sees are exactly the rows nothing readable held any more.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from engine.model.model_config import ModelConfig
from engine.model.test import Test
from engine.results import folder
from engine.results.writer import ResultsWriter
from engine.run.jobs import count_jobs, iter_jobs
from engine.run.runner import RunConfig, Runner
from tests.fake_openai import FakeOpenAI
from tests.run.helpers import make_model, make_test, run_jobs

TESTS = [make_test(i) for i in range(30)]
ROWS_PER_PART = 7


async def finished_run(run_dir: Path, server: FakeOpenAI) -> ModelConfig:
    model = make_model(server.base_url)
    for start in range(0, len(TESTS), ROWS_PER_PART):   # one session per part: parts of known rows
        await run_jobs(run_dir, [model], TESTS[start:start + ROWS_PER_PART], rows_per_part=ROWS_PER_PART)
    assert sorted(p.name for p in run_dir.glob("part-*")) == [f"part-0000{i}.parquet" for i in range(5)]
    server.reset()
    return model


async def resume(run_dir: Path, model: ModelConfig, tests: list[Test] = TESTS) -> list[str]:
    """`engine run --resume` in process: open the journal, recover the parts, run what is missing."""
    journal, notes = folder.open_journal(run_dir)
    try:
        writer = ResultsWriter(run_dir, journal, rows_per_part=ROWS_PER_PART)
        notes += writer.recover()
        skip = journal.keys()
        runner = Runner(RunConfig(run_id="run-1", concurrency=4), journal, writer)
        jobs = {model.name: (model, iter_jobs(model, tests, None, skip=skip))}
        await runner.run(jobs, count_jobs([model], tests, None, skip=skip), {model.name: None})
    finally:
        journal.close()
    return notes


def asked(server: FakeOpenAI) -> list[str]:
    """The test ids the server was asked about, in order."""
    return ["t" + body["messages"][0]["content"].split()[-1] for body in server.requests]


def assert_complete(run_dir: Path) -> pd.DataFrame:
    df = pd.read_parquet(run_dir)
    assert sorted(df["test_id"]) == sorted(t.id for t in TESTS)
    return df


def ids_in_part(path: Path) -> list[str]:
    return sorted(pd.read_parquet(path)["test_id"])


JOURNAL_DAMAGE = {
    "emptied": lambda p: p.write_bytes(b""),
    "deleted": lambda p: p.unlink(),
    "garbage": lambda p: p.write_bytes(os.urandom(4096)),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 3]),
}


@pytest.mark.parametrize("damage", sorted(JOURNAL_DAMAGE))
async def test_a_damaged_journal_is_rebuilt_from_the_parts_and_nothing_is_paid_again(
        damage: str, tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    model = await finished_run(tmp_path, fake_openai)
    parts_before = {p.name: p.read_bytes() for p in tmp_path.glob("part-*.parquet")}
    JOURNAL_DAMAGE[damage](tmp_path / "_journal.sqlite")
    notes = await resume(tmp_path, model)
    assert fake_openai.requests == []
    assert {p.name: p.read_bytes() for p in tmp_path.glob("part-*.parquet")} == parts_before   # never rewritten
    assert_complete(tmp_path)
    journal, _ = folder.open_journal(tmp_path)
    assert journal.count() == (30, 0) and len(journal.parts()) == 5
    journal.close()
    if damage in ("garbage", "truncated"):
        assert any("is corrupt" in n and "_journal.sqlite.corrupt" in n for n in notes), notes
        assert (tmp_path / "_journal.sqlite.corrupt").exists()
    else:
        assert any("restored" in n for n in notes), notes


PART_DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "emptied": lambda p: p.write_bytes(b""),
    "footer_cut": lambda p: p.write_bytes(p.read_bytes()[:-10]),
    "pages_overwritten": lambda p: p.write_bytes(p.read_bytes()[:4] + os.urandom(p.stat().st_size - 200)
                                                 + p.read_bytes()[-196:]),
}


@pytest.mark.parametrize("damage", sorted(PART_DAMAGE))
async def test_a_damaged_part_is_moved_aside_and_written_again_from_the_journal(
        damage: str, tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    model = await finished_run(tmp_path, fake_openai)
    part = tmp_path / "part-00001.parquet"
    original, ids = part.read_bytes(), ids_in_part(part)
    PART_DAMAGE[damage](part)
    with pytest.raises(Exception):  # noqa: B017 - whatever pyarrow raises: the folder is broken now
        pd.read_parquet(tmp_path)
    notes = await resume(tmp_path, model)
    assert fake_openai.requests == []                          # the journal still had its rows: none paid again
    aside = tmp_path / "_part-00001.parquet.corrupt"
    assert aside.exists() and aside.read_bytes() != original   # kept for inspection, never deleted
    assert any("part-00001.parquet is unreadable" in n for n in notes), notes
    assert ids_in_part(part) == ids
    assert_complete(tmp_path)


async def test_a_damaged_part_and_a_lost_journal_run_only_that_parts_rows_again(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    model = await finished_run(tmp_path, fake_openai)
    lost = ids_in_part(tmp_path / "part-00002.parquet")
    PART_DAMAGE["truncated"](tmp_path / "part-00002.parquet")
    (tmp_path / "_journal.sqlite").write_bytes(b"")
    notes = await resume(tmp_path, model)
    assert sorted(asked(fake_openai)) == lost                  # only the rows nothing readable held
    assert any("the rows it held will run again" in n for n in notes), notes
    df = assert_complete(tmp_path)
    assert not df.duplicated(["test_id", "attempt"]).any()
    for name in ("part-00000", "part-00001", "part-00003", "part-00004"):
        assert (tmp_path / f"{name}.parquet").exists()         # readable parts are never deleted


async def test_a_part_the_journal_lacks_gives_its_rows_back(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """The journal was replaced by an older copy: the part's extra rows are restored, not deleted."""
    model = await finished_run(tmp_path, fake_openai)
    ids = ids_in_part(tmp_path / "part-00003.parquet")
    journal, _ = folder.open_journal(tmp_path)
    journal._db.execute("DELETE FROM rows WHERE part = 'part-00003.parquet'")
    journal.close()
    notes = await resume(tmp_path, model)
    assert fake_openai.requests == []
    assert any("part-00003.parquet: 7 row(s) missing from the journal were restored" in n for n in notes), notes
    assert ids_in_part(tmp_path / "part-00003.parquet") == ids
    assert_complete(tmp_path)


async def test_a_leftover_temporary_part_is_removed_and_hidden_from_readers(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    model = await finished_run(tmp_path, fake_openai)
    (tmp_path / ".part-00005.parquet.tmp").write_bytes(b"half a part")   # a crash mid-write
    assert len(pd.read_parquet(tmp_path)) == 30                          # readers skip the hidden name
    await resume(tmp_path, model)
    assert not list(tmp_path.glob("*.tmp")) and fake_openai.requests == []
