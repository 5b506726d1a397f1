"""JSON evaluators: is_json, json_schema, json_field.

The JSON in an answer is, in order of preference: the content of a ```json fence, the whole
trimmed answer, else the last balanced JSON object or array in the text (`json_search.last_balanced`:
what trying the decoder at every `{` and `[` takes, found with work linear in the answer where that
was quadratic: a hostile answer's fail must not become a timed-out error row). `strict: true` (is_json,
json_schema) asks for the whole answer, a fence around all of it allowed; `fences: false` beside it
reads the answer exactly as JSON.parse does (no fence, only JSON whitespace around, no NaN), as
promptfoo's `is-json` and object `equals` do. (Named json_eval so the module never shadows the standard
library's json.)

Value comparison (json_field `equals`, `in`, `contains`, `set_equals`) follows `values_equal`:
numbers by value (8 == 8.0), `coerce` (default true) lets "8" equal 8 and "true" equal true,
strings ignore case unless `case_sensitive: true`, lists in order, objects by keys.

Each kind is a builder that checks and binds its options once (a json_field path is parsed, an inline
schema is checked and its validator built) and returns the scorer. JSON nested deeper than the interpreter
reads (a hostile `[[[[...`) is JSON the answer does not have: a fail with the reason, never an error row.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from engine.base.compiled_schema import schema_error, schema_validator
from engine.base.words import did_you_mean, short
from engine.errors import EvaluatorConfigError
from engine.evaluators.base import COMMON_OPTIONS, CheckSite, Kind, verdict
from engine.evaluators.json_search import last_balanced
from engine.evaluators.text import check_regex_site, compile_pattern
from engine.model.answer import Answer
from engine.model.scoring import Scorer, ScoringContext
from engine.model.verdict import Verdict

# The opening's whitespace runs to its last newline, which the lookahead alone admits: backtracking to each earlier
# one, a fence of 100,000 blank lines and no close took minutes. (Not an atomic group: Python before 3.11.5 matches
# some of those and possessive repeats wrongly, gh-106052 and gh-100061.)
_JSON_FENCE = re.compile(r"```(?:json|JSON)\s*\n(?=[^\S\n]*(?:\S|\Z))(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder()
_MISSING = object()
_TOO_DEEP = "it is nested too deeply to read"


def _loads(text: str, **options: Any) -> Any:
    """`json.loads`, a value nested past the interpreter's recursion limit being a ValueError as any other JSON
    that cannot be read."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise ValueError(_TOO_DEEP) from None


def _raw_decode(text: str, start: int) -> tuple[Any, int]:
    """`JSONDecoder.raw_decode` at `start`, nesting past the recursion limit being a ValueError (as `_loads`)."""
    try:
        return _DECODER.raw_decode(text, start)
    except RecursionError:
        raise ValueError(_TOO_DEEP) from None


def find_json(text: str) -> tuple[Any, str | None]:
    """Find the JSON value in an answer.

    Args:
        text: The answer text.

    Returns:
        (value, None) when found, else (None, reason it was not).
    """
    for fence in reversed(_JSON_FENCE.findall(text)):
        try:
            return _loads(fence), None
        except ValueError as exc:
            fence_error = f"the ```json block is not valid JSON: {exc}"
            break
    else:
        fence_error = None
    stripped = text.strip()
    try:
        return _loads(stripped), None
    except ValueError:
        pass
    span = last_balanced(text)
    if span is not None:
        try:
            return _raw_decode(text, span[0])[0], None
        except ValueError as exc:   # the search's reading and the decoder's agree; this is a guard, not a path
            return None, f"the JSON value at character {span[0]} does not decode: {exc}"
    return None, fence_error or f"no JSON value found in {short(text)}"


_WHOLE_FENCE = re.compile(r"\A```(?:json|JSON)?[ \t]*\n(.*?)\n?```\Z", re.DOTALL)


