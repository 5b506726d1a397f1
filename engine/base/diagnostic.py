"""`Diagnostic`: one problem in an input file, printed gcc-style as FILE:LINE:COL: error: message.

It lives in `engine.base` (re-exported by `engine.errors`) because the YAML loader, which sits here so that
both the suite and the harness layers can use it, reports its problems as diagnostics. `Problem` is the step
before: a problem at a path inside a loaded value (a tools entry, a workspace block), which the suite layer
turns into a Diagnostic once it knows the path's FILE:LINE:COL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Diagnostic", "Path", "Problem", "unknown_keys"]

# Keys and indices from a value's root to a place in it, e.g. ("tools", "get_weather", "returns", 1).
Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Diagnostic:
    """One problem in an input file, printed gcc-style.

    Args:
        file: Path of the file as the user named it.
        line: 1-based line number (0 when unknown).
        col: 1-based column number (0 when unknown).
        message: What is wrong and how to fix it, in plain words.
        severity: "error", "warning" (worth a look, not wrong) or "note" (a fact about how the file will run).
    """

    file: str
    line: int
    col: int
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        if self.line <= 0:  # about the file as a whole (gcc prints no position then either)
            return f"{self.file}: {self.severity}: {self.message}"
        return f"{self.file}:{self.line}:{self.col}: {self.severity}: {self.message}"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong inside a loaded value (a tool's spec, a workspace block).

    Args:
        path: Keys and indices from the value's root to the bad value, e.g. `("tools", "get_weather",
            "returns", 1, "delay_s")`.
        message: What is wrong and how to fix it.
        key: True when the problem is the key at `path` itself (an unknown key), not its value.
    """

    path: Path
    message: str
    key: bool = False


def unknown_keys(value: Mapping[Any, Any], keys: Sequence[str], path: Path, where: str) -> list[Problem]:
    """A problem at each key of `value` outside `keys`, naming `where` it was found and the keys there are."""
    return [Problem(path + (str(key),), f"unknown key '{key}' in {where}; the keys are {', '.join(keys)}", key=True)
            for key in value if key not in keys]
