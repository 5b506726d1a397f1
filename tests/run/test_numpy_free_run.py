"""`engine run` loads pyarrow without numpy (engine/_arrow.py): the same parts, and pandas refused, not a crash."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from tests.engine_proc import checkout_env
from tests.run.e2e import engine
from tests.run.test_golden_builtin import AGENT_SUITE, GOLDEN_MODELS, SINGLE_TURN

# What differs between two runs of the same suite whatever the process: when, how long, which run.
_VOLATILE = {"run_id", "started_at", "ended_at"}


def _timeless(value: object) -> object:
    """The value with every duration (a key ending in `_s`, at any depth: latency, ttft, a ledger's start) left out."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if not k.endswith("_s") and k not in _VOLATILE}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _rows(tmp_path: Path, name: str, *, fresh: bool) -> list[dict]:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "single.yaml").write_text(SINGLE_TURN)
    (folder / "agents.yaml").write_text(AGENT_SUITE)
    (folder / "golden.yaml").write_text(GOLDEN_MODELS)
    done = engine("run", str(folder / "single.yaml"), str(folder / "agents.yaml"), "--models",
                  str(folder / "golden.yaml"), "--out", str(folder / "results"), "--quiet", fresh=fresh)
    assert done.returncode == 0, done.stderr
    assert done.args[0] == (sys.executable if fresh else "engine"), done.args   # which kind of process ran it
    (part,) = (folder / "results" / "latest").glob("part-*.parquet")
    table = pq.read_table(part)
    rows = [_timeless(row) for row in table.to_pylist()]
    return sorted(rows, key=lambda row: (row["suite"], row["test_id"], row["case_index"] or 0, row["attempt"]))


def test_a_numpy_free_run_writes_the_same_rows_as_one_with_numpy(tmp_path: Path) -> None:
    # The fork server has numpy loaded before any command (it pre-imports the analysis), so its run keeps
    # a numpy-aware pyarrow; a fresh interpreter's run loads pyarrow without numpy. Tool calls, agent
    # transcripts (nested lists of structs), JSON and table-driven cases all go through the part writer.
    with_numpy = _rows(tmp_path, "with-numpy", fresh=False)
    without = _rows(tmp_path, "without-numpy", fresh=True)
    assert len(without) == 8   # 5 single-turn rows (one test has two cases), 3 conversations
    assert {row["suite"] for row in without} == {"single", "agents"}
    assert any(row["transcript"] for row in without) and any(row["tool_calls"] for row in without)
    assert without == with_numpy


_GUARD = """\
import json, sys
import engine._arrow as arrow
first, again = arrow.load_pyarrow_without_numpy(), arrow.load_pyarrow_without_numpy()
import pyarrow
from engine.results.writer import table_from_json_lines
from engine.results.schema import SCHEMA
row = {name: None for name in SCHEMA.names}
row["cost"] = float("nan")   # NaN: Arrow's JSON reader refuses it, Table.from_pylist (which asks for pandas) copes
text = json.dumps(row).encode()
table = table_from_json_lines(1, text)
try:
    import pandas
    refused = None
except ImportError as exc:
    refused = str(exc)
print(json.dumps({"first": first, "again": again, "np": pyarrow.lib.np is None,
                  "cost_is_nan": table.column("cost")[0].as_py() != table.column("cost")[0].as_py(),
                  "loaded": sorted(m for m in ("numpy", "pandas") if m in sys.modules), "refused": refused}))
"""


def test_pandas_is_refused_with_a_reason_once_pyarrow_has_no_numpy() -> None:
    # pyarrow without numpy crashes the interpreter in `Table.to_pandas`; the guard turns `import pandas` into
    # an ImportError that says why, and pyarrow's own optional use of pandas takes that as "no pandas".
    out = subprocess.run([sys.executable, "-c", _GUARD], capture_output=True, text=True, env=checkout_env(),
                         check=False)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.splitlines()[-1])
    assert found["first"] is True and found["again"] is False
    assert found["np"] is True   # pyarrow itself holds no numpy
    assert found["cost_is_nan"] is True
    assert found["loaded"] == []
    assert "`engine run` loaded pyarrow without numpy (engine/_arrow.py)" in found["refused"]


def test_a_process_with_numpy_keeps_its_pyarrow() -> None:
    # This test process has numpy and pyarrow (as the fork server, a Ray worker or `--until-decided` have):
    # nothing changes, pandas stays importable.
    import numpy  # noqa: F401

    import engine._arrow as arrow

    assert arrow.load_pyarrow_without_numpy() is False
    import pandas  # noqa: F401
    import pyarrow

    assert pyarrow.lib.np is not None