def whole_json(text: str) -> tuple[Any, str | None]:
    """The JSON value that is the whole answer (trimmed), or the whole content of one ```json fence.

    Returns:
        (value, None) when it is one, else (None, why not).
    """
    stripped = text.strip()
    fence = _WHOLE_FENCE.match(stripped)
    body = fence.group(1) if fence else stripped
    try:
        return _loads(body), None
    except ValueError as exc:
        where = "the ```json block" if fence else "the whole answer"
        return None, f"{where} is not one JSON value ({exc}) in {short(text)}"


def exact_json(text: str) -> tuple[Any, str | None]:
    """The answer read as JSON.parse reads text: one JSON value, only JSON whitespace around it, no fence,
    no NaN or Infinity.

    Returns:
        (value, None) when it is one, else (None, why not).
    """
    try:
        return _loads(text, parse_constant=_no_constant), None
    except ValueError as exc:
        return None, f"the whole answer is not one JSON value ({exc}) in {short(text)}"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finder(options: Mapping[str, Any], kind: str) -> Any:
    """The JSON finder the `strict` and `fences` options choose."""
    strict, fences = options.get("strict", False), options.get("fences", True)
    for name, flag in (("strict", strict), ("fences", fences)):
        if not isinstance(flag, bool):
            raise EvaluatorConfigError(f"{kind}: {name} must be true or false, got {short(flag)}", kind=kind,
                                       option=name)
    if not fences and not strict:
        raise EvaluatorConfigError(f"{kind}: `fences: false` goes with `strict: true` (the whole answer, read "
                                   "as JSON.parse reads it); add `strict: true`", kind=kind, option="fences")
    return find_json if not strict else whole_json if fences else exact_json


