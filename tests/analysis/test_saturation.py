"""Saturation over time from run folders without a manifest: runs dated by their rows, errors neither for nor
against, calls counted from turns, the response cache and judges."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from builders import grid_rows, write_run

from engine.analysis.load import ANALYSIS_COLUMNS, find_parquet_files, load
from engine.analysis.saturation import EXTRA_COLUMNS, parse_since, saturated_since


def _run(folder: Path, run_id: str, day: str, grid: dict, **extra) -> None:
    when = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)
    write_run(folder / run_id, grid_rows(grid, run_id=run_id, started_at=when, ended_at=when, **extra))


def test_rows_date_the_runs_and_error_runs_do_not_count(tmp_path: Path) -> None:
    _run(tmp_path, "old", "2026-10-01", {"m1": {"a": [1], "b": [0]}, "m2": {"a": [1], "b": [1]}})
    _run(tmp_path, "mid", "2026-11-02", {"m1": {"a": [1], "b": [None]}, "m2": {"a": [1], "b": [None]}},
         cost=0.5)
    _run(tmp_path, "new", "2026-11-03", {"m1": {"a": [1], "b": [1]}, "m2": {"a": [1, 1], "b": [1]}}, cost=0.25,
         cached=False)
    files = find_parquet_files([tmp_path])
    df = load(files, columns=[*ANALYSIS_COLUMNS, *EXTRA_COLUMNS])
    found = saturated_since(df, files, parse_since("2026-11-01"))
    assert list(found.runs["run_id"]) == ["mid", "new"] and set(found.runs["dated_by"]) == {"rows"}
    tests = found.tests.set_index("test_id")
    # b errored everywhere in "mid": that run says nothing about it, so it counts 1 of 2 runs.
    assert tests.loc["b", "runs"] == 1 and tests.loc["b", "runs_since"] == 2
    assert tests.loc["a", "runs"] == 2
    assert tests.loc["a", "calls"] == 5 and tests.loc["a", "cost"] == pytest.approx(2 * 0.5 + 3 * 0.25)
    assert tests.loc["a", "cost_per_run"] == pytest.approx(tests.loc["a", "cost"] / 2)
    assert found.keep == [] and found.newest == "new"
    everything = saturated_since(df, files, parse_since("2026-09-30"))
    assert list(everything.tests["test_id"]) == ["a"]    # b failed for m1 in "old"


def test_calls_follow_turns_cache_and_judges(tmp_path: Path) -> None:
    _run(tmp_path, "r1", "2026-11-10", {"m1": {"a": [1, 1]}, "m2": {"a": [1, 1]}}, turns=3, judge_calls=1)
    _run(tmp_path, "r2", "2026-11-11", {"m1": {"a": [1]}, "m2": {"a": [1]}}, cached=True)
    files = find_parquet_files([tmp_path])
    df = load(files, columns=[*ANALYSIS_COLUMNS, *EXTRA_COLUMNS])
    found = saturated_since(df, files, parse_since("2026-11-01T00:00:00Z"))
    row = found.tests.iloc[0]
    assert row["calls"] == 4 * (3 + 1) + 0          # r1: 4 rows of 3 turns and a judge call; r2: cached
    assert row["cost"] != row["cost"]               # nothing priced: null, not 0
    assert found.keep == [] and len(found.notes) == 1


def test_parse_since_forms() -> None:
    assert parse_since("2026-11-01") == dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    assert parse_since("2026-11-01T10:00:00+02:00") == dt.datetime(2026, 11, 1, 8, tzinfo=dt.UTC)
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        parse_since("last week")
