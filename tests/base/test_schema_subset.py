"""engine.base.schema_subset answers "surely valid" only where jsonschema finds nothing wrong.

Its answers are one-sided (False/None means "ask jsonschema"), so each test checks soundness (every True is
jsonschema's verdict too) and that the fast path is really taken for plain tool schemas.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from jsonschema_specifications import REGISTRY

from engine.base.schema_subset import METASCHEMA_KEYWORDS, VALIDATOR_KEYWORDS, instance_check, metaschema_valid


def _jsonschema_says_schema_valid(schema: Any) -> bool:
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError:
        return False
    return True


def _jsonschema_errors(schema: Any, instance: Any) -> list[str]:
    return [e.message for e in jsonschema.validators.validator_for(schema)(schema).iter_errors(instance)]


def _agrees(schema: Any, instance: Any) -> bool:
    """Soundness on one pair; returns whether the fast path answered "valid" (for coverage counts)."""
    if metaschema_valid(schema):
        assert _jsonschema_says_schema_valid(schema), schema
    check = instance_check(schema)
    if check is not None and check(instance):
        assert _jsonschema_errors(schema, instance) == [], (schema, instance)
        return True
    return False


def test_the_keyword_lists_are_jsonschemas_own() -> None:
    assert set(Draft202012Validator.VALIDATORS) == VALIDATOR_KEYWORDS
    described: set[str] = set()
    for uri in ["https://json-schema.org/draft/2020-12/schema",
                *(f"https://json-schema.org/draft/2020-12/meta/{v}" for v in
                  ("core", "applicator", "unevaluated", "validation", "meta-data", "format-annotation", "content"))]:
        described |= set(REGISTRY.contents(uri).get("properties", {}))
    assert described == METASCHEMA_KEYWORDS


def test_a_plain_tool_schema_is_answered_without_jsonschema() -> None:
    schema = {"type": "object", "description": "d", "properties": {"city": {"type": "string", "enum": ["A", "B"]},
                                                                   "n": {"type": "integer", "minimum": 1}},
              "required": ["city"], "additionalProperties": False}
    assert metaschema_valid(schema)
    check = instance_check(schema)
    assert check is not None
    assert check({"city": "A", "n": 2}) and check({"city": "B", "n": 2.0})
    for wrong in ({}, {"city": "C"}, {"city": "A", "n": 0}, {"city": "A", "n": True}, {"city": "A", "x": 1}):
        assert not check(wrong)
        assert _jsonschema_errors(schema, wrong)


@pytest.mark.parametrize("schema", [
    {"type": "strin"}, {"type": []}, {"type": ["string", "string"]}, {"required": "city"}, {"required": ["a", "a"]},
    {"properties": {"a": {"type": 3}}}, {"minLength": -1}, {"minLength": 1.5}, {"minimum": "1"},
    {"pattern": "("}, {"$ref": 3}, {"items": [{"type": "string"}]}, {"enum": "ab"}, {"description": 3},
    None, [], "object",
])
def test_schemas_jsonschema_rejects_are_never_surely_valid(schema: Any) -> None:
    assert not _jsonschema_says_schema_valid(schema)
    assert not metaschema_valid(schema)


def test_unknown_keywords_are_free_and_known_unchecked_ones_go_to_jsonschema() -> None:
    assert metaschema_valid({"type": "object", "optional": [1, {"x": None}]})   # BFCL's `optional`: no keyword
    assert instance_check({"type": "object", "optional": True}) is not None
    for schema in ({"$schema": "http://json-schema.org/draft-07/schema#"}, {"pattern": "a"}, {"$defs": {}},
                   {"anyOf": [{"type": "string"}]}, {"patternProperties": {"a": {}}}):
        assert not metaschema_valid(schema)
        assert instance_check(schema) is None
    assert metaschema_valid({"const": 1}) and instance_check({"const": 1}) is None


def _bfcl_schema(schema: Any) -> Any:
    """BFCL's Python-flavoured types written as JSON Schema types (as the importer writes them)."""
    if isinstance(schema, dict):
        out = {k: _bfcl_schema(v) for k, v in schema.items()}
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = {"dict": "object", "float": "number", "tuple": "array"}.get(kind, kind)
            if kind == "any":
                del out["type"]
        return out
    if isinstance(schema, list):
        return [_bfcl_schema(v) for v in schema]
    return schema