def is_json(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The answer contains a JSON value (fenced, whole, or the last balanced object/array); with
    `strict: true` the whole answer is one JSON value (a ```json fence around all of it allowed, unless
    `fences: false`)."""
    find = _finder(options, "is_json")

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        found, problem = find(answer.text)
        if problem:
            return verdict(0.0, problem, "is_json")
        return verdict(1.0, f"found JSON {type(found).__name__}: {short(found)}", "is_json")

    return score


def _where(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the top level"


def json_schema(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The answer's JSON validates against the inline schema; the reason names the first error's place."""
    if not isinstance(value, Mapping):
        raise EvaluatorConfigError(f"json_schema: the schema must be a mapping, got {short(value)}",
                                   kind="json_schema")
    problem = schema_error(value)
    if problem is not None:
        raise EvaluatorConfigError(f"json_schema: the schema itself is invalid: {problem.message}",
                                   kind="json_schema")
    validator = schema_validator(value)
    find = _finder(options, "json_schema")

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        found, problem = find(answer.text)
        if problem:
            return verdict(0.0, problem, "json_schema")
        try:
            errors = sorted(validator.iter_errors(found), key=lambda e: list(e.absolute_path))
        except RecursionError:
            return verdict(0.0, "the JSON is nested too deeply to check against the schema", "json_schema")
        if not errors:
            return verdict(1.0, "JSON matches the schema", "json_schema")
        first = errors[0]
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return verdict(0.0, f"at {_where(first.absolute_path)}: {first.message}{more}", "json_schema")

    return score


_PATH_PART = re.compile(r"""\.?(?:(?P<key>[^.\[\]]+)|\[(?P<index>-?\d+)\]|\[(?P<q>["'])(?P<qkey>.*?)(?P=q)\])""")


def parse_path(path: str) -> list[str | int]:
    """Split `items[0].name` (or `a["key.with.dots"]`) into keys and indexes.

    Raises:
        EvaluatorConfigError: for a path that does not parse.
    """
    parts: list[str | int] = []
    pos = 0
    text = str(path).strip()
    if text.startswith("$"):
        text = text[1:].lstrip(".")
    while pos < len(text):
        m = _PATH_PART.match(text, pos)
        if not m or m.end() == pos:
            raise EvaluatorConfigError(f"json_field: cannot read path {path!r} at {text[pos:]!r}; write it like "
                                       "items[0].name", kind="json_field", option="path")
        if m.group("index") is not None:
            parts.append(int(m.group("index")))
        else:
            parts.append(m.group("key") if m.group("key") is not None else m.group("qkey"))
        pos = m.end()
    return parts


def resolve(document: Any, parts: list[str | int]) -> tuple[Any, str | None]:
    """Walk the path. Returns (value, None) or (_MISSING, why it is missing)."""
    current = document
    for depth, part in enumerate(parts):
        here = _where(parts[:depth]) if depth else "the top level"
        if isinstance(part, int):
            if not isinstance(current, list):
                return _MISSING, f"{here} is {type(current).__name__}, not a list"
            if not -len(current) <= part < len(current):
                return _MISSING, f"{here} has {len(current)} elements, no [{part}]"
            current = current[part]
        else:
            if not isinstance(current, dict):
                return _MISSING, f"{here} is {type(current).__name__}, not an object"
            if part not in current:
                return _MISSING, f"{here} has no key {part!r}"
            current = current[part]
    return current, None


def _as_number(value: Any, coerce: bool) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if coerce and isinstance(value, str):
        try:
            number = float(value.strip().replace(",", ""))
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def values_equal(got: Any, expected: Any, *, coerce: bool = True, case_sensitive: bool = False) -> bool:
    """Compare two JSON values by the json_field rules (see the module docstring)."""
    if isinstance(expected, bool) or isinstance(got, bool):
        if isinstance(expected, bool) and isinstance(got, bool):
            return got is expected
        if coerce:
            other, flag = (got, expected) if isinstance(expected, bool) else (expected, got)
            return isinstance(other, str) and other.strip().lower() == ("true" if flag else "false")
        return False
    if expected is None or got is None:
        return got is None and expected is None
    a, b = _as_number(got, coerce), _as_number(expected, coerce)
    if a is not None and b is not None and (not isinstance(got, str) or not isinstance(expected, str)):
        return a == b
    if isinstance(got, str) and isinstance(expected, str):
        return got == expected if case_sensitive else got.casefold() == expected.casefold()
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(
            values_equal(g, e, coerce=coerce, case_sensitive=case_sensitive)
            for g, e in zip(got, expected, strict=True))
    if isinstance(got, dict) and isinstance(expected, dict):
        return set(got) == set(expected) and all(
            values_equal(got[k], expected[k], coerce=coerce, case_sensitive=case_sensitive) for k in got)
    return False


_TYPES = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}
COMPARATORS = ("equals", "in", "matches", "approx", "contains", "set_equals", "exists", "type", "length")


def json_field(value: Any, options: Mapping[str, Any]) -> Scorer:
    """One field of the answer's JSON, found by `path`, checked by exactly one comparator."""
    kind = "json_field"
    if not isinstance(value, Mapping) or "path" not in value:
        raise EvaluatorConfigError("json_field: give a mapping with `path` and one comparator, e.g. "
                                   "{path: a.b, equals: 1}", kind=kind)
    chosen = [c for c in COMPARATORS if c in value]
    if len(chosen) != 1:
        raise EvaluatorConfigError(f"json_field: give exactly one comparator of {', '.join(COMPARATORS)}; got "
                                   f"{', '.join(chosen) or 'none'}", kind=kind)
    comparator = chosen[0]
    expected = value[comparator]
    coerce = bool(value.get("coerce", True))
    case_sensitive = bool(value.get("case_sensitive", False))
    path_text = str(value["path"])
    parts = parse_path(path_text)
    _check_comparator(comparator, expected)

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        document, problem = find_json(answer.text)
        if problem:
            return verdict(0.0, problem, kind)
        got, missing = resolve(document, parts)
        if comparator == "exists":
            present = missing is None
            if present == bool(expected):
                return verdict(1.0, f"{path_text} {'exists' if present else 'is absent'} as expected", kind)
            return verdict(0.0, f"{path_text} should {'exist' if expected else 'be absent'}: "
                                f"{missing or 'found ' + short(got)}", kind)
        if missing is not None:
            return verdict(0.0, f"{path_text} not found: {missing}", kind)
        ok, detail = _compare(comparator, got, expected, value, coerce, case_sensitive)
        if ok:
            return verdict(1.0, f"{path_text} = {short(got)} ({detail})", kind)
        return verdict(0.0, f"{path_text}: {detail}, got {short(got)}", kind)

    return score


def _check_comparator(comparator: str, expected: Any) -> None:
    """The comparator's own value, checked once: `approx` needs a number, `type` known type names."""
    if comparator == "approx" and _as_number(expected, True) is None:
        raise EvaluatorConfigError(f"json_field: approx needs a number, got {expected!r}", kind="json_field",
                                   option="approx")
    if comparator == "type":
        names = expected if isinstance(expected, list) else [expected]
        unknown = [n for n in names if n not in _TYPES]
        if unknown:
            raise EvaluatorConfigError(f"json_field: unknown type {unknown[0]!r}; use one of {', '.join(_TYPES)}",
                                       kind="json_field", option="type")


@lru_cache(maxsize=1024)
def _matches_pattern(expected: str, case_sensitive: bool) -> Any:
    """The `matches` regex on RE2, compiled once per pattern."""
    return compile_pattern(expected, "" if case_sensitive else "i", "json_field", "matches")


def _compare(comparator: str, got: Any, expected: Any, value: Mapping[str, Any], coerce: bool,
             case_sensitive: bool) -> tuple[bool, str]:
    def eq(a: Any, b: Any) -> bool:
        return values_equal(a, b, coerce=coerce, case_sensitive=case_sensitive)

    if comparator == "equals":
        return eq(got, expected), f"expected {short(expected)}"
    if comparator == "in":
        options = expected if isinstance(expected, list) else [expected]
        return any(eq(got, e) for e in options), f"expected one of {short(options)}"
    if comparator == "matches":
        pattern = _matches_pattern(str(expected), case_sensitive)
        text = got if isinstance(got, str) else json.dumps(got)
        return pattern.search(text) is not None, f"expected to match /{expected}/"
    if comparator == "approx":
        tolerance = float(value.get("tolerance", 1e-6))
        a, b = _as_number(got, coerce), _as_number(expected, True)
        return a is not None and b is not None and abs(a - b) <= tolerance, f"expected {b:g} \u00b1 {tolerance:g}"
    if comparator == "contains":
        if isinstance(got, str):
            needle = str(expected)
            hay, n = (got, needle) if case_sensitive else (got.casefold(), needle.casefold())
            return n in hay, f"expected to contain {short(expected)}"
        if isinstance(got, list):
            return any(eq(item, expected) for item in got), f"expected an element {short(expected)}"
        if isinstance(got, dict):
            return str(expected) in got, f"expected a key {short(expected)}"
        return False, f"expected a string, list or object containing {short(expected)}"
    if comparator == "set_equals":
        if not isinstance(got, list) or not isinstance(expected, list):
            return False, f"expected a list with the same elements as {short(expected)}"
        same = all(any(eq(g, e) for e in expected) for g in got) and all(any(eq(g, e) for g in got) for e in expected)
        return same, f"expected the set {short(expected)}"
    if comparator == "type":
        names = expected if isinstance(expected, list) else [expected]
        return any(_TYPES[n](got) for n in names), f"expected type {' or '.join(map(str, names))}"
    # length: of a string, list or object
    if not isinstance(got, (str, list, dict)):
        return False, "expected a string, list or object to measure"
    return len(got) == int(expected), f"length {len(got)}, expected {int(expected)}"


# ------------------------------------------------------------------------------------------ load-time checks

_JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")


def check_json_schema(schema: Any) -> tuple[tuple[Any, ...], str] | None:
    """None when `schema` is a valid JSON Schema (of the draft its `$schema` names, else 2020-12), else
    (path inside it, reason)."""
    error = schema_error(schema)
    if error is None:
        return None
    path = tuple(error.absolute_path)
    if path and path[-1] == "type" and isinstance(error.instance, str):
        guess = did_you_mean(error.instance, _JSON_TYPES)
        hint = f" — did you mean '{guess}'?" if guess else f"; use one of {', '.join(_JSON_TYPES)}"
        return path, f"'{error.instance}' is not a JSON Schema type{hint}"
    return path, error.message


def _check_json_schema(value: Any, spec: Mapping[str, Any], site: CheckSite) -> None:
    found = check_json_schema(value)
    if found:
        inner, reason = found
        site.error(("json_schema", *inner), f"this is not a valid JSON Schema: {reason}")
    for option in (k for k in COMMON_OPTIONS if isinstance(value, Mapping) and k in value):
        # JSON Schema ignores unknown keywords, so the schema stays valid and the option does nothing.
        site.warning(("json_schema", option), (
            f"'{option}' inside `json_schema:` is read as part of the JSON Schema, where it means "
            f"nothing; if it is the evaluator's {option}, write it beside `json_schema:`, not inside it"))


def _check_json_field(value: Any, spec: Mapping[str, Any], site: CheckSite) -> None:
    matches = value.get("matches") if isinstance(value, Mapping) else None
    check_regex_site(matches, "", site, ("json_field", "matches"), "the regex in 'matches'")


# ------------------------------------------------------------------------------------------ registry entries

CASE_SENSITIVE = {"type": "boolean", "description": "Compare upper and lower case exactly (default false)."}

_STRICT = {
    "strict": {"type": "boolean", "description": "The whole answer is one JSON value, no prose around it "
               "(a ```json fence around all of it allowed); default false: a JSON value found anywhere."},
    "fences": {"type": "boolean", "description": "With `strict: true`, false reads the answer exactly as "
               "JSON.parse does: no ``` fence unwrapped, only JSON whitespace around, no NaN (default true)."}}
