"""A Parquet part read from the journal's JSON: the single-turn fast path gives the table the full schema gives."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.client.request import PreparedRequest
from engine.client.response import CallResult
from engine.errors import HTTPStatusError
from engine.model.answer import ToolCall
from engine.model.model_config import ModelConfig
from engine.model.verdict import Verdict
from engine.results.journal import Journal
from engine.results.rows import build_row, row_key
from engine.results.schema import EVALUATOR_NODE, SCHEMA
from engine.results.writer import (
    ResultsWriter,
    _read_lines,
    _single_turn_schema,
    table_from_json,
    table_from_json_lines,
)
from tests.factories import make_test

MODEL = ModelConfig(name="m", model="gpt-4o", base_url="http://127.0.0.1:1/v1", price_in=2.5, price_out=10.0)
REQUEST = PreparedRequest(url="u", body={}, stream=False, temperature=0.0, max_tokens=64, seed=7)

JUDGED = Verdict(score=0.5, passed=False, reason="graded 3 of 5", kind="judge",
                 details={"judge_model": "grader", "scale": "1-5", "grade": 3, "grades": [3, 3],
                          "judge_calls": 2, "judge_cached": 0, "judge_prompt_tokens": 40,
                          "judge_completion_tokens": 4, "judge_cost": 0.001})
TREE = Verdict(score=1.0, passed=True, reason="all passed", kind="all", children=(
    Verdict(score=1.0, passed=True, reason="found", kind="contains", name="has it"),
    Verdict(score=1.0, passed=True, reason="ran", kind="exec", weight=0.0, details={"isolation": "pidns"})))


def _row(i: int, verdict: Verdict | None, *, error: bool = False, tools: bool = False) -> tuple[str, dict]:
    test = make_test(id=f"t{i}", eval={"contains": "a"}, hash=f"h{i}", tags=("x", "y") if i % 2 else ())
    result = CallResult(text=f"answer {i} \u00e9\n\"quoted\"", finish_reason="stop", served_model="gpt-4o",
                        prompt_tokens=10, completion_tokens=3, latency_s=0.25, ttft_provider_s=0.1)
    if tools:
        result.tool_calls = (ToolCall.from_raw("f", '{"x": 1}', id="c1"), ToolCall.from_raw("g", "{bad", id="c2"))
    if error:
        result.error = HTTPStatusError("HTTP 500 from the server", kind="http_500", retryable=True, status=500)
    built = build_row(run_id="r", model=MODEL, test=test, attempt=i % 3, request=REQUEST, result=result,
                      verdict=None if error else verdict, evaluator_error=None,
                      started_us=1_700_000_000_000_000 + i, ended_us=1_700_000_000_100_000 + i)
    return row_key("m", test, i % 3), built


PLAIN = [_row(0, Verdict(score=1.0, passed=True, reason="found", kind="contains")),
         _row(1, None, error=True),
         _row(2, Verdict(score=0.0, passed=False, reason="not found", kind="regex", name="named"), tools=True),
         _row(3, TREE)]


def _lines(rows: list[tuple[str, dict]]) -> bytes:
    from engine.results.journal import _encode

    return b"\n".join(_encode(built).encode() for _, built in rows)


@pytest.mark.parametrize("rows", [PLAIN, [*PLAIN, _row(4, JUDGED)]], ids=["single-turn", "with a judge"])
def test_a_part_read_from_json_is_the_table_of_its_rows(rows: list[tuple[str, dict]]) -> None:
    expected = pa.Table.from_pylist([{**built, "started_at": built["started_at"], "ended_at": built["ended_at"]}
                                     for _, built in rows], schema=SCHEMA)
    table = table_from_json_lines(len(rows), _lines(rows))
    assert table.schema.equals(SCHEMA, check_metadata=True)
    assert table.equals(expected)
    assert table.to_pylist() == expected.to_pylist()


def test_single_turn_rows_fit_the_narrow_read_and_a_judge_row_does_not() -> None:
    """The fast path stays taken: a new column or evaluator field on plain rows would make it fall back."""
    assert _read_lines(_lines(PLAIN), _single_turn_schema(), "error").num_rows == len(PLAIN)
    with pytest.raises(pa.ArrowInvalid, match="unexpected field"):
        _read_lines(_lines([_row(4, JUDGED)]), _single_turn_schema(), "error")


def test_the_judge_fields_close_an_evaluator_entry() -> None:
    """The narrow read's entries are the leading fields of `EVALUATOR_NODE`, the judge fields added after."""
    names = [field.name for field in EVALUATOR_NODE]
    first_judge = next(i for i, name in enumerate(names) if name.startswith("judge_"))
    assert all(name.startswith("judge_") for name in names[first_judge:])


def test_a_judge_row_keeps_its_judge_fields_in_the_part(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "_journal.sqlite")
    writer = ResultsWriter(tmp_path, journal)
    for key, built in [*PLAIN, _row(4, JUDGED)]:
        journal.add(key, built)
    journal.commit()
    writer.flush()
    records = pq.read_table(tmp_path / "part-00000.parquet").to_pylist()
    judged = next(r for r in records if r["test_id"] == "t4")
    assert judged["judge_calls"] == 2 and judged["judge_cost"] == pytest.approx(0.001)
    node = judged["evaluators"][0]
    assert node["judge_model"] == "grader" and node["judge_grades"] == ["3", "3"] and node["judge_grade"] == "3"
    plain = next(r for r in records if r["test_id"] == "t3")
    assert [n["path"] for n in plain["evaluators"]] == ["all", "all/0.contains", "all/1.exec"]
    assert plain["evaluators"][1]["name"] == "has it" and plain["evaluators"][1]["judge_model"] is None
    assert plain["isolation"] == "pidns" and plain["judge_calls"] is None


def test_rows_the_reader_refuses_still_make_their_table() -> None:
    """NaN (written as json.dumps writes it) goes through the last fallback, with the same result."""
    _, built = _row(0, Verdict(score=1.0, passed=True, reason="found", kind="contains"))
    built["latency_s"] = float("nan")
    table = table_from_json([json.dumps(built)])
    value = table.column("latency_s")[0].as_py()
    assert value != value and table.column("test_id")[0].as_py() == "t0"


def test_one_commit_of_many_rows_inserts_each_new_key_once(tmp_path: Path) -> None:
    """Duplicates in a batch and keys already there are skipped; the open part counts each new row once."""
    journal = Journal(tmp_path / "_journal.sqlite")
    journal.start_part("part-00000.parquet")
    _, template = PLAIN[0]
    for i in range(150):
        journal.add(f"k{i}", template)
    journal.commit()
    for i in range(100, 551):   # 50 known keys, 401 new ones
        journal.add(f"k{i}", template)
    journal.add("k0", template)
    journal.add("k550", template)
    journal.commit()
    assert journal.count() == (551, 0)
    assert journal.open_part_rows == 551
    assert journal.rows_in("part-00000.parquet") == 551
    count, lines = journal.json_lines_of_part("part-00000.parquet")
    assert count == 551 and table_from_json_lines(count, lines).num_rows == 551
