"""The viewer's snapshot beside a run: analysed once and read back by the next viewer, analysed again when the
run's Parquet files change, kept in memory where the folder cannot hold it, and never trusted when it is damaged
or belongs to other files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.view.cache import CACHE_DIR
from engine.view.server import dumps
from engine.view.store import Store
from tests.view.test_view_scale import write_large_run

ROWS = 4_000   # 400 tests × 2 models × 5 attempts, in parts of 1,000 rows


def _pages(root: Path) -> dict[str, Any]:
    """Everything a viewer over `root` shows of the run, as the JSON the pages get."""
    store = Store(root)
    run = store.run("big")
    return json.loads(dumps({
        "runs": store.runs(), "summary": run.summary(), "grid": run.grid(limit=200, offset=7),
        "failed": run.grid(failed=True, tag=None, limit=30), "saturated": run.grid(klass="saturated", limit=5),
        "attempts": run.attempts("bulk", "q-14", -1), "diff": store.diff("big", "big"),
    }))


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    write_large_run(tmp_path / "results" / "big", ROWS, part_rows=1_000)
    return tmp_path / "results"


def _garble_keeping_size_and_time(part: Path) -> None:
    stat = part.stat()
    part.write_bytes(b"\0" * stat.st_size)
    os.utime(part, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_the_next_viewer_reads_the_snapshot_instead_of_the_rows(root: Path) -> None:
    first = _pages(root)
    assert (root / "big" / CACHE_DIR).is_dir()
    assert _pages(root) == first               # read back: the same JSON, figure for figure
    # The snapshot is keyed on each part's size and modification time: with the parts' bytes gone but those
    # kept, a new viewer still shows every aggregate (it does not read the rows to show them).
    for part in sorted((root / "big").glob("part-*.parquet")):
        _garble_keeping_size_and_time(part)
    store = Store(root)
    run = store.run("big")
    assert run.summary() == first["summary"] and json.loads(dumps(run.grid(limit=200, offset=7))) == first["grid"]


def test_a_changed_part_is_analysed_again(root: Path) -> None:
    before = _pages(root)
    assert before["runs"][0]["tests"] == 400
    # Another 100 tests: a new part written into the run.
    extra = root / "spare"
    write_large_run(extra, 1_000, part_rows=1_000)
    table = pq.read_table(extra / "part-00000.parquet")
    renamed = pa.array([f"new-{i}" for i in table["test_id"].to_pylist()])
    table = table.set_column(table.schema.get_field_index("test_id"), "test_id", renamed)
    pq.write_table(table, root / "big" / "part-00004.parquet")
    shutil.rmtree(extra)
    after = _pages(root)
    assert after["runs"][0]["tests"] == 500 and after["summary"]["models"] != before["summary"]["models"]
    # A part rewritten in place (same name) is a change too.
    part = root / "big" / "part-00004.parquet"
    pq.write_table(pq.read_table(part).slice(0, 500), part)
    assert _pages(root)["runs"][0]["tests"] == 450


def test_a_folder_that_cannot_hold_the_snapshot_is_served_from_memory(root: Path) -> None:
    expected = _pages(root)
    shutil.rmtree(root / "big" / CACHE_DIR)
    (root / "big" / CACHE_DIR).write_text("not a folder", encoding="utf-8")   # nothing can be written there
    assert _pages(root) == expected
    assert (root / "big" / CACHE_DIR).read_text(encoding="utf-8") == "not a folder"


@pytest.mark.parametrize("damage", ["summary text", "summary of other files", "truncated table", "table of another run",
                                    "wrong column type"])
def test_a_damaged_or_foreign_snapshot_is_never_trusted(root: Path, tmp_path: Path, damage: str) -> None:
    expected = _pages(root)
    cache = root / "big" / CACHE_DIR
    if damage == "summary text":
        (cache / "summary.json").write_text('{"key": ', encoding="utf-8")
    elif damage == "summary of other files":
        data = json.loads((cache / "summary.json").read_text(encoding="utf-8"))
        data["summary"]["models"][0]["pass_rate"] = 0.0
        data["key"]["files"][0][1] += 1
        (cache / "summary.json").write_text(json.dumps(data), encoding="utf-8")
    elif damage == "truncated table":
        (cache / "tests.arrow").write_bytes((cache / "tests.arrow").read_bytes()[:500])
    elif damage == "table of another run":
        other = tmp_path / "other"
        write_large_run(other / "big", 2_000, part_rows=1_000)
        _pages(other)
        shutil.copy(other / "big" / CACHE_DIR / "tests.arrow", cache / "tests.arrow")
    else:
        table = pa.ipc.open_file(pa.OSFile(str(cache / "tests.arrow"))).read_all()
        stamp = table.schema.metadata
        table = table.set_column(table.schema.get_field_index("case_index"), "case_index",
                                 table["case_index"].cast("string")).replace_schema_metadata(stamp)
        with pa.ipc.new_file(str(cache / "tests.arrow"), table.schema) as writer:
            writer.write_table(table)
    assert _pages(root) == expected
