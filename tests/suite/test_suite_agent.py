"""Agent tests in YAML: `returns` and `agent:` load into Test fields, hashed, problems at FILE:LINE:COL."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from engine.evaluators import KINDS
from engine.suite import load_suites

WEATHER_AGENT = """\
suite: weather-agent
tools:
  get_weather:
    description: Current weather for a city.
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    returns:
      - when: {city: [Paris]}
        result: {temp_c: 18, sky: cloudy}
      - error: unknown city
tests:
  - id: weather-then-answer
    prompt: What should I wear in Paris today?
    tools: [get_weather]
    agent: {max_turns: 4}
    eval:
      all:
        - tool_sequence: [get_weather]
        - final_answer: {contains: "18"}
"""

BOOKING = """\
suite: booking
defaults:
  agent: {max_turns: 6, state: {booked: false}}
  tools: [find_slot, book]
tools:
  find_slot:
    parameters: {type: object, properties: {day: {type: string}}, required: [day]}
    returns:
      - when: {day: [Monday]}
        result: "{{ day }} 10:00"
      - error: "no slot on {{ day }}"
  book:
    parameters: {type: object, properties: {slot: {type: string}}, required: [slot]}
    returns:
      - result: {ok: true}
        set: {booked: true}
  plain:
    parameters: {type: object}
tests:
  - id: book-monday
    prompt: Book me on Monday.
    agent: {max_turns: 3}
    golden:
      - tool_calls: [{name: find_slot, arguments: {day: Monday}}]
      - tool_calls: [{name: book, arguments: {slot: "Monday 10:00"}}]
      - Booked for Monday 10:00.
    eval: {contains: Booked}
  - id: single-turn
    prompt: Say hi.
    tools: []
    eval: {contains: hi}
  - id: answer-only-golden
    prompt: Say hi.
    golden: hi
    eval: {contains: hi}
"""


def _load(tmp_path: Path, text: str, name: str = "s.yaml") -> tuple[list, list]:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return load_suites([path])


@pytest.mark.skipif(not {"tool_sequence", "final_answer"} <= set(KINDS),
                    reason="the trajectory evaluators come from the agent-eval branch")
def test_the_weather_agent_loads_exactly_as_written(tmp_path: Path) -> None:
    suites, diagnostics = _load(tmp_path, WEATHER_AGENT)
    assert [d for d in diagnostics if d.severity == "error"] == []
    test = suites[0].tests[0]
    assert test.agent is not None and test.agent.max_turns == 4
    assert list(test.agent_tools) == ["get_weather"]


def test_the_weather_tools_and_agent_block_load_with_an_answer_check(tmp_path: Path) -> None:
    text = WEATHER_AGENT.replace("        - tool_sequence: [get_weather]\n        - final_answer: {contains: \"18\"}\n",
                                 "        - contains: \"18\"\n")
    suites, diagnostics = _load(tmp_path, text)
    assert diagnostics == []
    test = suites[0].tests[0]
    assert (test.agent.max_turns, test.agent.max_repeats) == (4, 2)
    weather = test.agent_tools["get_weather"]
    assert weather.answer({"city": "paris"}, {}).value == {"temp_c": 18, "sky": "cloudy"}
    assert weather.answer({"city": "Rome"}, {}).status == "error"
    assert test.tools[0]["function"]["name"] == "get_weather"


def test_defaults_merge_key_by_key_and_the_golden_conversation_compiles(tmp_path: Path) -> None:
    suites, diagnostics = _load(tmp_path, BOOKING)
    assert diagnostics == []
    book, single, answer_only = suites[0].tests
    assert (book.agent.max_turns, book.agent.max_repeats) == (3, 2)
    assert book.initial_state == {"booked": False}
    assert sorted(book.agent_tools) == ["book", "find_slot"]   # only the offered ones
    assert [len(turn.tool_calls) for turn in book.golden_turns] == [1, 1, 0]
    assert book.golden_turns[1].tool_calls[0].arguments == {"slot": "Monday 10:00"}
    assert book.golden_turns[-1].content == "Booked for Monday 10:00."
    # a test without its own `agent:` takes the defaults' block: it is an agent test
    assert single.agent is not None and single.agent.max_turns == 6
    # a golden that is the answer alone is a conversation of one turn
    assert [t.content for t in answer_only.golden_turns] == ["hi"]


def test_a_suite_without_agent_keeps_single_turn_tests_and_their_hashes(tmp_path: Path) -> None:
    base = "suite: s\ntools:\n  t:\n    parameters: {type: object}\ntests:\n  - id: a\n    prompt: hi\n" \
           "    tools: [t]\n    eval: {contains: hi}\n"
    with_returns = base.replace("    parameters: {type: object}\n",
                                "    parameters: {type: object}\n    returns: [{result: 1}]\n")
    (plain,), _ = _load(tmp_path, base, "a.yaml")
    (declared,), _ = _load(tmp_path, with_returns.replace("suite: s", "suite: s2"), "b.yaml")
    assert plain.tests[0].agent is None and plain.tests[0].agent_tools == {} and plain.tests[0].golden_turns == ()
    # returns only matter to agent tests, so a single-turn test's hash does not move
    assert plain.tests[0].hash == declared.tests[0].hash


def test_the_hash_covers_returns_and_the_agent_block(tmp_path: Path) -> None:
    def hash_of(text: str, name: str) -> str:
        suites, diagnostics = _load(tmp_path, text, name)
        assert [d for d in diagnostics if d.severity == "error"] == []
        return suites[0].tests[0].hash

    first = hash_of(BOOKING, "1.yaml")
    assert hash_of(BOOKING.replace("result: {ok: true}", "result: {ok: false}"), "2.yaml") != first
    assert hash_of(BOOKING.replace("agent: {max_turns: 3}", "agent: {max_turns: 4}"), "3.yaml") != first
    assert hash_of(BOOKING.replace("state: {booked: false}", "state: {booked: 0}"), "4.yaml") != first
    assert hash_of(BOOKING.replace("  - id: book-monday", "  - id: renamed"), "5.yaml") == first


def test_problems_point_at_file_line_col(tmp_path: Path) -> None:
    text = BOOKING.replace("      - Booked for Monday 10:00.", "      - {content: done, calls: []}")
    _, diagnostics = _load(tmp_path, text)
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines, 1) if "calls: []}" in line)
    col = lines[row - 1].index("calls") + 1
    assert [(d.line, d.col, d.message) for d in diagnostics] == [
        (row, col, "unknown key 'calls' in a golden turn; the keys are content and tool_calls")]


def test_an_agent_tool_without_returns_is_a_warning(tmp_path: Path) -> None:
    text = BOOKING.replace("  tools: [find_slot, book]", "  tools: [find_slot, book, plain]")
    suites, diagnostics = _load(tmp_path, text)
    assert suites and all(d.severity == "warning" for d in diagnostics)
    assert any("tool 'plain' has no `returns:`" in d.message and d.line == 4 for d in diagnostics)
