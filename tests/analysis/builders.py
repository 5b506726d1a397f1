"""Build synthetic results tables from a compact description and write them as real Parquet runs.

    grid = {"m1": {"t1": [1, 1], "t2": [0, None]}, "m2": {...}}   # model -> test -> attempt scores
    rows = grid_rows(grid, threshold=1.0)                          # None = an error row
    write_run(tmp_path / "run1", rows)

Agent runs add the columns of `AGENT_FIELDS` (named as the design note in engine/agent/__init__.py
plans them); `agent_row(transcript, ...)` fills them from a real `Transcript`, and `AGENT_SCHEMA` writes them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.results.schema import COLUMN_NAMES, SCHEMA

T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)

# The agent columns, typed from the record keys of engine/model/transcript.py (`Transcript.records()`,
# `counts()`); declared here until engine/results/schema.py declares them (then those win).
_CALL = pa.struct([("id", pa.string()), ("name", pa.string()), ("arguments", pa.string())])
_MESSAGE = pa.struct([
    ("turn", pa.int64()), ("role", pa.string()), ("content", pa.string()), ("reasoning", pa.string()),
    ("tool_calls", pa.list_(_CALL)), ("tool_call_id", pa.string()), ("tool_name", pa.string()),
    ("tool_status", pa.string()), ("tool_rule", pa.int64()), ("tool_latency_s", pa.float64()),
    ("latency_s", pa.float64()), ("ttft_provider_s", pa.float64()), ("ttft_visible_s", pa.float64()),
    ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()), ("retries", pa.int64()),
    ("truncated", pa.bool_()), ("served_model", pa.string()), ("fallback", pa.bool_())])
AGENT_FIELDS = [pa.field("transcript", pa.list_(_MESSAGE)), pa.field("turns", pa.int64()),
                pa.field("prose_turns", pa.int64()), pa.field("tool_calls_made", pa.int64()),
                pa.field("invented_tools", pa.int64()), pa.field("bad_tool_args", pa.int64()),
                pa.field("outcome", pa.string()), pa.field("state", pa.string())]
AGENT_SCHEMA = pa.schema([*SCHEMA, *(f for f in AGENT_FIELDS if f.name not in SCHEMA.names)])


def agent_row(transcript: Any, **values: Any) -> dict[str, Any]:
    """One results row of an agent test, its agent columns from a real `engine.agent.Transcript`."""
    return row(**{"transcript": transcript.records(), **transcript.counts(),
                  "state": json.dumps(dict(transcript.state), sort_keys=True), "answer": transcript.final_answer,
                  **values})


def row(**values: Any) -> dict[str, Any]:
    """One results row: every schema column, with plain defaults overridden by `values`."""
    base: dict[str, Any] = {name: None for name in COLUMN_NAMES}   # agent columns only when given
    base.update({
        "schema_version": 1, "run_id": "run-1", "model": "m1", "model_id": "m1", "served_model": "m1",
        "fallback": False, "api": "chat", "suite": "s", "test_id": "t1", "test_hash": "h-t1", "case_index": None,
        "attempt": 0, "tags": [], "prompt": '[{"role": "user", "content": "q"}]', "golden": None,
        "temperature": 0.0, "max_tokens": 64, "answer": "a", "tool_calls": [], "finish_reason": "stop",
        "prompt_tokens": 10, "completion_tokens": 5, "latency_s": 0.5, "ttft_visible_s": 0.1, "retries": 0,
        "rate_limit_wait_s": 0.0, "truncated": False, "threshold": 1.0, "evaluators": [],
        "started_at": T0, "ended_at": T0,
    })
    unknown = set(values) - set(AGENT_SCHEMA.names)
    if unknown:
        raise KeyError(f"not schema columns: {sorted(unknown)}")
    base.update(values)
    return base


def grid_rows(
    grid: Mapping[str, Mapping[str, Sequence[float | None]]],
    *,
    threshold: float = 1.0,
    suite: str = "s",
    run_id: str = "run-1",
    **extra: Any,
) -> list[dict[str, Any]]:
    """Rows for model -> test -> attempt scores; None makes an error row (score and passed null)."""
    out = []
    for model, tests in grid.items():
        for test_id, attempts in tests.items():
            for attempt, score in enumerate(attempts):
                fields: dict[str, Any] = {
                    "model": model, "model_id": model, "served_model": model, "suite": suite, "test_id": test_id,
                    "test_hash": f"h-{test_id}", "attempt": attempt, "threshold": threshold, "run_id": run_id,
                    "prompt": f"question {test_id}", "answer": f"answer of {model} to {test_id}",
                }
                if score is None:
                    fields.update(score=None, passed=None, error_kind="timeout", error_message="deadline passed",
                                  answer=None)
                else:
                    fields.update(score=float(score), passed=float(score) >= threshold, evaluators=[{
                        "path": "contains", "kind": "contains", "name": None, "score": float(score),
                        "weight": 1.0, "passed": float(score) >= threshold, "error": False,
                        "reason": "found 'x'" if score >= threshold else "expected 'x', got 'y'"}])
                fields.update(extra)
                out.append(row(**fields))
    return out


def table(rows: Iterable[Mapping[str, Any]], schema: pa.Schema = SCHEMA) -> pa.Table:
    """The rows as an Arrow table of the results schema."""
    rows = list(rows)
    return pa.Table.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema=schema)


def write_run(folder: Path, rows: Iterable[Mapping[str, Any]], *, schema: pa.Schema = SCHEMA,
              parts: int = 1) -> Path:
    """Write a run folder: part-NNNNN.parquet files and a manifest.json."""
    folder.mkdir(parents=True, exist_ok=True)
    data = table(rows, schema)
    size = max(1, -(-data.num_rows // parts))
    for i in range(parts):
        pq.write_table(data.slice(i * size, size), folder / f"part-{i:05d}.parquet")
    run_id = data["run_id"][0].as_py() if data.num_rows and "run_id" in data.column_names else folder.name
    (folder / "manifest.json").write_text(json.dumps({"run_id": run_id, "rows": data.num_rows}))
    return folder
