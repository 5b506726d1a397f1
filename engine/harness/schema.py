"""A harness file checked against schemas/harness.schema.json, each error in plain words at FILE:LINE:COL.

Suites word their schema errors in `engine/suite/schema.py`, which sits in a layer above this one (it knows
the evaluator catalogue). A harness has eight keys and its schema uses a dozen keywords, so they are worded
here: `_WORDS` maps each keyword to the function that says its error, with the fix, as (path, on_key,
message) items; the loader's `Positions` turns each path into a line and column. jsonschema's own message
is shown only for a keyword this table does not know.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from engine.base.words import TYPE_WORDS, describe_value, did_you_mean
from engine.base.yaml import Positions
from engine.errors import Diagnostic, HarnessError
from engine.paths import data_dir

if TYPE_CHECKING:  # imported by `validator`: only a run with an exec harness reads one
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

__all__ = ["validate", "validator"]

Path_ = tuple[Any, ...]
Said = list[tuple[Path_, bool, str]]  # (path, point at the key rather than the value, message)


@cache
def validator() -> Draft202012Validator:
    """The compiled validator of schemas/harness.schema.json, built once per process."""
    from jsonschema import Draft202012Validator

    try:
        schema = json.loads((data_dir("schemas") / "harness.schema.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HarnessError("schemas/harness.schema.json was not found; reinstall the engine") from None
    return Draft202012Validator(schema)


def _field(path: Path_) -> str:
    """The thing at `path` as the author wrote it: 'score', item 2 of 'run', the template of 'main.py'."""
    if not path:
        return "the harness"
    if len(path) == 2 and path[0] == "run":
        return f"item {path[1] + 1} of 'run'"  # counted from 1, as a person counts
    if len(path) == 2 and path[0] == "files":
        return f"the template of '{path[1]}' in 'files'"
    return "'" + "/".join(str(p) for p in path) + "'"


def _hint(path: Path_, instance: Any, types: list[str], positions: Positions) -> str:
    """The YAML trap behind a wrong type, with its fix, if one fits."""
    raw = positions.raw.get(path)
    if instance is None:
        return "; a value is missing after the ':'"
    if raw is not None and "string" in types:
        return f"; YAML read {raw} as {describe_value(instance)}: put it in quotes, '{raw}', to keep it as text"
    if isinstance(instance, str) and "array" in types:
        return f"; write a list, e.g. [{', '.join(instance.split()) or '...'}]"
    if isinstance(instance, str) and ("integer" in types or "number" in types):
        return "; write the number without quotes"
    if path == ("files",):
        return "; write one `path: template` line per file under `files:`"
    return ""


def _type(error: ValidationError, path: Path_, positions: Positions) -> Said:
    value = error.validator_value
    types = [str(t) for t in value] if isinstance(value, list) else [str(value)]
    expected = " or ".join(TYPE_WORDS.get(t, t) for t in types)
    return [(path, False, f"{_field(path)} must be {expected}, but it is {describe_value(error.instance)}"
                          f"{_hint(path, error.instance, types, positions)}")]


def _additional_properties(error: ValidationError, path: Path_, positions: Positions) -> Said:
    allowed = list(error.schema.get("properties", {}))
    quoted = ", ".join(f"'{k}'" for k in allowed)
    out: Said = []
    for extra in (k for k in error.instance if k not in allowed):
        guess = did_you_mean(extra, allowed)
        hint = f" — did you mean '{guess}'?" if guess else f"; the keys allowed are {quoted}"
        out.append((path + (extra,), True, f"unknown key '{extra}' in {_field(path)}{hint}"))
    return out


def _required(error: ValidationError, path: Path_, positions: Positions) -> Said:
    allowed = error.schema.get("properties", {})
    misspelt = {did_you_mean(k, allowed) for k in error.instance if k not in allowed}  # said as unknown keys
    return [(path, False, f"{_field(path)} needs '{name}' (add `{name}:`; see docs/harnesses.md)")
            for name in error.validator_value if name not in error.instance and name not in misspelt]


def _enum(error: ValidationError, path: Path_, positions: Positions) -> Said:
    options = [str(v) for v in error.validator_value]
    guess = did_you_mean(str(error.instance), options) if isinstance(error.instance, str) else None
    fix = f" — did you mean '{guess}'?" if guess else f"; write one of them, e.g. `{path[-1]}: {options[0]}`"
    return [(path, False, f"{_field(path)} must be {' or '.join(options)}, but it is "
                          f"{describe_value(error.instance)}{fix}")]


def _empty(error: ValidationError, path: Path_, positions: Positions) -> Said:
    if path == ("run",):
        return [(path, False, "'run' must name the program to run, e.g. [python, main.py]")]
    if path == ("files",):
        return [(path, False, "'files' must name at least one file to write, e.g. `main.py: |` and its "
                              "template on the lines below")]
    return [(path, False, f"{_field(path)} must not be empty")]


def _pattern(error: ValidationError, path: Path_, positions: Positions) -> Said:
    return [(path, False, f"{_field(path)} may only use letters, digits and _ . - and must start with a letter or "
                          f"digit, but it is {describe_value(error.instance)}")]


def _file_name(error: ValidationError, path: Path_, positions: Positions) -> Said:
    name = error.instance  # the key itself; the path is the mapping's
    return [(path + (name,), True, f"the file name '{name}' in 'files' must be a relative path inside the work "
                                   "folder: letters, digits and _ . / - only, not starting with '/', no '..'")]


def _bound(words: str) -> Callable[[ValidationError, Path_, Positions], Said]:
    def say(error: ValidationError, path: Path_, positions: Positions) -> Said:
        return [(path, False, f"{_field(path)} must be {words} {error.validator_value}, but it is "
                              f"{error.instance}")]
    return say


_WORDS: dict[str, Callable[[ValidationError, Path_, Positions], Said]] = {
    "type": _type,
    "additionalProperties": _additional_properties,
    "required": _required,
    "enum": _enum,
    "minLength": _empty,
    "minItems": _empty,
    "minProperties": _empty,
    "pattern": _pattern,
    "propertyNames": _file_name,
    "minimum": _bound("at least"),
    "exclusiveMinimum": _bound("more than"),
    "maximum": _bound("at most"),
}


def _said(error: ValidationError, path: Path_, positions: Positions) -> Said:
    return [(path, False, f"{_field(path)}: {error.message} (see schemas/harness.schema.json)")]


def validate(data: Any, positions: Positions, file: str) -> list[Diagnostic]:
    """Check a loaded harness file against schemas/harness.schema.json.

    Args:
        data: The loaded YAML value.
        positions: Where each value sits in the file (from `engine.base.yaml`).
        file: The file name for diagnostics.

    Returns:
        One diagnostic per problem, in file order, each pointing at the offending key or value.
    """
    return positions.diagnostics(file, (said for error in validator().iter_errors(data)
                                        for said in _words(error)(error, tuple(error.absolute_path), positions)))


def _words(error: ValidationError) -> Callable[[ValidationError, Path_, Positions], Said]:
    """The function that says `error`. Under `propertyNames` each key is checked as an instance of its own, so the
    failing keyword is the inner `pattern`; the key's error is said as a bad name."""
    keyword = "propertyNames" if "propertyNames" in error.relative_schema_path else str(error.validator)
    return _WORDS.get(keyword, _said)
