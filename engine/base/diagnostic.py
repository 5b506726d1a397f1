"""`Diagnostic`: one problem in an input file, printed gcc-style as FILE:LINE:COL: error: message.

It lives in `engine.base` (re-exported by `engine.errors`) because the YAML loader, which sits here so that
both the suite and the harness layers can use it, reports its problems as diagnostics.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Diagnostic"]


@dataclass(frozen=True)
class Diagnostic:
    """One problem in an input file, printed gcc-style.

    Args:
        file: Path of the file as the user named it.
        line: 1-based line number (0 when unknown).
        col: 1-based column number (0 when unknown).
        message: What is wrong and how to fix it, in plain words.
        severity: "error" or "warning".
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
