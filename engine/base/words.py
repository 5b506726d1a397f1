"""Small text helpers for messages, shared by every layer: the nearest spelling, a value cut to one line, a
YAML value and a JSON Schema type in words."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["TYPE_WORDS", "describe_value", "did_you_mean", "short"]

# JSON Schema types as a person writing YAML knows them.
TYPE_WORDS = {"string": "text", "integer": "a whole number", "number": "a number", "boolean": "true or false",
              "array": "a list", "object": "a mapping (key: value lines)", "null": "empty"}


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The closest of `choices` to `word`, or None when nothing is near: a typo or a missing suffix
    (`containz`, `latency` -> `latency_s`), or the same letters swapped (`nto` -> `not`); never a word that
    merely shares a few letters (`latency` is not `any`)."""
    options = list(choices)
    found = difflib.get_close_matches(word, options, n=1, cutoff=0.75)
    if found:
        return found[0]
    swapped = [choice for choice in options if len(choice) == len(word) and sorted(choice) == sorted(word)]
    return swapped[0] if swapped else None


def short(value: Any, limit: int = 60) -> str:
    """`repr` of a value cut to one readable line (long values end with an ellipsis)."""
    text = repr(value).replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_value(value: Any) -> str:
    """A short description of a YAML value for messages: "the text 'abc'", "the number 3", "a list"."""
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the text '{shown}'"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
