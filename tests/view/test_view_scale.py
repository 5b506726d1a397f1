"""A large run opens and filters without its rows reaching the page: the grid is paged on the server, the text
search and a test's attempts are filtered scans. 1,000,000 rows in the slow tier, 20,000 in `make test`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.results.schema import SCHEMA
from engine.view.server import dumps
from engine.view.store import Store

MODELS = ("alpha", "beta", "gamma", "delta", "epsilon")
ATTEMPTS = 5


def write_large_run(folder: Path, rows: int, part_rows: int = 250_000, *, models: int = 2,
                    attempts: int = ATTEMPTS) -> int:
    """A run folder of `rows` rows (tests × `models` models × `attempts` attempts) in the results schema; the
    number of tests."""
    folder.mkdir(parents=True)
    tests = rows // (models * attempts)
    index = np.arange(rows)
    test = index // (models * attempts)
    model = (index // attempts) % models
    attempt = index % attempts
    # alpha passes everything; the others fail every 7th test, and every 1000th test's answer holds "needle".
    passed = ~((model >= 1) & (test % 7 == 0))
    for start in range(0, rows, part_rows):
        part = slice(start, min(rows, start + part_rows))
        t = test[part]
        columns = {
            "schema_version": pa.array(np.full(len(t), 1, "int16")),
            "run_id": pa.array(["big"] * len(t)),
            "model": pa.array(np.array(MODELS, dtype=object)[model[part]]),
            "suite": pa.array(["bulk"] * len(t)),
            "test_id": pa.array([f"q-{i}" for i in t]),
            "test_hash": pa.array([f"h{i}" for i in t]),
            "attempt": pa.array(attempt[part].astype("int32")),
            "prompt": pa.array([f"question {i}" for i in t]),
            "answer": pa.array(["needle" if i % 1000 == 0 else "hay" for i in t]),
            "score": pa.array(passed[part].astype("float64")),
            "passed": pa.array(passed[part]),
            "threshold": pa.array(np.ones(len(t))),
            "temperature": pa.array(np.zeros(len(t))),
            "fallback": pa.array(np.zeros(len(t), dtype=bool)),
        }
        arrays = [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(len(t), f.type) for f in SCHEMA]
        pq.write_table(pa.Table.from_arrays(arrays, schema=SCHEMA), folder / f"part-{start // part_rows:05d}.parquet")
    return tests


def _check(tmp_path: Path, rows: int, models: int = 2, attempts: int = ATTEMPTS) -> None:
    tests = write_large_run(tmp_path / "results" / "big", rows, models=models, attempts=attempts)
    for opened in ("first", "again"):    # analysed, then read back from beside the run by another viewer
        run = Store(tmp_path / "results").run("big")
        page = run.grid(limit=50)
        assert page["total"] == tests and len(page["rows"]) == 50, opened
        assert len(dumps(page)) < 50_000           # one page, whatever the run's size
        assert run.grid(limit=10_000)["limit"] == 200   # a page is capped
        failed = run.grid(failed=True, offset=10, limit=20)
        sevens = sorted(f"q-{i}" for i in range(0, tests, 7))    # the grid is in (suite, test id) order
        assert failed["total"] == len(sevens) and [r["test_id"] for r in failed["rows"]] == sevens[10:30]
        found = run.grid(query="NEEDLE", limit=200)
        assert found["total"] == len(range(0, tests, 1000))
        assert [r["test_id"] for r in found["rows"][:2]] == ["q-0", "q-1000"]
        one = run.attempts("bulk", "q-7", -1)
        assert one["total"] == models * attempts
        assert [a["passed"] for a in one["attempts"]] == [True] * attempts + [False] * (models - 1) * attempts
        assert json.loads(dumps(one))["attempts"][0]["model"] == "alpha"
        assert run.summary()["models"][0]["model"] == "alpha"


def test_a_run_of_20000_rows_is_paged_and_filtered_on_the_server(tmp_path: Path) -> None:
    _check(tmp_path, 20_000)


def test_a_run_of_4000_tests_by_5_models_is_paged_and_filtered_on_the_server(tmp_path: Path) -> None:
    _check(tmp_path, 20_000, models=5, attempts=1)


@pytest.mark.slow   # writes and analyses 1,000,000 rows
def test_a_run_of_a_million_rows_is_paged_and_filtered_on_the_server(tmp_path: Path) -> None:
    _check(tmp_path, 1_000_000)


@pytest.mark.slow   # writes and analyses 1,000,000 rows: 200,000 tests, one attempt by each of 5 models
def test_a_run_of_200000_tests_by_5_models_is_paged_and_filtered_on_the_server(tmp_path: Path) -> None:
    _check(tmp_path, 1_000_000, models=5, attempts=1)
