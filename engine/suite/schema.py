"""JSON Schema validation with jsonschema, with every error mapped to FILE:LINE:COL and said in plain words.

The validators are compiled once per process. jsonschema's own messages ("is not valid under any of
the given schemas") are never shown: each error is rewritten from its keyword, the failing value and the
subschema's `title` (the schemas title the objects users write: "test", "contains evaluator", ...).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from engine.base.words import TYPE_WORDS, describe_value, did_you_mean
from engine.base.yaml import Positions
from engine.errors import Diagnostic
from engine.evaluators.base import COMMON_KEYS
from engine.paths import data_dir
from engine.redact import mask_url
from engine.suite.conversation import API_NAME_PATTERN

__all__ = ["SCHEMA_DIR", "describe_value", "did_you_mean", "load_schema", "validate", "validator"]

SCHEMA_DIR = data_dir("schemas")
_YES_NO = {"yes", "no", "on", "off", "y", "n"}


@cache
def load_schema(name: str) -> dict[str, Any]:
    """The parsed schemas/<name>.schema.json (`suite`, `models`, `harness`)."""
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))


@cache
def validator(name: str) -> Draft202012Validator:
    """A compiled validator for schemas/<name>.schema.json, built once per process."""
    return Draft202012Validator(load_schema(name))


def _yaml_text(value: Any) -> str:
    """A scalar as it would be written in the suite (`2`, `true`, `mentions the city`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, (int, float, str)) else "..."


@cache
def evaluator_kinds() -> tuple[str, ...]:
    """Every evaluator kind the suite schema knows, in catalogue order."""
    defs = load_schema("suite")["$defs"]
    return tuple(key[len("eval_"):] for key in defs if key.startswith("eval_"))


def _field(path: tuple[Any, ...]) -> str:
    """The name a person wrote for the thing at `path`: `max_tokens`, `tests[2]`, `contains[1]`."""
    if not path:
        return "the file"
    last = path[-1]
    if isinstance(last, int):
        parent = next((p for p in reversed(path[:-1]) if isinstance(p, str)), "item")
        return f"{parent}[{last}]"
    return str(last)


def _noun(error: ValidationError) -> str:
    title = error.schema.get("title") if isinstance(error.schema, dict) else None
    if title:
        return str(title)
    path = tuple(error.absolute_path)
    return f"'{_field(path)}'" if path else "the file"


