"""A JSON Schema's regexes run on RE2: a pattern that backtracks for hours in Python's `re` answers at once.

The answers are the model's: `^(a+)+$` meets 80 KB of `a` ending in `b` as a string value and as a property
name (`patternProperties`, which `additionalProperties` consults). Each runs in a subprocess whose timeout is
only a hang guard.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.base.compiled_schema import schema_error, schema_validator
from engine.evaluators import compile_spec, score
from engine.model.answer import Answer
from engine.model.test import Test

ROOT = Path(__file__).resolve().parents[2]


def _verdict_in_a_subprocess(schema: dict, answer: str) -> dict:
    program = (
        "import json, sys\n"
        "from engine.evaluators import score\n"
        "from engine.model.answer import Answer\n"
        "from engine.model.test import Test\n"
        "schema, answer = json.loads(sys.stdin.read())\n"
        "test = Test(suite='s', id='t', file='f', line=1, messages=(), prompt='', eval={'json_schema': schema})\n"
        "v = score(test, Answer(text=answer))\n"
        "print(json.dumps({'score': v.score, 'error': v.error, 'reason': v.reason}))\n")
    done = subprocess.run([sys.executable, "-c", program], input=json.dumps([schema, answer]), cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_nested_repeat_pattern_meets_a_hostile_string_value() -> None:
    hostile = "a" * 80_000 + "b"
    found = _verdict_in_a_subprocess({"type": "object", "properties": {"id": {"type": "string",
                                                                             "pattern": "^(a+)+$"}}},
                                     json.dumps({"id": hostile}))
    assert found["score"] == 0.0 and not found["error"]
    assert "does not match '^(a+)+$'" in found["reason"] and len(found["reason"]) < 300


def test_a_nested_repeat_pattern_meets_a_hostile_property_name() -> None:
    schema = {"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}},
              "additionalProperties": False}
    found = _verdict_in_a_subprocess(schema, json.dumps({"a" * 80_000 + "b": 1, "aaa": 2}))
    assert found["score"] == 0.0 and not found["error"]
    assert "do" in found["reason"] and "not match any of the regexes: '^(a+)+$'" in found["reason"]


def test_pattern_properties_and_additional_properties_judge_as_jsonschema_does() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}},
              "patternProperties": {"^x_": {"type": "integer"}, "^y_": {"type": "string"}},
              "additionalProperties": {"type": "boolean"}}
    validator = schema_validator(schema)
    assert not list(validator.iter_errors({"name": "n", "x_1": 1, "y_2": "s", "other": True}))
    errors = sorted(e.message for e in validator.iter_errors({"x_1": "1", "y_2": 2, "other": 3}))
    assert errors == ["'1' is not of type 'integer'", "2 is not of type 'string'", "3 is not of type 'boolean'"]
    closed = schema_validator({"type": "object", "patternProperties": {"^x_": {}}, "additionalProperties": False})
    assert [e.message for e in closed.iter_errors({"x_1": 1, "zz": 2})] == [
        "'zz' does not match any of the regexes: '^x_'"]
    plain = schema_validator({"type": "object", "properties": {"a": {}}, "additionalProperties": False})
    assert [e.message for e in plain.iter_errors({"a": 1, "b": 2})] == [
        "Additional properties are not allowed ('b' was unexpected)"]


def test_a_value_with_half_a_surrogate_pair_is_still_matched() -> None:
    test = Test(suite="s", id="t", file="f", line=1, messages=(), prompt="",
                eval={"json_schema": {"type": "string", "pattern": "^x"}})
    found = score(test, Answer(text='"x\\ud800"'))   # json reads the escape as a lone surrogate
    assert found.score == 1.0 and not found.error, found.reason


def test_a_pattern_re2_cannot_run_is_a_schema_error_at_its_place() -> None:
    error = schema_error({"type": "object", "properties": {"id": {"pattern": "(?<=a)b"}}})
    assert error is not None and list(error.absolute_path) == ["properties", "id", "pattern"]
    assert "is not supported by RE2, the engine's linear-time regex engine" in error.message
    assert schema_error({"enum": [{"pattern": "(?<=a)b"}]}) is None   # data, not a schema
    assert compile_spec({"json_schema": {"pattern": "(?<=a)b"}}).problem is not None
