"""Filtered scans of results files: one opened dataset serves many filters, files written by older engines
(without later columns) are read beside newer ones, and files whose statistics rule a filter out give no rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from engine.analysis.load import open_dataset, read_table


def _runs(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    # An older part: no case_index and no variant column at all.
    pq.write_table(pa.table({"suite": ["a", "a", "b"], "test_id": ["t1", "t2", "t1"], "model": ["m", "m", "m"],
                             "score": [1.0, 0.0, 1.0], "fallback": [False, False, False]}),
                   run / "part-00000.parquet")
    pq.write_table(pa.table({"suite": ["a", "a"], "test_id": ["t1", "t3"], "model": ["n", "n"],
                             "case_index": pa.array([None, 2], pa.int32()), "variant": ["v1", None],
                             "score": [0.5, 0.25], "fallback": [False, False]}),
                   run / "part-00001.parquet")
    pq.write_table(pa.table({"suite": ["z"], "test_id": ["t9"], "model": ["m"], "score": [1.0], "fallback": [True]}),
                   run / "part-00002.parquet")
    return run


def _rows(table: pa.Table) -> list[tuple]:
    return sorted((r["suite"], r["test_id"], r["case_index"], r["model"], r["score"])
                  for r in table.select(["suite", "test_id", "case_index", "model", "score"]).to_pylist())


def test_one_opened_dataset_answers_every_filter_as_a_fresh_read_does(tmp_path: Path) -> None:
    run = _runs(tmp_path)
    dataset = open_dataset(run)
    filters = [
        (ds.field("suite") == "a") & (ds.field("test_id") == "t1") & ds.field("case_index").is_null(),
        (ds.field("suite") == "a") & (ds.field("case_index") == 2),
        ds.field("suite") == "z",
        ds.field("suite") == "nowhere",
        ds.field("test_id").isin(["t1", "t9"]),
    ]
    for where in filters * 2:   # the same dataset twice over: what the first scans learnt changes no answer
        assert _rows(read_table(dataset, where=where)) == _rows(read_table(run, where=where))
    assert _rows(read_table(dataset, where=filters[0])) == [("a", "t1", None, "m", 1.0), ("a", "t1", None, "n", 0.5)]
    assert _rows(read_table(dataset, where=filters[1])) == [("a", "t3", 2, "n", 0.25)]
    assert read_table(dataset, where=filters[3]).num_rows == 0
    # Columns no file has come back as nulls, as in an unfiltered read.
    assert read_table(dataset, columns=["suite", "cost"], where=filters[2])["cost"].to_pylist() == [None]