def test_bfcl_tool_schemas_and_answers_agree_with_jsonschema(shared_data: Path) -> None:
    bfcl = shared_data / "bfcl"
    functions: dict[tuple[str, str], Any] = {}
    for path in sorted(bfcl.glob("BFCL_v4_*.json")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            for fn in row.get("function", []):
                functions[(row["id"], fn["name"])] = fn.get("parameters")
    schemas_valid = 0
    for raw in list(functions.values())[::7]:
        for schema in (raw, _bfcl_schema(raw)):
            if metaschema_valid(schema):
                schemas_valid += 1
                assert _jsonschema_says_schema_valid(schema), schema
    assert schemas_valid > 500   # the converted schemas are answered here
    fast = total = 0
    with gzip.open(bfcl / "checker_conformance.jsonl.gz", "rt", encoding="utf-8") as rows:
        for i, line in enumerate(rows):
            if i % 5:
                continue
            row = json.loads(line)
            for call in row.get("decoded_calls") or ():
                for name, args in call.items():
                    schema = functions.get((row["test_id"], name))
                    if schema is None:
                        continue
                    total += 1
                    fast += _agrees(_bfcl_schema(schema), args)
    assert total > 1000 and fast > total // 3   # answers that surely fit are answered here


_NAMES = st.sampled_from(["a", "b", "city", "n"])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, 1.0, 2.5, -1.0]),
                     st.sampled_from(["", "a", "b", "city", "AB"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(_NAMES, inner, max_size=3)), max_leaves=6)
_TYPES = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array", "strin", "dict"])


def _schemas() -> st.SearchStrategy[Any]:
    def node(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        keyword = st.one_of(
            st.tuples(st.just("type"), st.one_of(_TYPES, st.lists(_TYPES, max_size=3))),
            st.tuples(st.just("properties"), st.dictionaries(_NAMES, inner, max_size=3)),
            st.tuples(st.just("required"), st.lists(_NAMES, max_size=3)),
            st.tuples(st.just("additionalProperties"), st.one_of(st.booleans(), inner)),
            st.tuples(st.just("items"), st.one_of(st.booleans(), inner)),
            st.tuples(st.just("enum"), st.lists(_SCALARS, max_size=3)),
            st.tuples(st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                                       "maxLength", "minItems", "maxItems", "multipleOf", "minProperties"]),
                      st.one_of(st.integers(-1, 3), st.sampled_from([0.5, 2.0, True, "1"]))),
            st.tuples(st.sampled_from(["description", "title", "format", "default", "examples", "optional",
                                       "deprecated", "uniqueItems", "const", "$comment"]), _VALUES),
        )
        return st.one_of(st.booleans(), st.lists(keyword, max_size=4).map(dict))

    return st.recursive(st.just({}), node, max_leaves=8)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_schemas(), instance=_VALUES)
def test_generated_schemas_and_values_never_disagree(schema: Any, instance: Any) -> None:
    _agrees(schema, instance)


def test_loading_a_tool_suite_imports_no_jsonschema(tmp_path: Path) -> None:
    # The fast path in use: a suite with a plain tool schema and a tool-call golden is checked without it.
    suite = tmp_path / "s.yaml"
    suite.write_text("suite: t\ntools:\n  f:\n    parameters: {type: object, properties: {x: {type: string}}, "
                     "required: [x]}\ntests:\n  - id: a\n    prompt: p\n    tools: [f]\n    golden: {tool_calls: "
                     "[{name: f, arguments: {x: y}}]}\n    eval: {tool_call: {name: f, args: {x: [y]}}}\n",
                     encoding="utf-8")
    code = ("import sys; from engine.suite import load_suites; s, d = load_suites([sys.argv[1]], golden_check=True); "
            "assert s and not d, d; print('jsonschema' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(suite)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
