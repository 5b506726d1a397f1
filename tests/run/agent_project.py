"""An agent suite, a scripted multi-turn model behind a loopback server in a thread, for `engine run` tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.agent.scripted_server import ScriptedServer, Turn, latest_tool_results, model_turns

AGENT_SUITE = """\
suite: agents
tools:
  get_weather:
    description: Current weather for a city.
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    returns:
      - when: {city: [Paris]}
        result: {temp_c: 18, sky: cloudy}
      - error: "unknown city {{ city }}"
  book:
    description: Book a table.
    parameters: {type: object, properties: {day: {type: string}}, required: [day]}
    returns:
      - result: "booked for {{ day }}"
        set: {booked: true}
        delay_s: 0.05
defaults:
  tools: [get_weather, book]
  agent: {max_turns: 4, max_repeats: 5, state: {booked: false}}
  eval: {contains: "18"}
tests:
  - id: complete
    prompt: "TASK complete: what should I wear in Paris?"
  - id: capped
    prompt: "TASK loop: weather everywhere"
    agent: {max_turns: 3}
  - id: invent
    prompt: "TASK invent: weather in Paris"
  - id: malformed
    prompt: "TASK malformed: weather in Paris"
  - id: parallel
    prompt: "TASK parallel: weather in Paris and book Monday"
  - id: retry
    prompt: "TASK retry: what should I wear in Paris?"
  - id: gateway
    prompt: "TASK gateway: what should I wear in Paris?"
"""


def task_of(messages: list[dict[str, Any]]) -> str:
    """The word after TASK in the user prompt."""
    user = next(m["content"] for m in messages if m.get("role") == "user")
    return user.split()[1].rstrip(":")


def agent_script(messages: list[dict[str, Any]]) -> Turn:
    """The scripted model: reads the tool results it got and acts per task."""
    task, turns, results = task_of(messages), model_turns(messages), latest_tool_results(messages)
    weather = {"name": "get_weather", "arguments": {"city": "Paris"}}
    if task == "loop":   # never answers: a new city each turn, each answered with the default error
        return Turn(tool_calls=[{"name": "get_weather", "arguments": {"city": f"Town{turns}"}}])
    if turns == 0:
        if task == "invent":
            return Turn(tool_calls=[{"name": "get_wether", "arguments": {"city": "Paris"}}])
        if task == "malformed":
            return Turn(tool_calls=[{"name": "get_weather", "arguments": '{"city": "Par'}])
        if task == "parallel":
            return Turn(tool_calls=[weather, {"name": "book", "arguments": {"day": "Monday"}}])
        return Turn(tool_calls=[weather], model="someone-else" if task == "gateway" else None)
    first = results[0] if results else {}
    temp = first.get("temp_c") if isinstance(first, dict) else None
    text = f"It is {temp} degrees: take a jacket." if temp is not None else "I could not get the weather."
    return Turn(content=text, model="someone-else" if task == "gateway" else None)


def retry_fault() -> Any:
    """A 500 on the second model call of the `retry` conversation, once."""
    failed: set[str] = set()

    def fault(body: dict[str, Any]) -> int | None:
        messages = body["messages"]
        if task_of(messages) == "retry" and model_turns(messages) == 1 and "retry" not in failed:
            failed.add("retry")
            return 500
        return None
    return fault


@contextmanager
def scripted_server_thread(script: Any, fault: Any = None, hold: Any = None) -> Iterator[ScriptedServer]:
    """A ScriptedServer on its own event loop in a daemon thread (a subprocess `engine run` calls it)."""
    loop = asyncio.new_event_loop()
    server = ScriptedServer(script, fault=fault, hold=hold)
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.__aenter__())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, name="scripted-server", daemon=True)
    thread.start()
    assert ready.wait(10), "the scripted server did not start"
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
