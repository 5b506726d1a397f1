"""The JSON Schemas: in sync with their source, documented, covering the whole evaluator catalogue."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from engine.base.yaml import load_yaml_text
from engine.suite import schema_source
from engine.suite.schema import load_schema, validate

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name,source", [("suite", schema_source.SUITE_SCHEMA),
                                         ("models", schema_source.MODELS_SCHEMA)])
def test_schema_files_match_their_source(name: str, source: dict[str, Any]) -> None:
    on_disk = (ROOT / "schemas" / f"{name}.schema.json").read_text(encoding="utf-8")
    assert on_disk == schema_source.dump(source), "run: python -m engine.suite.schema_source"
    Draft202012Validator.check_schema(json.loads(on_disk))


def _objects(node: Any, path: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            if key in ("examples", "const", "enum"):
                continue
            yield from _objects(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _objects(value, f"{path}/{i}")


@pytest.mark.parametrize("name", ["suite", "models"])
def test_every_property_has_a_description_and_objects_are_closed(name: str) -> None:
    schema = load_schema(name)
    for path, node in _objects(schema):
        for prop, sub in (node.get("properties") or {}).items():
            if not path.endswith("/properties"):
                has_description = "description" in sub or (
                    "$ref" in sub and "description" in _resolve(schema, sub["$ref"]))
                assert has_description, f"{path}/properties/{prop} has no description"
        if node.get("type") == "object" and "properties" in node:
            # Closed, unless declared open on purpose (models' `params` pass through to the server).
            assert node.get("additionalProperties") in (False, True), f"{path} is open"


def _resolve(schema: dict[str, Any], ref: str) -> dict[str, Any]:
    node: Any = schema
    for part in ref.lstrip("#/").split("/"):
        node = node[part]
    return node


def test_every_evaluator_in_the_architecture_catalogue_is_in_the_schema() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("## The evaluator catalogue", 1)[1]
    kinds = set(re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE))
    assert len(kinds) >= 20
    defs = load_schema("suite")["$defs"]
    assert kinds == {k[len("eval_"):] for k in defs if k.startswith("eval_")}


def _errors(text: str) -> list[str]:
    loaded = load_yaml_text(text, "s.yaml")
    return [str(d) for d in validate(loaded.data, loaded.positions, "s.yaml")]


def test_unknown_evaluator_suggests_the_right_kind_at_its_key() -> None:
    assert _errors("suite: s\ntests:\n  - id: a\n    prompt: p\n    eval:\n      not:\n        contians: x\n") == [
        "s.yaml:7:9: error: unknown evaluator 'contians' — did you mean 'contains'?"]


def test_errors_inside_a_kind_name_the_option_not_the_schema_branches() -> None:
    errors = _errors("suite: s\ntests:\n  - id: a\n    prompt: p\n    eval: {numeric: 3, tolerance: -1}\n")
    assert errors == ["s.yaml:5:35: error: 'tolerance' must be at least 0, but it is -1"]
    assert not any("valid under" in e for e in errors)


def test_all_errors_of_a_file_come_in_one_pass() -> None:
    text = ("suite: s\ntests:\n  - id: a\n    prompt: p\n    max_tokens: x\n"
            "  - id: b\n    prompt: p\n    temperature: 9\n")
    assert [e.split(": error")[0] for e in _errors(text)] == ["s.yaml:5:17", "s.yaml:8:18"]


def test_a_spec_written_in_many_tests_is_reported_at_each_of_them() -> None:
    # Each distinct evaluator spec is validated once: its errors still come at every test that writes it, inside
    # a composition or not, and a spec that differs only in a value's type is validated on its own.
    text = ("suite: s\ntests:\n"
            "  - id: a\n    prompt: p\n    eval: {numeric: 3, tolerance: -1}\n"
            "  - id: b\n    prompt: p\n    eval: {all: [{numeric: 3, tolerance: -1}]}\n"
            "  - id: c\n    prompt: p\n    eval: {numeric: 3, tolerance: -1}\n"
            "  - id: d\n    prompt: p\n    eval: {numeric: 3, tolerance: '-1'}\n")
    for _ in range(2):   # and again, from what the first pass remembered
        assert _errors(text) == [
            "s.yaml:5:35: error: 'tolerance' must be at least 0, but it is -1",
            "s.yaml:8:42: error: 'tolerance' must be at least 0, but it is -1",
            "s.yaml:11:35: error: 'tolerance' must be at least 0, but it is -1",
            "s.yaml:14:35: error: 'tolerance' must be a number, but it is the text '-1'; write the number without "
            "quotes"]


def test_api_key_env_errors_never_repeat_the_value() -> None:
    loaded = load_yaml_text("models:\n  m:\n    base_url: http://127.0.0.1:1/v1\n"
                            "    api_key_env: sk-live-abcdef123456\n", "m.yaml")
    [diag] = validate(loaded.data, loaded.positions, "m.yaml", "models")
    assert "sk-live" not in diag.message and "NAME of an environment variable" in diag.message
