"""jsonschema for the schemas users write (a tool's `parameters`, an inline `json_schema`), checked and compiled
once per distinct schema: both are kept by the schema's canonical JSON text, since a suite repeats a few of them
over many tests.

A schema's regexes (`pattern`, the names of `patternProperties`, which `additionalProperties` consults too) run on
RE2 (engine/base/patterns.py), not on Python's backtracking `re`: the model writes the strings they are matched
against, so matching must take time linear in them. The validator class is jsonschema's own for the schema's draft,
with those keywords given RE2 matching (`validators.extend`); a pattern RE2 cannot run is a schema error when the
schema is checked, with the words a suite regex gets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator

from engine.base.patterns import compile_re2
from engine.base.words import short

__all__ = ["schema_error", "schema_validator"]

_KEPT = 256   # distinct schemas kept per process; a long process that loads many suites drops the oldest


def _json_value(value: Any) -> Any:
    """A value JSON has no type for: a read-only mapping as a dict, anything else (a YAML date) as its text."""
    return dict(value) if isinstance(value, Mapping) else str(value)


def _text(schema: Any) -> str:
    """The schema as JSON text with its keys sorted, so that equal schemas share one entry."""
    try:
        return json.dumps(schema, sort_keys=True, ensure_ascii=False, default=_json_value)
    except TypeError:   # keys of mixed types (YAML allows `1:` beside `name:`): kept in their written order
        return json.dumps(schema, ensure_ascii=False, default=_json_value)


def _draft_class(schema: Any) -> type[Validator]:
    """jsonschema's validator of the draft `schema` names in `$schema`, else 2020-12."""
    if isinstance(schema, dict):
        return validators.validator_for(schema, default=Draft202012Validator)
    return Draft202012Validator


# ------------------------------------------------------------------------------------------ RE2 keywords

def _matches(pattern: str, text: str) -> bool:
    """`re.search(pattern, text)` on RE2. Raises ValueError when RE2 cannot run the pattern."""
    return compile_re2(pattern).search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        if not _matches(pattern, instance):
            yield ValidationError(f"{short(instance)} does not match {pattern!r}")
    except ValueError as exc:
        yield ValidationError(f"the pattern {pattern!r} cannot run: {exc}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any,
                        schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        try:
            found = compile_re2(pattern)
        except ValueError as exc:
            yield ValidationError(f"the pattern {pattern!r} cannot run: {exc}")
            continue
        for key, value in instance.items():
            if found.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(stock: Any) -> Any:
    """jsonschema's `additionalProperties`, its `patternProperties` names matched on RE2 (the stock keyword
    matches them with `re`); without `patternProperties` it is the stock keyword as is."""
    def keyword(validator: Any, allowed: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        patterns = schema.get("patternProperties")
        if not patterns:
            yield from stock(validator, allowed, instance, schema)
            return
        if not validator.is_type(instance, "object"):
            return
        properties = schema.get("properties", {})
        try:
            extras = {key for key in instance
                      if key not in properties and not any(_matches(p, key) for p in patterns)}
        except ValueError as exc:
            yield ValidationError(f"a patternProperties pattern cannot run: {exc}")
            return
        if validator.is_type(allowed, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], allowed, path=extra)
        elif not allowed and extras:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(short(each) for each in sorted(extras))
            listed = ", ".join(repr(each) for each in sorted(patterns))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")
    return keyword


_LINEAR: dict[type[Validator], type[Validator]] = {}


def _linear_class(draft: type[Validator]) -> type[Validator]:
    """The draft's validator class with its regex keywords on RE2 (made once per draft)."""
    made = _LINEAR.get(draft)
    if made is None:
        made = _LINEAR[draft] = _extended(draft)
    return made


def _extended(draft: type[Validator]) -> type[Validator]:
    stock = draft.VALIDATORS
    mine: dict[str, Any] = {}
    if "pattern" in stock:
        mine["pattern"] = _pattern
    if "patternProperties" in stock:
        mine["patternProperties"] = _pattern_properties
    if "additionalProperties" in stock:
        mine["additionalProperties"] = _additional_properties(stock["additionalProperties"])
    return validators.extend(draft, mine)


# ------------------------------------------------------------------------------------------ the regexes of a schema

# Keywords whose values are data, not schemas (a `pattern` key inside them is not a regex).
_DATA = frozenset({"enum", "const", "default", "examples"})
# Keywords whose values map names to schemas (the names are not keywords).
_NAMED = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"})


def _regexes(schema: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str, str]]:
    """(where, keyword, pattern) for every regex a schema holds; `unevaluatedProperties` reported as ("", "")."""
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            yield from _regexes(item, (*path, index))
        return
    if not isinstance(schema, Mapping):
        return
    for key, value in schema.items():
        here = (*path, key)
        if key in _DATA:
            continue
        if key == "pattern" and isinstance(value, str):
            yield here, "pattern", value
        elif key == "unevaluatedProperties":
            yield here, key, ""
        if key in _NAMED and isinstance(value, Mapping):
            for name, subschema in value.items():
                if key == "patternProperties" and isinstance(name, str):
                    yield (*here, name), key, name
                yield from _regexes(subschema, (*here, name))
        else:
            yield from _regexes(value, here)


def _regex_error(schema: Any) -> SchemaError | None:
    """The first regex of `schema` RE2 cannot run, as a schema error at its place; or None."""
    unevaluated: tuple[Any, ...] | None = None
    named = False
    for where, keyword, pattern in _regexes(schema):
        if keyword == "unevaluatedProperties":
            unevaluated = unevaluated or where
            continue
        named = named or keyword == "patternProperties"
        try:
            compile_re2(pattern)
        except ValueError as exc:
            return SchemaError(f"the {keyword} {short(pattern)} does not compile: {exc}", path=where)
    if unevaluated is not None and named:
        return SchemaError("unevaluatedProperties beside patternProperties is not supported: jsonschema would "
                           "match those patterns with Python's backtracking re, which a long property name can "
                           "stall; use additionalProperties", path=unevaluated)
    return None


@lru_cache(maxsize=_KEPT)
def _error_of(text: str) -> SchemaError | None:
    schema = json.loads(text)
    try:
        _draft_class(schema).check_schema(schema)
    except SchemaError as exc:
        return exc
    return _regex_error(schema)


@lru_cache(maxsize=_KEPT)
def _validator_of(text: str) -> Validator:
    schema = json.loads(text)
    return _linear_class(_draft_class(schema))(schema)


def schema_error(schema: Any) -> SchemaError | None:
    """jsonschema's best error in `schema` against its draft's metaschema, or a regex in it RE2 cannot run, or
    None when it is a valid schema."""
    return _error_of(_text(schema))


def schema_validator(schema: Any) -> Validator:
    """The compiled validator for `schema` (the draft its `$schema` names, else 2020-12), regexes on RE2."""
    return _validator_of(_text(schema))
