"""The agent loop against a scripted multi-turn model on loopback, through the real ModelClient."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pyarrow as pa
import pytest

from engine.agent.loop import run_conversation
from engine.agent.model_caller import EndpointCaller
from engine.base.yaml import load_yaml_text
from engine.client.client import ModelClient
from engine.client.request import RequestSettings
from engine.client.session import Sessions
from engine.client.window import Window
from engine.errors import ConfigError
from engine.model.agent import AgentSettings
from engine.model.model_config import ModelConfig
from engine.model.test import Test
from engine.model.tools import Tool
from engine.model.transcript import Transcript
from engine.suite.tools import compile_tools
from tests.agent.scripted_server import ScriptedServer, Turn, latest_tool_results, model_turns

TOOLS_YAML = """
get_weather:
  description: Current weather for a city.
  parameters: {type: object, properties: {city: {type: string}}, required: [city]}
  returns:
    - when: {city: [Paris]}
      result: {temp_c: 18, sky: cloudy}
    - when: {city: [Rome]}
      result: {temp_c: 24, sky: sunny}
      delay_s: 0.2
    - error: unknown city
get_time:
  description: Local time in a city.
  parameters: {type: object, properties: {city: {type: string}}, required: [city]}
  returns:
    - result: {city: "{{ city }}", time: "14:05"}
      delay_s: 0.2
find_slots:
  parameters: {type: object, properties: {restaurant: {type: string}}, required: [restaurant]}
  returns:
    - when: {restaurant: [Chez Anna]}
      result: {slots: ["19:00", "21:00"]}
    - error: "no restaurant called {{ restaurant }}"
book:
  parameters: {type: object, properties: {restaurant: {type: string}, time: {type: string}},
               required: [restaurant, time]}
  returns:
    - when: {time: ["19:00", "21:00"]}
      result: {confirmation: "BK-{{ time | replace(':', '') }}"}
      set: {booked: true, booked_time: "{{ time }}"}
    - error: "{{ time }} is not free"
