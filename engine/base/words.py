"""Small text helpers for messages, shared by every layer: the nearest spelling, a value cut to one line."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["did_you_mean", "short"]


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The closest of `choices` to `word`, or None when nothing is close."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def short(value: Any, limit: int = 60) -> str:
    """`repr` of a value cut to one readable line (long values end with an ellipsis)."""
    text = repr(value).replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."
