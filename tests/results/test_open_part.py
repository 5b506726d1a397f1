"""Rows named to the writer's open part when committed: crash-safe, never duplicated, same table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from engine.results.journal import Journal
from engine.results.schema import SCHEMA
from engine.results.writer import ResultsWriter, table_from_json
from tests.results.test_writer import row


def test_rows_committed_into_the_open_part_survive_a_crash_before_it_is_written(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "_journal.sqlite")
    ResultsWriter(tmp_path, journal)               # names the open part: part-00000
    for i in range(4):
        journal.add(*row(i))
    journal.commit()
    assert journal.parts() == {"part-00000.parquet"} and journal.unassigned() == 0
    journal._db.close()                            # the process dies: no part file was written
    assert not list(tmp_path.glob("part-*.parquet"))
    journal = Journal(tmp_path / "_journal.sqlite")
    writer = ResultsWriter(tmp_path, journal)
    writer.recover()
    assert journal.open_part == "part-00001.parquet"
    journal.add(*row(4))
    journal.add(*row(0))                           # already done: ignored, never a second copy
    journal.commit()
    writer.flush()
    assert sorted(p.name for p in tmp_path.glob("part-*")) == ["part-00000.parquet", "part-00001.parquet"]
    df = pd.read_parquet(tmp_path)
    assert sorted(df["test_id"]) == ["t0", "t1", "t2", "t3", "t4"]


def test_rows_without_a_part_join_the_open_part(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "_journal.sqlite")
    journal.add(*row(0))
    journal.commit()                               # no writer yet: committed without a part
    writer = ResultsWriter(tmp_path, journal)
    journal.add(*row(1))
    journal.commit()
    writer.flush()
    assert journal.parts() == {"part-00000.parquet"} and journal.unassigned() == 0
    assert len(pq.read_table(tmp_path / "part-00000.parquet")) == 2
    writer.flush()                                 # nothing new: no empty part
    assert [p.name for p in tmp_path.glob("part-*")] == ["part-00000.parquet"]


def test_arrow_json_reader_builds_the_same_table_as_from_pylist() -> None:
    rows = [row(i, error=(i == 1))[1] for i in range(3)]
    rows[0]["answer"] = 'multi\nline "quoted" \\ é \U0001f600'
    rows[2]["temperature"] = 0                     # an int in a float column
    texts = [json.dumps(r, ensure_ascii=False) for r in rows]
    expected = pa.Table.from_pylist([json.loads(t) for t in texts], schema=SCHEMA)
    assert table_from_json(texts).equals(expected, check_metadata=True)


def test_text_the_arrow_reader_refuses_still_makes_a_table() -> None:
    built = row(0)[1]
    built["latency_s"] = float("nan")              # Python's json writes NaN, which is not JSON
    table = table_from_json([json.dumps(built)])
    assert table.schema.equals(SCHEMA) and math.isnan(table.column("latency_s")[0].as_py())


def test_part_rows_come_in_key_order_as_sqlite_orders_them(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "_journal.sqlite")
    writer = ResultsWriter(tmp_path, journal)
    for i in (5, 12, 1, 30, 2):
        journal.add(*row(i))
    journal.add("m\x1fs\x1fé\x1fh\x1f\x1f0", row(7)[1])      # a non-ASCII key sorts by code point
    journal.commit()
    count, lines = journal.json_lines_of_part(writer.journal.open_part or "")
    expected = [d for (d,) in journal._db.execute("SELECT CAST(data AS BLOB) FROM rows ORDER BY key")]
    assert count == 6 and lines.split(b"\n") == expected
