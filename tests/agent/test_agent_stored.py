"""An agent row read back from Parquet rebuilds the transcript it was written from (what `rescore` scores)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from engine.agent.golden import GoldenCaller
from engine.agent.loop import run_conversation
from engine.agent.stored import transcript_of_row
from engine.client.request import RequestSettings, prepare
from engine.model.agent import AgentSettings
from engine.model.model_config import ModelConfig
from engine.results.rows import build_agent_row, build_row
from engine.results.schema import SCHEMA
from engine.suite.agent import compile_golden
from engine.suite.tools import compile_tools
from tests.factories import make_test

TOOLS = {"get_weather": {"parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                         "returns": [{"when": {"city": ["Paris"]}, "result": {"temp_c": 18}, "set": {"asked": True}},
                                     {"error": "unknown city"}]}}
GOLDEN = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                          {"name": "get_weather", "arguments": "{\"city\": "},
                          {"name": "nope", "arguments": {}}]},
          "It is 18."]


async def test_a_stored_agent_row_gives_back_its_transcript(tmp_path: Path) -> None:
    tools, problems = compile_tools(TOOLS)
    turns, golden_problems = compile_golden(GOLDEN)
    assert problems == golden_problems == []
    caller = GoldenCaller(turns)
    transcript = await run_conversation(caller, [{"role": "user", "content": "q"}], tools, AgentSettings(),
                                        asked_model="golden")
    model = ModelConfig(name="golden", model="golden", builtin="golden")
    test = make_test(eval={"contains": "18"})
    row = build_agent_row(run_id="r", model=model, test=test, attempt=0,
                          request=prepare(model, test, RequestSettings()), transcript=transcript, replies=[],
                          verdict=None, evaluator_error=None, started_us=0, ended_us=1)
    pq.write_table(pa.Table.from_pylist([row], schema=SCHEMA), tmp_path / "p.parquet")
    (stored,) = pq.read_table(tmp_path / "p.parquet").to_pylist()
    back = transcript_of_row(stored)
    assert back is not None
    assert back.records() == transcript.records()
    assert back.ledger_records() == transcript.ledger_records()
    assert back.tool_event_records() == transcript.tool_event_records()
    assert back.counts() == transcript.counts() == {"turns": 2, "prose_turns": 1, "tool_calls_made": 3,
                                                    "invented_tools": 1, "bad_tool_args": 1, "outcome": "completed"}
    assert dict(back.state) == {"asked": True} and back.answer() == transcript.answer()
    assert [e.arguments for e in back.tool_events] == [e.arguments for e in transcript.tool_events]


def test_a_single_turn_row_has_no_transcript() -> None:
    from engine.client.response import CallResult

    model = ModelConfig(name="m", model="m", base_url="http://127.0.0.1:1/v1")
    test = make_test(eval={"contains": "x"})
    row = build_row(run_id="r", model=model, test=test, attempt=0, request=prepare(model, test, RequestSettings()),
                    result=CallResult(text="x"), verdict=None, evaluator_error=None, started_us=0, ended_us=1)
    assert transcript_of_row(row) is None
    assert all(row.get(c) is None for c in ("transcript", "ledger", "tool_events", "turns", "outcome", "state"))
