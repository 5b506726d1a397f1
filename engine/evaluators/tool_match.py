"""How one model call is compared with one expected call: the `strict` and `bfcl` profiles.

Accepted values are written as BFCL writes them: each argument maps to a list of accepted values,
`""` in the list means the argument may be omitted, an empty list accepts no value at all (and,
holding no `""`, does not let the argument be left out: no call matches, as in BFCL), a dict value
is itself a mapping from key to a list of accepted values, and a list value is compared element by
element, in order.

`strict` (the default): exact JSON types (a string never equals a number, a bool never equals a
number; int and float are one JSON number and compare by value), strings trimmed and compared
case-insensitively, arguments validated against the tool's declared JSON Schema.

`bfcl`: the rules of BFCL's `ast_checker.py`, reimplemented (not copied) so the verdicts agree:
strings lose spaces and `,./-_*^`, are lowercased and `'` becomes `"`; an int is accepted for a
float ("number") parameter at the top level only; 10.0 is not an integer and True is not an
integer; lists equal one accepted list in order; dict keys match exactly; the parameter types come
from the tool's schema (`required` from the schema too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import SchemaError

from engine.base.compiled_schema import schema_validator
from engine.base.words import short
from engine.model.answer import ToolCall
from engine.model.tools import strict_args


@dataclass(frozen=True)
class ExpectedCall:
    """One call the evaluator expects.

    Args:
        name: The function name (as declared in the suite's tools).
        args: Argument -> list of accepted values, or None to accept any arguments.
    """

    name: str
    args: Mapping[str, list[Any]] | None


show = short   # the one truncation helper (engine.base.words)


def show_json(value: Any, limit: int = 60) -> str:
    """A value as JSON text on one line (`null`, not Python's `None`), cut to `limit`."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def expected_name(name: str, underscore_to_dot: bool) -> str:
    """The name the model must use: with `underscore_to_dot`, dots become underscores (BFCL FC mode)."""
    return re.sub(r"\.", "_", name) if underscore_to_dot else name


def check_call(expected: ExpectedCall, call: ToolCall, *, profile: str, schemas: Mapping[str, Mapping[str, Any]],
               allow_extra: bool = False, underscore_to_dot: bool = False) -> str | None:
    """Compare one model call with one expected call.

    Args:
        expected: The expected call.
        call: The model's call.
        profile: "strict" or "bfcl".
        schemas: Tool name -> JSON Schema of its parameters (the test's declared tools).
        allow_extra: Accept arguments that are not in `expected.args`.
        underscore_to_dot: Expect dots in the function name written as underscores.

    Returns:
        None when the call matches, else a one-line reason.
    """
    want = expected_name(expected.name, underscore_to_dot)
    if call.name != want:
        return f"expected function {want!r}, got {call.name!r}"
    if not call.valid_json:
        return f"{call.name}: arguments are not valid JSON: {show(call.raw_arguments)}"
    args = call.arguments
    if not isinstance(args, dict):  # `null` included: BFCL rejects it too (decoder_wrong_output_format)
        return f"{call.name}: arguments must be a JSON object, got {show_json(args)}"
    schema = schemas.get(expected.name) or schemas.get(want) or {}
    if profile == "bfcl":
        return _bfcl_call(call.name, args, expected.args, schema, allow_extra)
    return _strict_call(call.name, args, expected.args, schema, allow_extra)


# ---------------------------------------------------------------- strict


def _strict_call(name: str, args: dict[str, Any], accepted: Mapping[str, list[Any]] | None,
                 schema: Mapping[str, Any], allow_extra: bool) -> str | None:
    if schema:
        try:
            errors = sorted(schema_validator(schema).iter_errors(args), key=lambda e: list(e.absolute_path))
        except SchemaError as exc:
            return f"{name}: the tool's declared schema is invalid: {exc.message}"
        if errors:
            where = ".".join(str(p) for p in errors[0].absolute_path) or "arguments"
            return f"{name}: {where}: {errors[0].message} (tool schema)"
    if accepted is None:
        return None
    problem = strict_args(args, accepted, allow_extra)
    return f"{name}: {problem}" if problem else None


# ---------------------------------------------------------------- bfcl

_BFCL_TYPES: dict[str, type] = {
    "string": str, "integer": int, "float": float, "number": float, "boolean": bool, "array": list,
    "tuple": list, "dict": dict, "object": dict, "any": str,
}
_NOISE = re.compile(r"[ ,./\-_*^]")


def bfcl_standardize(text: str) -> str:
    """BFCL's string normalisation: drop spaces and `,./-_*^`, lowercase, `'` -> `"`."""
    return _NOISE.sub("", text).lower().replace("'", '"')


def _jtype(value: Any) -> type:
    """The plain Python type of a JSON value (bool is not int here, as `type()` says)."""
    for t in (bool, int, float, str, list, dict):
        if isinstance(value, t):
            return t
    return type(value)


def _first_answer_type(accepted: list[Any]) -> type | None:
    for answer in accepted:
        if not (isinstance(answer, str) and answer == ""):
            return _jtype(answer)
    return None


def _schema_type(spec: Mapping[str, Any] | None) -> str | None:
    if not spec:
        return None
    declared = spec.get("type")
    if isinstance(declared, list):
        declared = next((t for t in declared if t != "null"), None)
    return declared if isinstance(declared, str) else None


def _bfcl_type(param: str, value: Any, accepted: list[Any], type_name: str, want: type,
               nested: type | None) -> tuple[bool, bool, str]:
    """BFCL's type check. Returns (valid, is_variable, reason)."""
    answer_type = _first_answer_type(accepted)
    is_variable = answer_type is not None and answer_type is not want
    if _jtype(value) is want:
        if nested is None:
            return True, is_variable, ""
        for item in accepted:
            if _jtype(item) is not list:
                return True, is_variable, ""
            if all(_bfcl_type(param, v, item, str(nested), nested, None)[0] for v in value):
                return True, is_variable, ""
        return False, is_variable, (f"argument {param!r}: expected {type_name} of {nested.__name__}, "
                                    f"got {show(value)}")
    if answer_type is not None and _jtype(value) is answer_type:
        return True, True, ""
    got = f"{_jtype(value).__name__} {show(value)}"
    return False, is_variable, f"argument {param!r}: expected type {type_name}, got {got}"


def _bfcl_dict(value: dict[str, Any], accepted: list[Any]) -> str | None:
    problem = "no accepted value"
    for answer in accepted:
        if isinstance(answer, str) and answer == "":
            continue
        problem = ""
        for key, item in value.items():
            if key not in answer:
                problem = f"unexpected key {key!r}"
                break
            std = bfcl_standardize(item) if _jtype(item) is str else item
            options = [bfcl_standardize(a) if _jtype(a) is str else a for a in answer[key]]
            if std not in options:
                problem = f"key {key!r}: expected one of {show(answer[key])}, got {show(item)}"
                break
        if not problem:
            for key, options in answer.items():
                if key not in value and "" not in options:
                    problem = f"missing key {key!r}"
                    break
        if not problem:
            return None
    return problem


def _bfcl_list_of_dicts(value: list[Any], accepted: list[Any]) -> str | None:
    problem = "no accepted value"
    for answer in accepted:
        if len(value) != len(answer):
            problem = f"expected {len(answer)} objects, got {len(value)}"
            continue
        for i, item in enumerate(value):
            inner = _bfcl_dict(item, [answer[i]]) if isinstance(item, dict) else "not an object"
            if inner:
                problem = f"[{i}] {inner}"
                break
        else:
            return None
    return problem


def _bfcl_std_list(items: Any) -> Any:
    if isinstance(items, str):  # BFCL walks "" like an empty list
        return [bfcl_standardize(c) for c in items]
    return [bfcl_standardize(v) if _jtype(v) is str else v for v in items]


def _bfcl_value(param: str, value: Any, accepted: list[Any], spec: Mapping[str, Any] | None) -> str | None:
    type_name = _schema_type(spec)
    want = _BFCL_TYPES.get(type_name or "")
    if want is None:  # no declared type: judge by the accepted values' own type
        want = _first_answer_type(accepted) or _jtype(value)
        type_name = want.__name__
    nested = None
    if type_name in ("array", "tuple"):
        items = spec.get("items") if spec else None
        nested = _BFCL_TYPES.get(_schema_type(items) or "") if isinstance(items, Mapping) else None
    if want is float and _jtype(value) is int:
        value = float(value)  # an int is fine for a float, at the top level only
    valid, is_variable, reason = _bfcl_type(param, value, accepted, type_name or "", want, nested)
    if not valid:
        return reason
    if not is_variable:
        if want is dict:
            problem = _bfcl_dict(value, accepted)
            return f"argument {param!r}: {problem}" if problem else None
        if want is list and nested is dict:
            problem = _bfcl_list_of_dicts(value, accepted)
            return f"argument {param!r}: {problem}" if problem else None
        if want is str:
            options = [bfcl_standardize(a) for a in accepted if _jtype(a) is str]
            if bfcl_standardize(value) in options:
                return None
            return f"argument {param!r}: expected one of {show(accepted)}, got {show(value)}"
        if want is list:
            options = []
            for a in accepted:
                try:
                    options.append(_bfcl_std_list(a))
                except TypeError:
                    continue
            if _bfcl_std_list(value) in options:
                return None
            return f"argument {param!r}: expected one of {show(accepted)}, got {show(value)}"
    if value in accepted:
        return None
    return f"argument {param!r}: expected one of {show(accepted)}, got {show(value)}"


def _bfcl_call(name: str, args: dict[str, Any], accepted: Mapping[str, list[Any]] | None,
               schema: Mapping[str, Any], allow_extra: bool) -> str | None:
    properties = schema.get("properties") or {}
    for param in schema.get("required") or []:
        if param not in args:
            return f"{name}: missing required argument {param!r}"
    if accepted is None:
        return None
    for param, value in args.items():
        if param not in accepted or (schema and param not in properties):
            if allow_extra and param not in accepted and (not schema or param in properties):
                continue
            return f"{name}: unexpected argument {param!r}"
        options = accepted[param] if isinstance(accepted[param], list) else [accepted[param]]
        if not options:  # BFCL fails every value here too (by type or by value, as it happens)
            return f"{name}: argument {param!r}: no value is accepted (the accepted list is empty)"
        problem = _bfcl_value(param, value, options, properties.get(param))
        if problem:
            return f"{name}: {problem}"
    for param, options in accepted.items():
        if param not in args and "" not in options:
            return f"{name}: missing argument {param!r} (not marked optional with \"\")"
    return None