"""

TOOLS, _PROBLEMS = compile_tools(load_yaml_text(TOOLS_YAML, "inline.yaml").data)
assert not _PROBLEMS, _PROBLEMS


def offered(*names: str) -> dict[str, Tool]:
    return {name: TOOLS[name] for name in names}


async def converse(server: ScriptedServer, tools: dict[str, Tool], *, prompt: str = "What should I wear in Paris?",
                   stream: bool = True, max_turns: int = 4, max_repeats: int = 2,
                   state: dict[str, Any] | None = None) -> Transcript:
    model = ModelConfig(name="m", model="agent-1", base_url=server.base_url, timeout_s=10.0, max_retries=2)
    test = Test(suite="s", id="t", file="s.yaml", line=1, messages=({"role": "user", "content": prompt},),
                prompt=prompt, eval=None)
    async with Sessions(64) as sessions:
        client = ModelClient(sessions, {"m": "sk-test"})
        caller = EndpointCaller(client, model, test, RequestSettings(stream=stream), tools=list(tools.values()))
        return await run_conversation(caller, test.messages, tools, AgentSettings(max_turns, max_repeats),
                                      state=state, asked_model=model.model)


def weather_agent(messages: list[dict[str, Any]]) -> Turn:
    """Looks the weather up, then answers with the temperature it read in the tool message."""
    results = latest_tool_results(messages)
    if not results:
        return Turn(content="Let me check.", tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
    return Turn(content=f"It is {results[0]['temp_c']}°C and {results[0]['sky']}: take a light jacket.")


def roles(transcript: Transcript) -> list[str]:
    return [message.role for message in transcript.messages]


@pytest.mark.parametrize("stream", [True, False])
async def test_a_model_that_completes_the_task(stream: bool) -> None:
    async with ScriptedServer(weather_agent) as server:
        transcript = await converse(server, offered("get_weather"), stream=stream)
    assert transcript.outcome == "completed"
    assert transcript.counts() == {"turns": 2, "prose_turns": 1, "tool_calls_made": 1, "invented_tools": 0,
                                   "bad_tool_args": 0, "outcome": "completed"}
    assert "18" in transcript.final_answer
    assert roles(transcript) == ["user", "assistant", "tool", "assistant"]
    assert transcript.state == {}
    # the second request carried the declared result as a tool message answering the model's call id
    second = server.requests[1]["messages"]
    call_id = second[1]["tool_calls"][0]["id"]
    assert second[1]["content"] == "Let me check."
    assert second[2] == {"role": "tool", "content": '{"temp_c": 18, "sky": "cloudy"}', "tool_call_id": call_id}
    assert all(body["tools"] == [TOOLS["get_weather"].definition] for body in server.requests)
    assert [e.status for e in transcript.tool_events] == ["ok"] and transcript.tool_events[0].rule == 0
    # the ledger: one entry per call, tokens summed, timings recorded
    assert [e.kind for e in transcript.ledger] == ["tool_calls", "answer"]
    assert (transcript.prompt_tokens, transcript.completion_tokens) == (40, 12)
    assert all(e.latency_s is not None and e.ttft_provider_s is not None for e in transcript.ledger)
    assert all((e.ttft_visible_s is not None) is stream for e in transcript.ledger)
    assert [e.fallback for e in transcript.ledger] == [False, False] and transcript.retries == 0
    assert transcript.cost(1.0, 2.0) == pytest.approx((40 * 1.0 + 12 * 2.0) / 1e6)
    # the transcript as records fits one Arrow struct type (the future Parquet column)
    column = pa.array(transcript.records())
    assert pa.types.is_struct(column.type) and len(column) == 4
    assert column.type.field("tool_calls").type.value_type.field("arguments").type == pa.string()
    assert transcript.to_openai()[:3] == second


async def test_a_model_that_loops_is_capped_at_max_turns() -> None:
    cities = ["Lyon", "Nice", "Lille", "Brest"]

    def looper(messages: list[dict[str, Any]]) -> Turn:
        return Turn(tool_calls=[{"name": "get_weather", "arguments": {"city": cities[model_turns(messages)]}}])

    async with ScriptedServer(looper) as server:
        transcript = await converse(server, offered("get_weather"), max_turns=3)
    assert transcript.outcome == "capped"
    assert len(server.requests) == 3
    assert transcript.counts() == {"turns": 3, "prose_turns": 0, "tool_calls_made": 3, "invented_tools": 0,
                                   "bad_tool_args": 0, "outcome": "capped"}
    # every call was answered, the last one too; an unknown city gets the default rule's error
    assert roles(transcript)[-1] == "tool"
    assert [e.status for e in transcript.tool_events] == ["error"] * 3
    assert transcript.tool_events[-1].content == '{"error": "unknown city"}'
    assert latest_tool_results(server.requests[2]["messages"]) == [{"error": "unknown city"}]


async def test_a_model_repeating_one_call_is_stuck() -> None:
    def repeater(messages: list[dict[str, Any]]) -> Turn:
        return Turn(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])

    async with ScriptedServer(repeater) as server:
        transcript = await converse(server, offered("get_weather"), max_turns=10, max_repeats=2)
    assert transcript.outcome == "stuck"
    assert transcript.turns == 4 and len(server.requests) == 4   # the first call, then 3 repeats: one too many
    assert transcript.tool_calls_made == 4 and transcript.prose_turns == 0


async def test_a_model_that_invents_a_tool_is_told_and_counted() -> None:
    def inventor(messages: list[dict[str, Any]]) -> Turn:
        results = latest_tool_results(messages)
        if not results:
            return Turn(tool_calls=[{"name": "get_forecast", "arguments": {"city": "Paris"}}])
        if "error" in results[0]:
            assert "get_weather" in results[0]["error"]   # the error names the real tools
            return Turn(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
        return Turn(content=f"{results[0]['temp_c']} degrees")

    async with ScriptedServer(inventor) as server:
        transcript = await converse(server, offered("get_weather"))
    assert transcript.outcome == "completed" and transcript.final_answer == "18 degrees"
    assert transcript.counts() == {"turns": 3, "prose_turns": 1, "tool_calls_made": 2, "invented_tools": 1,
                                   "bad_tool_args": 0, "outcome": "completed"}
    assert [(e.name, e.status, e.rule) for e in transcript.tool_events] == [
        ("get_forecast", "invented", None), ("get_weather", "ok", 0)]


async def test_malformed_arguments_are_answered_with_an_error_and_counted() -> None:
    attempts = ['{"city": "Par', {"town": "Paris"}, {"city": "Paris"}]

    def fumbler(messages: list[dict[str, Any]]) -> Turn:
        results = latest_tool_results(messages)
        if results and "temp_c" in results[0]:
            return Turn(content="18 degrees")
        return Turn(tool_calls=[{"name": "get_weather", "arguments": attempts[model_turns(messages)]}])

    async with ScriptedServer(fumbler) as server:
        transcript = await converse(server, offered("get_weather"))
    assert transcript.outcome == "completed"
    assert transcript.counts() == {"turns": 4, "prose_turns": 1, "tool_calls_made": 3, "invented_tools": 0,
                                   "bad_tool_args": 2, "outcome": "completed"}
    first, second, third = transcript.tool_events
    assert (first.status, first.arguments, first.raw_arguments) == ("bad_args", None, '{"city": "Par')
    assert "not valid JSON" in json.loads(first.content)["error"]
    assert second.status == "bad_args" and "'city' is a required property" in json.loads(second.content)["error"]
    assert third.status == "ok"
    # the malformed call is sent back to the model exactly as it wrote it
    assert server.requests[1]["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Par'


async def test_parallel_calls_are_answered_in_call_order_and_their_delays_overlap() -> None:
    def planner(messages: list[dict[str, Any]]) -> Turn:
        results = latest_tool_results(messages)
        if not results:
            return Turn(tool_calls=[{"name": "get_weather", "arguments": {"city": "Rome"}},
                                    {"name": "get_time", "arguments": {"city": "Rome"}}])
        weather, clock = results
        return Turn(content=f"{weather['temp_c']}°C in {clock['city']} at {clock['time']}")

    async with ScriptedServer(planner) as server:
        transcript = await converse(server, offered("get_weather", "get_time"))
    assert transcript.outcome == "completed" and transcript.final_answer == "24°C in Rome at 14:05"
    assert transcript.counts()["tool_calls_made"] == 2 and transcript.turns == 2
    weather, clock = transcript.tool_events
    assert (weather.name, weather.index, clock.name, clock.index) == ("get_weather", 0, "get_time", 1)
    assert weather.turn == clock.turn == 1
    # both handlers were running at once: each started before the other ended, and the span of the
    # two is shorter than their latencies added up (run one after the other, it could not be)
    assert weather.started_s < clock.ended_s and clock.started_s < weather.ended_s
    span = max(weather.ended_s, clock.ended_s) - min(weather.started_s, clock.started_s)
    assert span < weather.latency_s + clock.latency_s
    # the tool messages follow the call order, each answering its own call id
    sent = server.requests[1]["messages"]
    ids = [call["id"] for call in sent[1]["tool_calls"]]
    assert [m["tool_call_id"] for m in sent[2:]] == ids
    assert json.loads(sent[3]["content"]) == {"city": "Rome", "time": "14:05"}


def booking_agent(messages: list[dict[str, Any]]) -> Turn:
    """Finds the free slots, books the first, and confirms."""
    results = latest_tool_results(messages)
    if not results:
        return Turn(tool_calls=[{"name": "find_slots", "arguments": {"restaurant": "Chez Anna"}}])
    if "slots" in results[0]:
        return Turn(tool_calls=[{"name": "book", "arguments": {"restaurant": "Chez Anna",
                                                               "time": results[0]["slots"][0]}}])
    return Turn(content=f"Booked: {results[0]['confirmation']}")


async def test_a_second_call_failing_with_500_is_retried_and_the_task_completes() -> None:
    async with ScriptedServer(booking_agent, faults={2: 500}) as server:
        transcript = await converse(server, offered("find_slots", "book"), state={"booked": False})
    assert transcript.outcome == "completed" and transcript.final_answer == "Booked: BK-1900"
    assert len(server.requests) == 4   # 3 model calls, the second sent twice
    assert server.requests[1] == server.requests[2]   # the retry sent the same conversation
    assert [e.retries for e in transcript.ledger] == [0, 1, 0] and transcript.retries == 1
    assert transcript.state == {"booked": True, "booked_time": "19:00"}
    assert transcript.counts() == {"turns": 3, "prose_turns": 1, "tool_calls_made": 2, "invented_tools": 0,
                                   "bad_tool_args": 0, "outcome": "completed"}


async def test_a_gateway_answering_as_another_model_is_a_fallback_in_the_ledger() -> None:
    def gateway(messages: list[dict[str, Any]]) -> Turn:
        turn = weather_agent(messages)
        if model_turns(messages) == 1:
            turn.model = "cheaper-model"
        return turn

    async with ScriptedServer(gateway) as server:
        transcript = await converse(server, offered("get_weather"))
    assert transcript.outcome == "completed"
    assert [(e.served_model, e.fallback) for e in transcript.ledger] == [("agent-1", False), ("cheaper-model", True)]
    assert transcript.fallbacks == 1
    assert [r["fallback"] for r in transcript.records() if r["role"] == "assistant"] == [False, True]


async def test_a_call_that_fails_for_good_ends_the_conversation_as_error() -> None:
    async with ScriptedServer(booking_agent, faults={2: 400}) as server:
        transcript = await converse(server, offered("find_slots", "book"))
    assert transcript.outcome == "error"
    assert len(server.requests) == 2   # a 400 is not retried
    assert [e.kind for e in transcript.ledger] == ["tool_calls", "error"]
    assert transcript.ledger[-1].error_kind == "http_400" and "scripted 400" in (transcript.error or "")
    assert roles(transcript) == ["user", "assistant", "tool"]
    assert transcript.prompt_tokens is None and transcript.completion_tokens is None   # usage unknown: no sum
    assert transcript.cost(1.0, 1.0) is None
    assert transcript.state == {}


async def test_one_call_without_usage_makes_the_token_totals_unknown() -> None:
    def quiet(messages: list[dict[str, Any]]) -> Turn:
        turn = weather_agent(messages)
        if model_turns(messages) == 1:
            turn.usage = None
        return turn

    async with ScriptedServer(quiet) as server:
        transcript = await converse(server, offered("get_weather"))
    assert transcript.outcome == "completed"
    assert [e.prompt_tokens for e in transcript.ledger] == [20, None]
    assert transcript.prompt_tokens is None and transcript.completion_tokens is None


async def test_a_completions_model_is_refused_for_agent_tests() -> None:
    model = ModelConfig(name="m", model="x", base_url="http://127.0.0.1:9/v1", api="completions")
    test = Test(suite="s", id="t", file="s.yaml", line=1, messages=(), prompt="", eval=None)
    async with Sessions(64) as sessions:
        with pytest.raises(ConfigError, match="api: chat"):
            EndpointCaller(ModelClient(sessions, {}), model, test, RequestSettings())


async def test_a_429_wait_is_in_the_ledger_of_the_call_that_waited() -> None:
    async with ScriptedServer(weather_agent, faults={2: 429}) as server:
        transcript = await converse(server, offered("get_weather"))
    assert transcript.outcome == "completed"
    first, second = transcript.ledger
    assert (first.retries, first.rate_limit_wait_s) == (0, 0.0)
    assert second.retries == 1 and second.rate_limit_wait_s > 0
    assert transcript.elapsed_s >= second.started_s + (second.latency_s or 0) > 0


async def test_an_id_the_server_reuses_every_turn_is_made_unique() -> None:
    def same_id(messages: list[dict[str, Any]]) -> Turn:   # as some local servers do: `call_0` each turn
        results = latest_tool_results(messages)
        if len(results) == 1 and "temp_c" in results[0] and model_turns(messages) == 2:
            return Turn(content="18 degrees")
        city = "Paris" if model_turns(messages) else "Lyon"
        return Turn(tool_calls=[{"id": "call_0", "name": "get_weather", "arguments": {"city": city}}])

    async with ScriptedServer(same_id) as server:
        transcript = await converse(server, offered("get_weather"))
    assert transcript.outcome == "completed"
    ids = [event.call_id for event in transcript.tool_events]
    assert ids == ["call_0", "call_2_0"]
    assert [m["tool_call_id"] for m in server.requests[2]["messages"] if m["role"] == "tool"] == ids
    statuses = [(r["tool_call_id"], r["tool_status"]) for r in transcript.records() if r["role"] == "tool"]
    assert statuses == [("call_0", "error"), ("call_2_0", "ok")]


async def test_the_concurrency_slot_is_held_per_model_call_not_across_tool_delays() -> None:
    """Two conversations share one slot; while the first waits on its slow tools, the second's call goes."""
    def planner(messages: list[dict[str, Any]]) -> Turn:
        if not latest_tool_results(messages):
            return Turn(tool_calls=[{"name": "get_time", "arguments": {"city": messages[0]["content"]}}])
        return Turn(content="done")

    slot = Window(1)   # one call in flight at most
    async with ScriptedServer(planner) as server:
        model = ModelConfig(name="m", model="agent-1", base_url=server.base_url, timeout_s=10.0)
        async with Sessions(64) as sessions:
            client = ModelClient(sessions, {})

            async def one(city: str) -> Transcript:
                test = Test(suite="s", id=city, file="s.yaml", line=1, messages=({"role": "user", "content": city},),
                            prompt=city, eval=None)
                caller = EndpointCaller(client, model, test, RequestSettings(), tools=[TOOLS["get_time"]],
                                      dispatch=slot)
                return await run_conversation(caller, test.messages, offered("get_time"))

            first, second = await asyncio.gather(one("Oslo"), one("Bergen"))
    assert first.outcome == second.outcome == "completed"
    order = [(body["messages"][0]["content"], len(body["messages"])) for body in server.requests]
    # Oslo's first call, then Bergen's first call while Oslo's 0.2 s tool runs, then both second calls
    assert order[:2] == [("Oslo", 1), ("Bergen", 1)]
    assert sorted(order[2:]) == [("Bergen", 3), ("Oslo", 3)]
    assert slot.held == 0 and slot.size == 1


async def test_the_final_answer_as_an_answer_evaluators_take() -> None:
    async with ScriptedServer(weather_agent) as server:
        transcript = await converse(server, offered("get_weather"))
    answer = transcript.answer()
    assert answer.text == transcript.final_answer and "18" in answer.text
    assert answer.tool_calls == () and answer.finish_reason == "stop"
