"""Where a case row read by `cases_from:` came from, so a problem found later points at its file and row."""

from __future__ import annotations

from typing import NamedTuple

from engine.base.diagnostic import Diagnostic


class CaseOrigin(NamedTuple):
    """Where a case row came from, for messages (a NamedTuple: one is built per row, 3x cheaper than a dataclass).

    Args:
        file: The data file as named in messages (beside the suite's own name), or the dataset.
        line: 1-based line where the row starts; 0 for formats without lines (Parquet, JSON, datasets).
        row: 1-based data row number in that file.
        golden_col: The field number of the row's golden column (1 when unknown or none).
    """

    file: str
    line: int
    row: int
    golden_col: int = 1

    def diagnostic(self, message: str, col: int | None = None, severity: str = "error") -> Diagnostic:
        """A Diagnostic at this row: FILE:LINE:COL, or FILE with "row N:" where the format has no lines."""
        if self.line > 0:
            return Diagnostic(self.file, self.line, col or 1, message, severity)
        return Diagnostic(self.file, 0, 0, f"row {self.row}: {message}", severity)

    def describe(self) -> str:
        """"cases.csv line 118", or "cases.parquet row 5"."""
        return f"{self.file} line {self.line}" if self.line > 0 else f"{self.file} row {self.row}"
