"""Golden conversations (compiled, replayed through the loop) and the loop's rules without a server."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from engine.agent.golden import GoldenCaller, replay_golden
from engine.agent.loop import run_conversation
from engine.base.yaml import load_yaml_text
from engine.model.agent import AgentSettings, GoldenTurn
from engine.model.answer import ToolCall
from engine.suite.agent import compile_golden
from engine.suite.tools import compile_tools

TOOLS, _ = compile_tools(load_yaml_text("""
get_weather:
  parameters: {type: object, properties: {city: {type: string}}, required: [city]}
  returns:
    - when: {city: [Paris]}
      result: {temp_c: 18, sky: cloudy}
    - error: unknown city
counter:
  parameters: {type: object, properties: {by: {type: integer}}}
  returns:
    - result: "{{ (state.n | default(0)) + by }}"
      set: {n: "{{ (state.n | default(0)) + by }}"}
""", "inline.yaml").data)
OPENING = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "What should I wear in Paris?"})


def turns(raw: Any) -> tuple[GoldenTurn, ...]:
    compiled, problems = compile_golden(raw)
    assert not problems, problems
    return compiled


async def test_the_weather_golden_replays_to_a_completed_conversation() -> None:
    golden = turns([{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                    "It is 18°C and cloudy: take a light jacket."])
    transcript = await replay_golden(golden, OPENING, TOOLS, AgentSettings(max_turns=4))
    assert transcript.outcome == "completed" and "18" in transcript.final_answer
    assert [m.role for m in transcript.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert transcript.messages[3].content == '{"temp_c": 18, "sky": "cloudy"}'
    assert [(turn, call.name) for turn, call in transcript.calls()] == [(1, "get_weather")]
    assert transcript.ledger[0].served_model == "golden" and transcript.fallbacks == 0
    assert transcript.prompt_tokens is None   # a replay counts no tokens: unknown, not 0


async def test_a_golden_longer_than_max_turns_is_capped() -> None:
    golden = turns([{"tool_calls": [{"name": "counter", "arguments": {"by": 1}}]},
                    {"tool_calls": [{"name": "counter", "arguments": {"by": 2}}]}, "3"])
    transcript = await replay_golden(golden, OPENING, TOOLS, AgentSettings(max_turns=2), state={"n": 0})
    assert transcript.outcome == "capped" and transcript.turns == 2
    assert transcript.state == {"n": 3}   # the last allowed turn's calls were still answered


async def test_the_golden_caller_past_its_last_turn_is_an_error() -> None:
    unfinished = (GoldenTurn(tool_calls=(ToolCall.from_arguments("get_weather", {"city": "Paris"}, id="c1"),)),)
    transcript = await run_conversation(GoldenCaller(unfinished), OPENING, TOOLS)
    assert transcript.outcome == "error" and transcript.ledger[-1].error_kind == "golden_exhausted"
    assert "has 1 turn(s)" in (transcript.error or "")


@pytest.mark.parametrize(("raw", "path", "words"), [
    ("Paris", ("golden",), "a list"),
    ([], ("golden",), "a list"),
    ([3], ("golden", 0), "answer text or"),
    (["early answer", "late answer"], ("golden", 0), "never played"),
    ([{"tool_calls": [{"name": "get_weather", "arguments": {}}]}], ("golden", 0), "must end with the answer"),
    ([{"tool_calls": [{"arguments": {}}]}, "x"], ("golden", 0, "tool_calls", 0), "needs a `name`"),
    ([{"tool_calls": [{"name": "a", "args": {}}]}, "x"], ("golden", 0, "tool_calls", 0, "args"), "unknown key"),
    ([{"calls": []}, "x"], ("golden", 0, "calls"), "unknown key 'calls'"),
    ([{"tool_calls": "get_weather"}, "x"], ("golden", 0, "tool_calls"), "must be a list"),
])
def test_golden_problems_are_data_with_paths(raw: Any, path: tuple[Any, ...], words: str) -> None:
    compiled, problems = compile_golden(raw)
    assert compiled == () and any(p.path == path and words in p.message for p in problems), problems


# ---------------------------------------------------------------- the loop's rules, played by a golden


def calls(*pairs: tuple[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments} for name, arguments in pairs]}


async def test_one_turns_calls_see_the_state_in_call_order_and_the_given_state_is_not_changed() -> None:
    start = {"n": 10}
    golden = turns([calls(("counter", {"by": 1}), ("counter", {"by": 5})), "done"])
    transcript = await replay_golden(golden, OPENING, TOOLS, state=start)
    assert [e.content for e in transcript.tool_events] == ["11", "16"]
    assert transcript.state == {"n": 16} and start == {"n": 10}


async def test_repeats_count_the_same_arguments_in_any_key_order() -> None:
    golden = turns([calls(("get_weather", {"city": "Paris", "x": 1})),
                    calls(("get_weather", {"x": 1, "city": "Paris"})), "done"])
    transcript = await replay_golden(golden, OPENING, TOOLS, AgentSettings(max_turns=5, max_repeats=0))
    assert transcript.outcome == "stuck" and transcript.turns == 2


async def test_raw_golden_arguments_replay_malformed_calls() -> None:
    golden = turns([calls(("get_weather", '{"city": ')), calls(("get_weather", '["Paris"]')), "sorry"])
    transcript = await replay_golden(golden, OPENING, TOOLS)
    assert [e.status for e in transcript.tool_events] == ["bad_args", "bad_args"]
    assert transcript.bad_tool_args == 2 and transcript.outcome == "completed"


async def test_calls_without_an_id_get_one_their_tool_message_answers() -> None:
    anonymous = (GoldenTurn(tool_calls=(ToolCall("get_weather", {"city": "Paris"}, '{"city": "Paris"}'),)),
                 GoldenTurn(content="18"))
    transcript = await run_conversation(GoldenCaller(anonymous), OPENING, TOOLS)
    sent = transcript.to_openai()
    assert sent[2]["tool_calls"][0]["id"] == "call_1_0" == sent[3]["tool_call_id"]


async def test_records_have_one_shape_for_every_role() -> None:
    golden = turns([calls(("get_weather", {"city": "Paris"}), ("nope", {})), "18"])
    transcript = await replay_golden(golden, OPENING, TOOLS)
    records = transcript.records()
    assert len({tuple(r) for r in records}) == 1
    table = pa.Table.from_pylist(records)
    assert table.num_rows == 6 and table.column("tool_status").to_pylist() == [None, None, None, "ok", "invented",
                                                                               None]
    assert pa.Table.from_pylist(transcript.ledger_records()).num_rows == 2
    events = pa.Table.from_pylist(transcript.tool_event_records())
    assert events.column("status").to_pylist() == ["ok", "invented"]


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="max_turns"):
        AgentSettings(max_turns=0)
    with pytest.raises(ValueError, match="max_repeats"):
        AgentSettings(max_repeats=-1)