IS_JSON = Kind("The answer is valid JSON (a ```json fence is accepted).", {"const": True}, _STRICT,
               ({"is_json": True}, {"is_json": True, "strict": True},
                {"is_json": True, "strict": True, "fences": False}), build=is_json)
JSON_SCHEMA = Kind("The answer is JSON that matches this JSON Schema.", {"type": "object"}, _STRICT,
                   ({"json_schema": {"type": "object", "required": ["name"]}},), build=json_schema,
                   check=_check_json_schema)
JSON_FIELD = Kind("One field of the JSON answer, found by `path`, compared with exactly one comparator.", {
    "type": "object", "additionalProperties": False, "required": ["path"],
    "oneOf": [{"required": [c]} for c in COMPARATORS],
    "properties": {
        "path": {"type": "string", "description": "Where the field is: `name`, `items[0].price`, `a.b`.",
                 "examples": ["name", "items[0].price"]},
        "equals": {"description": "The field equals this value."},
        "in": {"type": "array", "description": "The field is one of these values."},
        "matches": {"type": "string", "description": "The field (as text) matches this regex."},
        "approx": {"type": ["number", "string"], "description": "The field is this number, within `tolerance`."},
        "contains": {"description": "The field (text or list) contains this value."},
        "set_equals": {"type": ["array", "string"], "description": "The field, as a set, equals this list."},
        "exists": {"type": "boolean", "description": "The field is present (true) or absent (false)."},
        "type": {"enum": list(_JSON_TYPES), "description": "The field's JSON type."},
        "length": {"type": ["integer", "string"], "description": "The field (list or text) has this length."},
        "tolerance": {"type": "number", "minimum": 0, "description": "Absolute tolerance for `approx`."},
        "case_sensitive": CASE_SENSITIVE,
        "coerce": {"type": "boolean", "description": "Compare \"8\" and 8 as equal (default true)."}}}, {},
    ({"json_field": {"path": "name", "equals": "Alice"}},), build=json_field, check=_check_json_field)
