"""JSON Schema answers without jsonschema, for the plain schemas tools declare: "surely valid", or "ask jsonschema".

A suite that declares a tool used to import jsonschema (45-50 ms of CPU, ~5% of loading the 10,003-test bench
suite) to check the tool's `parameters` against the 2020-12 metaschema once, and then ran a jsonschema
validator on every tool-call golden (`tool_call`'s strict profile checks the arguments against the tool's
schema). Tool schemas are nearly always made of `type`, `properties`, `required`, `enum`, `items` and
descriptions: this module answers for those alone, and only one way round:

- `metaschema_valid(schema)` is True only when `Draft202012Validator.check_schema(schema)` raises nothing;
- `instance_check(schema)` is a compiled check whose True means `validator_for(schema)(schema)` finds no error
  in the instance (None: the schema is outside the subset).

False (or None) never means "invalid": it means "ask jsonschema", which then gives the verdict and the message
it always gave. So every verdict and every message is jsonschema's, and jsonschema is imported only for a
schema outside the subset or a value that may not fit. Each rule below mirrors the keyword's code in
jsonschema 4.26 (`_keywords.py`, `_types.py`) or its place in the 2020-12 metaschema;
tests/base/test_schema_subset.py holds the keyword lists to jsonschema's own and compares both answers on the
BFCL tool schemas and on generated schemas and values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.base.identity_memo import by_identity

__all__ = ["METASCHEMA_KEYWORDS", "VALIDATOR_KEYWORDS", "instance_check", "metaschema_valid", "surely_fits"]

Check = Callable[[Any], bool]

# Every keyword the 2020-12 metaschema (and its vocabularies) describes. A keyword outside this list is free:
# the metaschema says nothing about its value. One inside it that `_META_RULES` does not check sends the
# schema to jsonschema (`$ref`, `pattern`'s regex format, `$id`'s URI format...).
METASCHEMA_KEYWORDS = frozenset({
    "$anchor", "$comment", "$defs", "$dynamicAnchor", "$dynamicRef", "$id", "$recursiveAnchor", "$recursiveRef",
    "$ref", "$schema", "$vocabulary", "additionalProperties", "allOf", "anyOf", "const", "contains",
    "contentEncoding", "contentMediaType", "contentSchema", "default", "definitions", "dependencies",
    "dependentRequired", "dependentSchemas", "deprecated", "description", "else", "enum", "examples",
    "exclusiveMaximum", "exclusiveMinimum", "format", "if", "items", "maxContains", "maxItems", "maxLength",
    "maxProperties", "maximum", "minContains", "minItems", "minLength", "minProperties", "minimum", "multipleOf",
    "not", "oneOf", "pattern", "patternProperties", "prefixItems", "properties", "propertyNames", "readOnly",
    "required", "then", "title", "type", "unevaluatedItems", "unevaluatedProperties", "uniqueItems", "writeOnly",
})

# The keywords Draft202012Validator validates with (its VALIDATORS); any other keyword is ignored by it.
VALIDATOR_KEYWORDS = frozenset({
    "$dynamicRef", "$ref", "additionalProperties", "allOf", "anyOf", "const", "contains", "dependentRequired",
    "dependentSchemas", "enum", "exclusiveMaximum", "exclusiveMinimum", "format", "if", "items", "maxItems",
    "maxLength", "maxProperties", "maximum", "minItems", "minLength", "minProperties", "minimum", "multipleOf",
    "not", "oneOf", "pattern", "patternProperties", "prefixItems", "properties", "propertyNames", "required",
    "type", "unevaluatedItems", "unevaluatedProperties", "uniqueItems",
})

_SIMPLE_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})


def _is_number(value: Any) -> bool:
    """A JSON number for jsonschema (not a bool); only the two built-in types are answered for."""
    kind = type(value)
    return kind is int or kind is float


def _non_negative_integer(value: Any) -> bool:
    """The metaschema's nonNegativeInteger: an int, or a float with no fraction (jsonschema's "integer"), >= 0."""
    kind = type(value)
    return (kind is int or (kind is float and value.is_integer())) and not value < 0


def _type_names(value: Any) -> bool:
    if type(value) is str:
        return value in _SIMPLE_TYPES
    return (type(value) is list and bool(value) and all(type(v) is str and v in _SIMPLE_TYPES for v in value)
            and len(set(value)) == len(value))


def _strings_unique(value: Any) -> bool:
    return type(value) is list and all(type(v) is str for v in value) and len(set(value)) == len(value)


def _text(value: Any) -> bool:
    return type(value) is str


def _anything(value: Any) -> bool:
    return True


def _flag(value: Any) -> bool:
    return type(value) is bool


def _array(value: Any) -> bool:
    return type(value) is list


def metaschema_valid(schema: Any) -> bool:
    """True only when `schema` surely passes `Draft202012Validator.check_schema`; False: ask jsonschema."""
    if type(schema) is bool:
        return True
    if type(schema) is not dict:
        return False
    for key, value in schema.items():
        rule = _META_RULES.get(key)
        if rule is None:
            if type(key) is not str or key in METASCHEMA_KEYWORDS:
                return False
            continue   # a keyword the metaschema does not describe: any value passes
        if not rule(value):
            return False
    return True


def _schemas_by_name(value: Any) -> bool:
    return type(value) is dict and all(metaschema_valid(v) for v in value.values())


# keyword -> the metaschema's rule for its value, for the keywords answered here.
_META_RULES: dict[str, Callable[[Any], bool]] = {
    "type": _type_names,
    "properties": _schemas_by_name,
    "required": _strings_unique,
    "items": metaschema_valid,
    "additionalProperties": metaschema_valid,
    "description": _text, "title": _text, "$comment": _text, "format": _text,
    "default": _anything, "const": _anything,
    "enum": _array, "examples": _array,
    "deprecated": _flag, "readOnly": _flag, "writeOnly": _flag, "uniqueItems": _flag,
    "minimum": _is_number, "maximum": _is_number, "exclusiveMinimum": _is_number, "exclusiveMaximum": _is_number,
    "minLength": _non_negative_integer, "maxLength": _non_negative_integer, "minItems": _non_negative_integer,
    "maxItems": _non_negative_integer, "minProperties": _non_negative_integer,
    "maxProperties": _non_negative_integer,
}

# Keywords with no effect on Draft202012Validator's verdict: annotations, and `format` (a validator built
# as `validator_for(schema)(schema)` has no format checker, so `format` asserts nothing).
_NO_EFFECT = frozenset({"description", "title", "$comment", "default", "examples", "deprecated", "readOnly",
                        "writeOnly", "format"})
_TYPE_TESTS: dict[str, Check] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: type(v) is int or (type(v) is float and v.is_integer()),
    "number": _is_number,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}
# Values jsonschema surely does not read as numbers (so `minimum` and the like do not apply to them).
_NOT_NUMBERS = frozenset({str, bool, list, dict, type(None)})


def _always(value: Any) -> bool:
    return True


def _enum_member(value: Any, options: list[Any]) -> bool:
    """Surely `any(equal(option, value))` in jsonschema's sense (bools apart from numbers)."""
    kind = type(value)
    for option in options:
        if option is value:
            return True
        other = type(option)
        if kind is str and other is str and option == value:
            return True
        if (kind is int or kind is float) and (other is int or other is float) and option == value:
            return True
    return False


