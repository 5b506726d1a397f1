"""Invariants of the loop over generated conversations, and the smallest agent suite end to end in YAML."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

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
      result: {temp_c: 18}
    - error: unknown city
counter:
  parameters: {type: object, properties: {by: {type: integer}}}
  returns:
    - result: ok
      set: {n: "{{ (state.n | default(0)) + (by | default(1)) }}"}
""", "inline.yaml").data)

CALLS = st.builds(
    lambda name, raw, call_id: ToolCall.from_raw(name, raw, id=call_id),
    st.sampled_from(["get_weather", "counter", "ghost"]),
    st.sampled_from(['{"city": "Paris"}', '{"city": "Lyon"}', '{"by": 2}', "{}", '{"city": ', '["x"]']),
    st.sampled_from([None, "call_0", "a", "b"]),   # missing and reused ids included
)
TURNS = st.lists(st.builds(lambda calls, text: GoldenTurn(text, tuple(calls)),
                           st.lists(CALLS, max_size=3), st.sampled_from(["", "done"])), min_size=1, max_size=6)


def _expected_status(call: ToolCall) -> str:
    tool = TOOLS.get(call.name)
    if tool is None:
        return "invented"
    if not call.valid_json or tool.argument_problem(call.arguments) is not None:
        return "bad_args"
    return tool.answer(call.arguments, {}).status


@settings(max_examples=300, deadline=None)
@given(TURNS, st.integers(1, 5), st.integers(0, 2))
def test_every_conversation_keeps_the_loops_invariants(turns: list[GoldenTurn], max_turns: int,
                                                       max_repeats: int) -> None:
    transcript = asyncio.run(run_conversation(GoldenCaller(turns), [{"role": "user", "content": "go"}], TOOLS,
                                              AgentSettings(max_turns, max_repeats), asked_model="golden"))
    ledger = transcript.ledger
    assert 1 <= transcript.turns <= max_turns and [e.turn for e in ledger] == list(range(1, len(ledger) + 1))
    # every call answered once, in call order, right after its assistant message; ids unique
    sent = transcript.to_openai()
    ids: list[str] = []
    for i, message in enumerate(sent):
        if message["role"] == "assistant" and "tool_calls" in message:
            expected = [c["id"] for c in message["tool_calls"]]
            answers = [m["tool_call_id"] for m in sent[i + 1:i + 1 + len(expected)]]
            assert answers == expected
            ids += expected
    assert len(ids) == len(set(ids)) == transcript.tool_calls_made == len(transcript.tool_events)
    # the statuses and counts follow from the calls alone
    made = [call for _, call in transcript.calls()]
    assert [e.status for e in transcript.tool_events] == [_expected_status(c) for c in made]
    assert transcript.invented_tools == sum(c.name not in TOOLS for c in made)
    assert transcript.bad_tool_args == sum(_expected_status(c) == "bad_args" for c in made)
    # the outcome agrees with the ledger
    last = ledger[-1].kind
    repeats = Counter(c.name + (json.dumps(c.arguments, sort_keys=True) if c.valid_json else c.raw_arguments)
                      for c in made)
    stuck = any(n > max_repeats + 1 for n in repeats.values())
    if transcript.outcome == "completed":
        assert last == "answer" and transcript.prose_turns == 1
    elif transcript.outcome == "error":
        assert last == "error" and transcript.turns == len(turns) + 1   # asked past the golden's end
    elif transcript.outcome == "stuck":
        assert last == "tool_calls" and stuck
    else:
        assert transcript.outcome == "capped" and last == "tool_calls" and transcript.turns == max_turns
        assert not stuck
    # the state counts the counter calls that were answered ok
    counted = sum(json.loads(c.raw_arguments).get("by", 1) for c, e in zip(made, transcript.tool_events, strict=True)
                  if c.name == "counter" and e.status == "ok")
    assert transcript.state.get("n", 0) == counted


# The smallest agent suite, kept once as a fixture (also loaded by test_agent_suites and test_agent_golden_check).
WEATHER_SUITE = (Path(__file__).resolve().parents[1] / "fixtures" / "agent" / "weather_agent.yaml").read_text(
    encoding="utf-8")


async def test_the_weather_suite_from_yaml_through_the_loop() -> None:
    """The weather suite, compiled by this package, its golden replayed; the checks written out by hand
    until the trajectory evaluators exist."""
    suite = load_yaml_text(WEATHER_SUITE, "inline.yaml").data
    tools, problems = compile_tools(suite["tools"])
    assert problems == []
    test = suite["tests"][0]
    golden, problems = compile_golden(test["golden"], ("tests", 0, "golden"))
    assert problems == []
    offered = {name: tools[name] for name in test["tools"]}
    transcript = await replay_golden(golden, [{"role": "user", "content": test["prompt"]}], offered,
                                     AgentSettings(**test["agent"]))
    assert transcript.outcome == "completed"
    assert [call.name for _, call in transcript.calls()] == test["eval"]["all"][0]["tool_sequence"]
    assert test["eval"]["all"][1]["final_answer"]["contains"] in transcript.final_answer
    # and a golden that asks for a city the tool does not know reads the declared error
    lost, _ = compile_golden([{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Atlantis"}}]},
                              "no idea"])
    missed = await replay_golden(lost, [{"role": "user", "content": test["prompt"]}], offered)
    assert missed.tool_events[0].status == "error" and missed.messages[2].content == '{"error": "unknown city"}'
