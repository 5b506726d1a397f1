"""A tool's `returns` rules: compiling (problems as data with paths), matching, templates, state."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine.base.diagnostic import Problem
from engine.base.yaml import load_yaml_text
from engine.model.tools import Tool
from engine.suite.tools import compile_tool, compile_tools

WEATHER = load_yaml_text("""
description: Current weather for a city.
parameters: {type: object, properties: {city: {type: string}, unit: {type: string}}, required: [city]}
returns:
  - when: {city: [Paris, Paname], unit: [c, ""]}
    result: {temp_c: 18, sky: cloudy}
  - when: {city: Rome}
    result: "{{ city }} is sunny ({{ state.visits | default(0) }} visits)"
    set: {visits: "{{ (state.visits | default(0)) + 1 }}", last_city: "{{ city }}"}
  - error: "unknown city {{ args.city }}"
""", "inline.yaml").data


def build(spec: Any, name: str = "t") -> Tool:
    tool, problems = compile_tool(name, spec, ("tools", name))
    assert not problems, problems
    assert tool is not None
    return tool


def problems_of(spec: Any) -> list[Problem]:
    tool, problems = compile_tool("t", spec, ("tools", "t"))
    assert tool is None and problems
    return problems


def test_rules_are_tried_in_order_and_the_default_answers_the_rest() -> None:
    tool = build(WEATHER, "get_weather")
    paris = tool.answer({"city": " paris ", "unit": "c"}, {})
    assert (paris.status, paris.rule, paris.value) == ("ok", 0, {"temp_c": 18, "sky": "cloudy"})
    assert paris.content == '{"temp_c": 18, "sky": "cloudy"}'
    assert tool.answer({"city": "Paname"}, {}).rule == 0            # `""`: unit may be left out
    assert tool.answer({"city": "Paris", "unit": "f"}, {}).rule == 2   # unit given but not accepted
    lyon = tool.answer({"city": "Lyon"}, {})
    assert (lyon.status, lyon.rule, lyon.value) == ("error", 2, "unknown city Lyon")
    assert json.loads(lyon.content) == {"error": "unknown city Lyon"}


def test_a_scalar_in_when_is_one_accepted_value_and_templates_see_arguments_and_state() -> None:
    tool = build(WEATHER)
    first = tool.answer({"city": "Rome"}, {})
    assert (first.rule, first.content) == (1, "Rome is sunny (0 visits)")
    assert first.state_changes == {"visits": 1, "last_city": "Rome"}   # a lone expression keeps its type
    second = tool.answer({"city": "Rome"}, {"visits": 1})
    assert second.content == "Rome is sunny (1 visits)" and second.state_changes["visits"] == 2


def test_no_rule_and_no_default_is_a_clear_tool_error() -> None:
    tool = build({"parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
                  "returns": [{"when": {"id": [1]}, "result": "one"}]}, "lookup")
    answer = tool.answer({"id": 2}, {})
    assert (answer.status, answer.rule) == ("error", None)
    assert json.loads(answer.content) == {"error": 'lookup has no answer for the arguments {"id": 2}'}
    assert build({"parameters": {"type": "object"}}, "bare").answer({}, {}).status == "error"   # no returns


def test_a_template_that_cannot_render_is_a_tool_error_not_a_crash() -> None:
    tool = build({"parameters": {"type": "object", "properties": {"a": {"type": "string"}}},
                  "returns": [{"result": "{{ a }}!"}]})
    answer = tool.answer({}, {})   # `a` is optional and was not sent
    assert answer.status == "error" and "could not be rendered" in answer.value and "'a' is undefined" in answer.value


def test_argument_problems_follow_the_declared_schema() -> None:
    tool = build(WEATHER)
    assert tool.argument_problem({"city": "Paris"}) is None
    assert tool.argument_problem({"unit": "c"}) == "'city' is a required property"
    assert tool.argument_problem({"city": 3}) == "city: 3 is not of type 'string'"
    assert tool.argument_problem(["Paris"]) is not None and "JSON object" in str(tool.argument_problem(["Paris"]))


def test_delay_and_definition() -> None:
    tool = build({"description": "slow", "parameters": {"type": "object"},
                  "returns": [{"result": 1, "delay_s": 0.5}]}, "slow")
    assert tool.answer({}, {}).delay_s == 0.5
    assert tool.definition == {"type": "function", "function": {"name": "slow", "description": "slow",
                                                                "parameters": {"type": "object"}}}


@pytest.mark.parametrize(("spec", "path", "words"), [
    ({"parameters": {"type": "object"}, "return": []}, ("tools", "t", "return"), "unknown key 'return'"),
    ({"parameters": {"type": "object"}, "returns": {"result": 1}}, ("tools", "t", "returns"), "must be a list"),
    ({"parameters": {"type": "object"}, "returns": ["x"]}, ("tools", "t", "returns", 0), "must be a mapping"),
    ({"parameters": {"type": "object"}, "returns": [{"result": 1, "error": "e"}]}, ("tools", "t", "returns", 0),
     "exactly one of `result`"),
    ({"parameters": {"type": "object"}, "returns": [{"when": {"x": [1]}}]}, ("tools", "t", "returns", 0),
     "exactly one of `result`"),
    ({"parameters": {"type": "object"}, "returns": [{"result": 1, "delay": 2}]},
     ("tools", "t", "returns", 0, "delay"), "unknown key 'delay'"),
    ({"parameters": {"type": "object"}, "returns": [{"result": 1, "delay_s": -1}]},
     ("tools", "t", "returns", 0, "delay_s"), "0 or more"),
    ({"parameters": {"type": "object"}, "returns": [{"result": 1, "delay_s": 5000}]},
     ("tools", "t", "returns", 0, "delay_s"), "above the 300 s limit"),
    ({"parameters": {"type": "object"}, "returns": [{"result": 1, "set": ["booked"]}]},
     ("tools", "t", "returns", 0, "set"), "`set` must map"),
    ({"parameters": {"type": "object"}, "returns": [{"error": ""}]}, ("tools", "t", "returns", 0, "error"),
     "non-empty string"),
    ({"parameters": {"type": "object"}, "returns": [{"when": {}, "result": 1}]},
     ("tools", "t", "returns", 0, "when"), "leave `when` out"),
    ({"parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
      "returns": [{"when": {"town": ["Paris"]}, "result": 1}]}, ("tools", "t", "returns", 0, "when", "town"),
     "has no parameter 'town' (its parameters: city)"),
    ({"parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
      "returns": [{"result": "{{ town }}"}]}, ("tools", "t", "returns", 0, "result"), "uses town"),
    ({"parameters": {"type": "object"}, "returns": [{"result": {"a": ["{{ x"]}}]},
     ("tools", "t", "returns", 0, "result", "a", 0), "template syntax error"),
    ({"parameters": {"type": "object"}, "returns": [{"result": 1}, {"result": 2}]},
     ("tools", "t", "returns", 1), "can never answer: rule 0 has no `when`"),
    ({"parameters": {"type": "object", "properties": "x"}}, ("tools", "t", "parameters", "properties"),
     "not a valid JSON Schema"),
    ("get it", ("tools", "t"), "must be a mapping"),
])
def test_compile_problems_are_data_with_the_path_of_the_bad_value(spec: Any, path: tuple[Any, ...],
                                                                   words: str) -> None:
    found = problems_of(spec)
    assert any(p.path == path and words in p.message for p in found), found


def test_every_problem_is_reported_not_only_the_first() -> None:
    found = problems_of({"parameters": {"type": "object"}, "returns": [
        {"result": 1, "delay_s": "soon"}, {"error": 3}, {"result": 2, "colour": "red"}]})
    assert {p.path for p in found} == {("tools", "t", "returns", 0, "delay_s"),
                                       ("tools", "t", "returns", 1, "error"),
                                       ("tools", "t", "returns", 2, "colour")}
    assert [p.key for p in found if p.path[-1] == "colour"] == [True]   # an unknown key points at the key


def test_compile_tools_keeps_the_good_tools_and_names_the_bad() -> None:
    tools, found = compile_tools({"good": {"parameters": {"type": "object"}, "returns": [{"result": 1}]},
                                  "bad": {"parameters": {"type": "object"}, "returns": 1}})
    assert list(tools) == ["good"] and [p.path for p in found] == [("tools", "bad", "returns")]
    assert compile_tools(["good"])[1] == [Problem(("tools",), "`tools` must map each tool name to its definition")]


# ---------------------------------------------------------------- properties

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
FREE_TOOL = build({"parameters": {"type": "object"},
                   "returns": [{"when": {"k": ["__never__"]}, "result": "no"}, {"result": "{{ k }}"}]})


@settings(max_examples=200, deadline=None)
@given(JSON_SCALARS)
def test_a_when_accepts_the_value_it_lists(value: Any) -> None:
    tool = build({"parameters": {"type": "object"}, "returns": [{"when": {"k": [value]}, "result": "hit"}]})
    if value == "":   # `""` in a `when` list means "may be left out", never a value
        assert tool.answer({}, {}).content == "hit"
    else:
        assert tool.answer({"k": value}, {}).content == "hit"
        assert tool.answer({}, {}).status == "error"


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="abcXYZ", min_size=1, max_size=8), st.text(alphabet=" ", max_size=2))
def test_strings_match_trimmed_and_case_insensitively(word: str, pad: str) -> None:
    tool = build({"parameters": {"type": "object"}, "returns": [{"when": {"k": [word]}, "result": "hit"}]})
    assert tool.answer({"k": pad + word.swapcase() + pad}, {}).content == "hit"


@settings(max_examples=100, deadline=None)
@given(st.booleans(), st.integers(0, 1))
def test_a_bool_never_matches_a_number(flag: bool, number: int) -> None:
    tool = build({"parameters": {"type": "object"}, "returns": [{"when": {"k": [number]}, "result": "hit"}]})
    assert tool.answer({"k": flag}, {}).status == "error"
    assert tool.answer({"k": number}, {}).content == "hit"


@settings(max_examples=200, deadline=None)
@given(st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                    max_leaves=8))
def test_a_lone_expression_returns_the_argument_with_its_type(value: Any) -> None:
    assume(value != "__never__")
    answer = FREE_TOOL.answer({"k": value}, {})
    assert answer.status == "ok" and answer.value == value
    assert answer.content == (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def test_problem_paths_point_at_the_line_and_column_with_the_suite_loaders_positions() -> None:

    source = """\
tools:
  get_weather:
    parameters: {type: object, properties: {city: {type: string}}}
    returns:
      - when: {town: [Paris]}
        result: {temp_c: 18}
      - result: fine
        delay_s: -2
"""
    loaded = load_yaml_text(source, "s.yaml")
    _, found = compile_tools(loaded.data["tools"])
    where = sorted((loaded.positions.of(p.path, key=p.key), p.message.split(" (")[0]) for p in found)
    assert where == [((5, 16), "tool 'get_weather' has no parameter 'town'"),
                     ((8, 18), "`delay_s` must be a number of seconds, 0 or more")]