def _number_bound(bound: Any, fails: Callable[[Any, Any], bool]) -> Check | None:
    if not _is_number(bound):
        return None

    def check(value: Any) -> bool:
        if _is_number(value):
            return not fails(value, bound)
        return type(value) in _NOT_NUMBERS
    return check


def _size_bound(bound: Any, kind: type[str] | type[list[Any]], fails: Callable[[int, Any], bool]) -> Check | None:
    if not _is_number(bound):
        return None
    return lambda value: not isinstance(value, kind) or not fails(len(value), bound)


def _keyword(key: str, value: Any, schema: dict[str, Any]) -> Check | None:
    """The check of one keyword, or None when it is outside the subset."""
    if key == "type":
        if not _type_names(value):
            return None
        tests = [_TYPE_TESTS[name] for name in ([value] if type(value) is str else value)]
        return tests[0] if len(tests) == 1 else (lambda v: any(test(v) for test in tests))
    if key == "properties":
        if type(value) is not dict:
            return None
        inner = {name: _compile(sub) for name, sub in value.items()}
        if any(check is None for check in inner.values()):
            return None
        checks = [(name, check) for name, check in inner.items() if check is not _always]

        def properties(v: Any) -> bool:
            if not isinstance(v, dict):
                return True
            return all(name not in v or check(v[name]) for name, check in checks)  # type: ignore[misc]
        return properties
    if key == "required":
        if not (type(value) is list and all(type(name) is str for name in value)):
            return None
        names = tuple(value)
        return lambda v: not isinstance(v, dict) or all(name in v for name in names)
    if key == "additionalProperties":
        declared = schema.get("properties", {})
        if type(declared) is not dict:
            return None
        if value is False:
            return lambda v: not isinstance(v, dict) or all(name in declared for name in v)
        extra = _compile(value)
        if extra is None:
            return None
        return lambda v: not isinstance(v, dict) or all(name in declared or extra(v[name]) for name in v)
    if key == "items":
        item = _compile(value) if type(value) in (dict, bool) else None
        if item is None:
            return None
        return lambda v: not isinstance(v, list) or all(item(x) for x in v)
    if key == "enum":
        if type(value) is not list:
            return None
        return lambda v: _enum_member(v, value)
    if key == "minimum":
        return _number_bound(value, lambda v, b: v < b)
    if key == "maximum":
        return _number_bound(value, lambda v, b: v > b)
    if key == "exclusiveMinimum":
        return _number_bound(value, lambda v, b: v <= b)
    if key == "exclusiveMaximum":
        return _number_bound(value, lambda v, b: v >= b)
    if key in ("minLength", "minItems"):
        return _size_bound(value, str if key == "minLength" else list, lambda n, b: n < b)
    if key in ("maxLength", "maxItems"):
        return _size_bound(value, str if key == "maxLength" else list, lambda n, b: n > b)
    return None


def _compile(schema: Any) -> Check | None:
    if schema is True:
        return _always
    if type(schema) is not dict:
        return None   # `false`, or not a schema at all: jsonschema answers
    checks: list[Check] = []
    for key, value in schema.items():
        if type(key) is not str:
            return None
        if key in _NO_EFFECT:
            continue
        if key not in VALIDATOR_KEYWORDS:
            if key.startswith("$"):
                return None   # `$defs`, `$id`, `$schema`...: they change what other keywords mean
            continue          # a keyword Draft202012Validator does not know: ignored by it
        check = _keyword(key, value, schema)
        if check is None:
            return None
        checks.append(check)
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    return lambda v: all(check(v) for check in checks)


@by_identity(256)   # built once per schema object: a suite's tests offer the same few tool schemas
def instance_check(schema: Any) -> Check | None:
    """A check whose True means jsonschema's validator for `schema` finds no error; None outside the subset.

    Args:
        schema: A JSON Schema; one with `$schema` (another draft) is outside the subset.
    """
    return _compile(schema)


def surely_fits(schema: Any, instance: Any) -> bool:
    """True only when jsonschema's validator for `schema` surely finds no error in `instance`; False: ask it."""
    check = instance_check(schema)
    return check is not None and check(instance)
