"""The memo key of a flat mapping: one whose values are all plain (text, numbers, booleans, null).

Suites repeat small flat mappings by the thousand (`eval: {contains: "{{ golden }}"}`); what is worked out from
one of them alone (its schema check, its resolution) can be remembered under this key. The key holds each
value's type, so `1`, `1.0` and `true`, equal in Python, are three keys.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PLAIN_TYPES", "FlatKey", "flat_key"]

FlatKey = tuple[tuple[Any, type, Any], ...]
#: The types of a plain YAML/JSON scalar: text, numbers, booleans, null.
PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})


def flat_key(value: Any) -> FlatKey | None:
    """(key, type, value) for each item of a flat dict, in order; None for anything else."""
    if type(value) is not dict:
        return None
    key = []
    for name, item in value.items():
        kind = type(item)
        if kind not in PLAIN_TYPES:
            return None
        key.append((name, kind, item))
    return tuple(key)
