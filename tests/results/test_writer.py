"""Journal and Parquet parts: durable, crash-recoverable, each row in exactly one part."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from engine.client.request import PreparedRequest
from engine.client.response import CallResult
from engine.errors import HTTPStatusError
from engine.model.answer import ToolCall
from engine.model.model_config import ModelConfig
from engine.model.verdict import Verdict
from engine.results.journal import Journal
from engine.results.rows import AGENT_COLUMNS, SINGLE_TURN_NULLS, build_row, is_fallback, row_key
from engine.results.schema import COLUMN_NAMES, SCHEMA
from engine.results.writer import ResultsWriter
from tests.factories import make_test

MODEL = ModelConfig(name="m", model="gpt-4o", base_url="http://127.0.0.1:1/v1", price_in=2.5, price_out=10.0)


def row(i: int, *, error: bool = False) -> tuple[str, dict]:
    test = make_test(id=f"t{i}", eval={"contains": "a"}, hash=f"h{i}", tags=("x",), golden={"a": 1})
    result = CallResult(text="a", tool_calls=(ToolCall.from_raw("f", '{"x": 1}', id="c1"),), finish_reason="stop",
                        served_model="gpt-4o-2024-08-06", prompt_tokens=10, completion_tokens=None, latency_s=0.1)
    if error:
        result.error = HTTPStatusError("HTTP 500 from the server", kind="http_500", retryable=True, status=500)
    verdict = None if error else Verdict(score=1.0, passed=True, reason="found", kind="contains",
                                         details={"isolation": "none"})
    request = PreparedRequest(url="u", body={}, stream=True, temperature=0.0, max_tokens=64, seed=None)
    built = build_row(run_id="r", model=MODEL, test=test, attempt=0, request=request, result=result,
                      verdict=verdict, evaluator_error=None, started_us=1_700_000_000_000_000,
                      ended_us=1_700_000_000_100_000)
    return row_key("m", test, 0), built


def test_row_matches_the_schema_exactly(tmp_path: Path) -> None:
    key, built = row(0)
    # a single-turn row leaves out only the columns null on every one; the part has every column all the same
    assert set(built) <= set(COLUMN_NAMES) and set(COLUMN_NAMES) - set(built) <= set(SINGLE_TURN_NULLS)
    assert not set(built) & set(AGENT_COLUMNS)
    journal = Journal(tmp_path / "_journal.sqlite")
    journal.add(key, built)
    journal.commit()
    ResultsWriter(tmp_path, journal).flush()
    table = pq.read_table(tmp_path / "part-00000.parquet")
    assert table.schema.equals(SCHEMA)
    record = table.to_pylist()[0]
    assert record["fallback"] is False and record["cost"] is None   # completion tokens unknown: no cost
    assert record["completion_tokens"] is None and record["prompt_tokens"] == 10
    assert record["isolation"] == "none" and record["golden"] == '{"a": 1}'
    assert record["tool_calls"] == [{"id": "c1", "name": "f", "arguments": '{"x": 1}', "valid_json": True}]
    assert str(record["started_at"]) == "2023-11-14 22:13:20+00:00"
    assert all(record[c] is None for c in SINGLE_TURN_NULLS)


def test_a_row_without_its_null_columns_makes_the_same_part_as_with_them(tmp_path: Path) -> None:
    tables = []
    for folder, fill in ((tmp_path / "sparse", False), (tmp_path / "full", True)):
        folder.mkdir()
        journal = Journal(folder / "_journal.sqlite")
        writer = ResultsWriter(folder, journal)
        for i in range(3):
            key, built = row(i, error=(i == 1))
            journal.add(key, {c: built.get(c) for c in COLUMN_NAMES} if fill else built)
        journal.commit()
        writer.flush()
        tables.append(pq.read_table(folder / "part-00000.parquet"))
    assert tables[0].equals(tables[1], check_metadata=True)


@pytest.mark.parametrize("asked, served, expected", [
    ("gpt-4o", "gpt-4o", False), ("gpt-4o", "gpt-4o-2024-08-06", False), ("gpt-4", "gpt-4-0613", False),
    ("llama3", "meta/llama3", False), ("openai/gpt-4o", "gpt-4o", False), ("GPT-4o", "gpt-4o", False),
    ("gpt-4o", "gpt-4o-mini", True), ("claude-3", "gpt-4o", True), ("m", None, None),
    # Gemini's pinned versions (ai.google.dev "Model versions": `gemini-1.5-flash-002`, `gemini-2.0-flash-001`),
    # as the reply's modelVersion names them, with or without the `models/` prefix; `-latest` aliases too.
    ("gemini-1.5-flash", "gemini-1.5-flash-002", False), ("gemini-2.0-flash", "gemini-2.0-flash-001", False),
    ("gemini-2.0-flash-lite", "models/gemini-2.0-flash-lite-001", False),
    ("gemini-1.5-pro-latest", "gemini-1.5-pro-002", False),
    ("gemini-2.0-flash", "gemini-2.0-flash-lite-001", True), ("gemini-1.5-pro-latest", "gemini-1.5-flash-002", True),
    # Anthropic's aliases (docs.anthropic.com "Models overview"): `-latest`, and `claude-sonnet-4-0` for
    # `claude-sonnet-4-20250514`; a dated id for another model is still a fallback.
    ("claude-3-5-sonnet-latest", "claude-3-5-sonnet-20241022", False),
    ("claude-3-7-sonnet-latest", "claude-3-7-sonnet-20250219", False),
    ("claude-3-5-haiku-latest", "claude-3-5-haiku-20241022", False),
    ("claude-sonnet-4-0", "claude-sonnet-4-20250514", False), ("claude-opus-4-1", "claude-opus-4-1-20250805", False),
    ("claude-3-5-sonnet-latest", "claude-3-5-haiku-20241022", True),
    ("claude-sonnet-4-0", "claude-opus-4-20250514", True), ("claude-3-5-sonnet-latest", "claude-3-5-sonnet", False),
    ("openai/gpt-4o", "azure/gpt-4o", True),
])
def test_fallback_rule(asked: str, served: str | None, expected: bool | None) -> None:
    assert is_fallback(asked, served) is expected


def test_a_key_is_never_written_twice(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "_journal.sqlite")
    key, built = row(0)
    journal.add(key, built)
    journal.add(key, built)
    journal.commit()
    journal.add(key, built)
    journal.commit()
    assert journal.count() == (1, 0)


def test_crash_between_assigning_and_writing_a_part_is_recovered(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "_journal.sqlite")
    for i in range(5):
        journal.add(*row(i))
    journal.commit()
    journal.assign_part("part-00000.parquet")   # the process "dies" before writing the file
    (tmp_path / "part-00000.parquet.tmp").write_bytes(b"half a file")
    (tmp_path / "part-00007.parquet").write_bytes(b"a part no journal row names")
    journal.close()
    journal = Journal(tmp_path / "_journal.sqlite")
    writer = ResultsWriter(tmp_path, journal)
    writer.recover()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("part-")) == ["part-00000.parquet"]
    assert len(pd.read_parquet(tmp_path)) == 5


def test_successful_retry_replaces_the_error_row_in_its_part(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "_journal.sqlite")
    writer = ResultsWriter(tmp_path, journal)
    for i in range(3):
        journal.add(*row(i, error=(i == 1)))
    journal.commit()
    writer.flush()
    journal.close()
    journal = Journal(tmp_path / "_journal.sqlite", replace_errors=True)
    writer = ResultsWriter(tmp_path, journal)
    journal.add(*row(1))
    journal.commit()
    writer.flush()
    df = pd.read_parquet(tmp_path)
    assert len(df) == 3 and df["error_kind"].isna().all()
    assert sorted(p.name for p in tmp_path.glob("part-*")) == ["part-00000.parquet", "part-00001.parquet"]


def test_parts_flush_every_n_rows(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "_journal.sqlite")
    writer = ResultsWriter(tmp_path, journal, rows_per_part=4)
    for i in range(10):
        journal.add(*row(i))
        journal.commit()
        writer.maybe_flush()
    assert len(list(tmp_path.glob("part-*.parquet"))) == 2
    writer.flush()
    assert len(pd.read_parquet(tmp_path)) == 10


def test_the_agent_struct_columns_declare_exactly_the_transcript_record_keys() -> None:
    import asyncio

    from engine.agent.golden import GoldenCaller
    from engine.agent.loop import run_conversation
    from engine.model.agent import AgentSettings
    from engine.results.schema import LEDGER_ENTRY, TOOL_EVENT, TRANSCRIPT_MESSAGE
    from engine.suite.agent import compile_golden
    from engine.suite.tools import compile_tools

    tools, _ = compile_tools({"t": {"parameters": {"type": "object"}, "returns": [{"result": 1}]}})
    turns, _ = compile_golden([{"tool_calls": [{"name": "t", "arguments": {}}]}, "done"])
    transcript = asyncio.run(run_conversation(GoldenCaller(turns), [{"role": "user", "content": "q"}], tools,
                                              AgentSettings()))
    assert list(transcript.records()[1]) == TRANSCRIPT_MESSAGE.names
    assert list(transcript.ledger_records()[0]) == LEDGER_ENTRY.names
    assert list(transcript.tool_event_records()[0]) == TOOL_EVENT.names
    call_struct = TRANSCRIPT_MESSAGE.field("tool_calls").type.value_type
    assert list(transcript.records()[1]["tool_calls"][0]) == call_struct.names
