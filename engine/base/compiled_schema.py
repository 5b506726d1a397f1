"""jsonschema for the schemas users write (a tool's `parameters`, an inline `json_schema`), checked and compiled
once per distinct schema: both are kept by the schema's canonical JSON text, since a suite repeats a few of them
over many tests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator

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


def _validator_class(schema: Any) -> type[Validator]:
    """The validator of the draft `schema` names in `$schema`, else 2020-12."""
    if isinstance(schema, dict):
        return validators.validator_for(schema, default=Draft202012Validator)
    return Draft202012Validator


@lru_cache(maxsize=_KEPT)
def _error_of(text: str) -> SchemaError | None:
    schema = json.loads(text)
    try:
        _validator_class(schema).check_schema(schema)
    except SchemaError as exc:
        return exc
    return None


@lru_cache(maxsize=_KEPT)
def _validator_of(text: str) -> Validator:
    schema = json.loads(text)
    return _validator_class(schema)(schema)


def schema_error(schema: Any) -> SchemaError | None:
    """jsonschema's best error in `schema` against its draft's metaschema, or None when it is a valid schema."""
    return _error_of(_text(schema))


def schema_validator(schema: Any) -> Validator:
    """jsonschema's compiled validator for `schema` (the draft its `$schema` names, else 2020-12)."""
    return _validator_of(_text(schema))