def _expected(schema: Any) -> str:
    """What a schema accepts, in words: "text or a list of texts"."""
    if not isinstance(schema, dict):
        return "something else"
    if "enum" in schema:
        return "one of " + ", ".join(str(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "$ref" in schema:
        return "an evaluator (`contains: Paris`)" if schema["$ref"].endswith("/evaluator") else "a mapping"
    types = schema.get("type")
    if types is None and ("anyOf" in schema or "oneOf" in schema):
        return " or ".join(_expected(s) for s in schema.get("anyOf") or schema.get("oneOf") or [])
    if isinstance(types, str):
        types = [types]
    if not types:
        return "another kind of value"
    words = []
    for t in types:
        if t == "array" and isinstance(schema.get("items"), dict) and schema["items"].get("type") == "string":
            words.append("a list of texts")
        else:
            words.append(TYPE_WORDS.get(t, t))
    return " or ".join(words)


def _required_only(branches: Any) -> list[str] | None:
    """For oneOf/anyOf branches that only say `required: [x]`, the names x; else None."""
    names = []
    for branch in branches or ():
        if not isinstance(branch, dict) or set(branch) != {"required"} or len(branch["required"]) != 1:
            return None
        names.append(branch["required"][0])
    return names


def _quote_list(names: Iterable[str], last: str = ",") -> str:
    """`'a', 'b', 'c'`, or with last="or": `'a', 'b' or 'c'`."""
    quoted = [f"'{n}'" for n in names]
    if last == "," or len(quoted) < 2:
        return ", ".join(quoted)
    return ", ".join(quoted[:-1]) + f" {last} " + quoted[-1]


class _Mapper:
    """Rewrites one jsonschema error as (path, on_key, message) items."""

    def __init__(self, positions: Positions) -> None:
        self.positions = positions

    def messages(self, error: ValidationError) -> list[tuple[tuple[Any, ...], bool, str]]:
        path = tuple(error.absolute_path)
        handler = getattr(self, "_" + str(error.validator), None)
        if handler is not None:
            result = handler(error, path)
            if result is not None:
                return result  # [] means: another error at this place says it better
        return [(path, False, f"{_field(path)}: {error.message}")]

    # -- keyword handlers -------------------------------------------------------------------------------
    def _additionalProperties(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        schema, instance = error.schema, error.instance
        if not isinstance(instance, dict):
            return []
        allowed = list(schema.get("properties", {}))
        extras = [k for k in instance if k not in allowed]
        title = str(schema.get("title", ""))
        kinds = evaluator_kinds()
        out = []
        if title.endswith(" evaluator"):
            kind = title[: -len(" evaluator")]
            other_kinds = [k for k in extras if k in kinds]
            if other_kinds:
                both = sorted([kind, *other_kinds])
                kinds_text = _quote_list(both, "and")
                out.append((path, False, (f"an evaluator has exactly one kind, but this one has {kinds_text}; "
                                         f"to use several, list them under `all:` (all must pass) or `any:`")))
            for extra in (k for k in extras if k not in kinds):
                guess = did_you_mean(extra, allowed)
                hint = f" — did you mean '{guess}'?" if guess else f"; its options are {_quote_list(allowed)}"
                out.append((path + (extra,), True, f"unknown option '{extra}' for the {kind} evaluator{hint}"))
            return out
        if "additionalProperties" in schema and schema["additionalProperties"] is not False:
            return []
        noun = title or _field(path)
        holder = path[-1] if not title and path and path[-1] in kinds else None  # the kind whose value this is
        for extra in extras:
            guess = did_you_mean(extra, allowed)
            if holder is not None and extra in COMMON_KEYS:  # `{json_field: {path: x, weight: 2}}`
                example = f"{extra}: {_yaml_text(instance[extra])}"
                out.append((path + (extra,), True, (
                    f"'{extra}' is an option of the whole evaluator, so it goes beside `{holder}:`, not inside "
                    f"it: write `{{{holder}: {{...}}, {example}}}`")))
                continue
            if guess:
                hint = f" — did you mean '{guess}'?"
            elif title == "test" and extra in kinds:
                hint = f"; an evaluator goes under `eval:`, e.g. `eval: {{{extra}: ...}}`"
            else:
                hint = f"; the keys allowed here are {_quote_list(allowed)}"
            out.append((path + (extra,), True, f"unknown key '{extra}' in {_article(noun)}{hint}"))
        return out

    def _not(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any] | None:
        schema, instance = error.schema, error.instance
        if schema.get("title") == "evaluator" and isinstance(instance, dict):
            kinds = evaluator_kinds()
            unknown = [k for k in instance if k not in COMMON_KEYS]
            if not unknown:
                return [(path, False, ("this evaluator has options but no kind; add one, e.g. `contains: Paris` "
                                      f"(kinds: {', '.join(kinds)})"))]
            out = []
            for key in unknown:
                guess = did_you_mean(key, kinds)
                hint = f" — did you mean '{guess}'?" if guess else f"; the kinds are {', '.join(kinds)}"
                out.append((path + (key,), True, f"unknown evaluator '{key}'{hint}"))
            return out
        if schema.get("title") == "evaluator":
            return []  # not a mapping: the type error explains it
        return None

    def _anyOf(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        return self._one_of_names(error, path, error.schema.get("anyOf"), exactly=False)

    def _oneOf(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        return self._one_of_names(error, path, error.schema.get("oneOf"), exactly=True)

    def _one_of_names(self, error: ValidationError, path: tuple[Any, ...], branches: Any,
                      exactly: bool) -> list[Any]:
        names = _required_only(branches)
        instance = error.instance
        if names is not None and isinstance(instance, dict):
            if _misspelt(instance, names, error.schema):
                return []
            present = [n for n in names if n in instance]
            noun = _noun(error)
            if len(present) > 1 and exactly:
                return [(path, False, f"{_article(noun)} takes only one of {_quote_list(present, 'or')}; keep one")]
            return [(path, False, f"{_article(noun)} needs {_quote_list(names, 'or')}"
                                  + (" (only one of them)" if exactly and len(names) > 2 else ""))]
        return [(path, False, (f"'{_field(path)}' must be {_expected(error.schema)}, "
                              f"but it is {describe_value(instance)}{self._hint(path, instance, error.schema)}"))]

    def _required(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        instance = error.instance
        if not isinstance(instance, dict):
            return []
        missing = [k for k in error.validator_value if k not in instance and not _misspelt(instance, [k], error.schema)]
        noun = _noun(error)
        return [(path, False, f"{_article(noun)} needs '{name}'"
                 + ("" if noun == "the file" else f" (add `{name}:`)")) for name in missing]

    def _type(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        instance, schema = error.instance, error.schema
        title = schema.get("title")
        expected = _expected({"type": error.validator_value, "items": schema.get("items")})
        if title in ("evaluator", "test", "message", "case row", "tool", "model") or (
                title and str(title).endswith(" evaluator")):
            return [(path, False, (f"{_article(str(title))} must be {expected}, but it is {describe_value(instance)}"
                                  f"{self._hint(path, instance, schema)}"))]
        return [(path, False, (f"'{_field(path)}' must be {expected}, but it is {describe_value(instance)}"
                              f"{self._hint(path, instance, schema)}"))]

    def _hint(self, path: tuple[Any, ...], instance: Any, schema: dict[str, Any]) -> str:
        """The YAML trap behind a type error, if one fits."""
        types = schema.get("type")
        types = [types] if isinstance(types, str) else (types or [])
        raw = self.positions.raw.get(path)
        if instance is None:
            return "; a value is missing after the ':'"
        if isinstance(instance, str) and "boolean" in types and instance.lower() in _YES_NO:
            return f"; write true or false (YAML 1.2 reads '{instance}' as text)"
        if raw is not None and "string" in types and not isinstance(instance, str):
            return f"; YAML read {raw} as {describe_value(instance)}: put it in quotes, '{raw}', to keep it as text"
        if isinstance(instance, str) and "array" in types:
            return f"; write a list, e.g. [{instance}]"
        if isinstance(instance, str) and ("integer" in types or "number" in types):
            return "; write the number without quotes"
        if instance is None:
            return "; a value is missing after the ':'"
        return ""

    def _enum(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        options = [str(v) for v in error.validator_value]
        guess = did_you_mean(str(error.instance), options) if isinstance(error.instance, str) else None
        hint = f" — did you mean '{guess}'?" if guess else ""
        return [(path, False, (f"'{_field(path)}' must be one of {', '.join(options)}, "
                              f"but it is {describe_value(error.instance)}{hint}"))]

    def _const(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        want = json.dumps(error.validator_value)
        return [(path, False, (f"'{_field(path)}' must be {want}, but it is {describe_value(error.instance)}"
                              f"{self._hint(path, error.instance, {'type': 'boolean'})}"))]

    def _bound(self, error: ValidationError, path: tuple[Any, ...], words: str) -> list[Any]:
        return [(path, False, (f"'{_field(path)}' must be {words} {error.validator_value}, "
                              f"but it is {error.instance}"))]

    def _minimum(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        return self._bound(error, path, "at least")

    def _maximum(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        return self._bound(error, path, "at most")

    def _exclusiveMinimum(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        return self._bound(error, path, "more than")

    def _minItems(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        return [(path, False, (f"'{_field(path)}' must list at least {error.validator_value} "
                              f"item{'s' if error.validator_value != 1 else ''}, but it is empty"))]

    def _maxItems(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        return [(path, False, f"'{_field(path)}' may list at most {error.validator_value} items")]

    def _minProperties(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        props = list(error.schema.get("properties", {}))
        if props and error.schema.get("title") != "evaluator":
            return [(path, False, f"'{_field(path)}' needs at least one of {_quote_list(props)}")]
        return [(path, False, f"'{_field(path)}' must not be empty")]

    def _minLength(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        return [(path, False, f"'{_field(path)}' must not be empty")]

    def _pattern(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        name = _field(path)
        if name == "api_key_env":  # the value may be a pasted secret: never repeat it
            return [(path, False, ("'api_key_env' must be the NAME of an environment variable that holds the key "
                                  "(e.g. OPENAI_API_KEY), not the key itself"))]
        if name == "flags":
            return [(path, False, (f"'flags' may only use the letters i, m, s, x, but it is "
                                  f"{describe_value(error.instance)}"))]
        if name == "base_url" or name.startswith("base_urls["):   # shown with its userinfo and query values masked
            shown = mask_url(error.instance) if isinstance(error.instance, str) else error.instance
            return [(path, False, (f"'{name}' must start with http:// or https://, but it is "
                                  f"{describe_value(shown)}"))]
        if isinstance(error.instance, str) and error.schema.get("pattern") == API_NAME_PATTERN:
            return [(path, False, (f"'{name}' (the tool's name for the API) may only use letters, digits, _ and -, "
                                  f"at most 64, but it is {describe_value(error.instance)}"))]
        if isinstance(error.instance, str) and error.schema.get("pattern", "").startswith("^[A-Za-z"):
            return [(path, False, (f"'{name}' may only use letters, digits and _ . - (no spaces), but it is "
                                  f"{describe_value(error.instance)}"))]
        return []

    def _propertyNames(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        bad = error.instance
        return [(path + (bad,), True, (f"the name '{bad}' in '{_field(path)}' may only use letters, digits and "
                                      "_ . - and must start with a letter or _"))]

    def _false(self, error: ValidationError, path: tuple[Any, ...]) -> list[Any]:
        return [(path, False, f"'{_field(path)}' is not allowed here")]


def _misspelt(instance: dict[str, Any], names: list[str], schema: dict[str, Any]) -> bool:
    """True when a key of `instance` is a misspelling of one of `names` that the unknown-key error names."""
    if schema.get("additionalProperties") is not False:
        return False
    allowed = schema.get("properties", {})
    return any(key not in allowed and did_you_mean(key, allowed) in names for key in instance)


def _article(noun: str) -> str:
    if noun.startswith(("'", "the ")):
        return noun
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def validate(data: Any, positions: Positions, file: str, schema_name: str = "suite") -> list[Diagnostic]:
    """Validate `data` against schemas/<schema_name>.schema.json.

    Args:
        data: The loaded YAML value.
        positions: Where each value sits in the file.
        file: The file name for diagnostics.
        schema_name: `suite` or `models`.

    Returns:
        One diagnostic per problem, in file order, each pointing at the offending key or value.
    """
    mapper = _Mapper(positions)
    return positions.diagnostics(file, (said for error in validator(schema_name).iter_errors(data)
                                        for said in mapper.messages(error)))
