"""Folds of the terminal analysis: what a table can leave out by default without losing information.

`engine analyze` (table and markdown formats) folds each table to what its data can say; every fold says in
one line what it left out and how to see it (`--full` shows everything; the JSON and CSV formats are never
folded). The folds, defined in docs/analysis.md ("Folded output"):

    fold_rows(rows, ...)           a per-test list past FOLD_ROWS rows: the first FOLD_ROWS, "… N more"
    drop_zero_columns(...)         columns that are zero in every row (errors, truncated, stuck ...)
    hoist_common_text(rows, ...)   a text column whose every cell starts and ends with the same words: said once
    fold_passk(passk)              pass@k rows: k = 1 (the pass rate), per-suite rows equal to the (all)
                                   row, and runs of k whose figures are the same merged into one row
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from engine.analysis.passk import ALL_SUITES

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FOLD_ROWS", "drop_zero_columns", "fold_passk", "fold_rows", "hoist_common_text", "k_label"]

#: Rows a per-test list shows by default. A list only a couple of rows longer is shown whole (a fold that
#: hides one or two rows saves nothing and costs a line).
FOLD_ROWS = 10
_SLACK = 2
#: A cell that shows zero: 0, 0.0, 0%, 0.0%, and the "0 (0.0%)" of the agents table.
_ZERO = re.compile(r"0(\.0+)?%?( \(0(\.0+)?%\))?")
SEE_ALL = "--full shows them"
_CLAUSE_END = (")", ";", ":")


Rows = TypeVar("Rows", list[list[str]], "pd.DataFrame")


def fold_rows(rows: Rows, what: str, *, full: bool, limit: int = FOLD_ROWS,
              how: str = SEE_ALL) -> tuple[Rows, str]:
    """The first `limit` rows of a long list, and the line saying how many were left out.

    Args:
        rows: The table's rows, in the order shown: their cells, or a frame whose display rows are built after
            the fold (only for the rows kept).
        what: What a row is, plural ("uninformative tests").
        full: Show every row (no fold).
        limit: Rows kept.
        how: How to see the rest.

    Returns:
        (rows kept, the fold line or "" when nothing was left out).
    """
    if full or len(rows) <= limit + _SLACK:
        return rows, ""
    return rows[:limit], f"… {len(rows) - limit} more {what}: {how}"


def drop_zero_columns(header: list[str], rows: list[list[str]], *, full: bool,
                      keep: Iterable[str] = ()) -> tuple[list[str], list[list[str]], str]:
    """Leave out the columns whose every cell shows zero (an all-zero column says one fact: write it once).

    Args:
        header: Column names.
        rows: The cells, as shown.
        full: Keep every column.
        keep: Columns never left out (the row keys).

    Returns:
        (header, rows, the fold line or "" when no column was left out).
    """
    kept = set(keep)
    zero = [not full and bool(rows) and name not in kept and all(_ZERO.fullmatch(r[i].strip()) for r in rows)
            for i, name in enumerate(header)]
    if not any(zero):
        return header, rows, ""
    names = [name for name, z in zip(header, zero, strict=True) if z]
    line = f"0 in every row, so not shown: {', '.join(names)} ({SEE_ALL})"
    return ([n for n, z in zip(header, zero, strict=True) if not z],
            [[c for c, z in zip(r, zero, strict=True) if not z] for r in rows], line)


def hoist_common_text(header: list[str], rows: list[list[str]], column: int, *, full: bool,
                      min_words: int = 3) -> tuple[list[str], list[list[str]], str]:
    """Say once the words every cell of a text column starts or ends with; the cells keep what differs
    (and the column goes when nothing differs).

    Args:
        header: Column names.
        rows: The cells, as shown.
        column: The text column's index.
        full: Leave the cells whole.
        min_words: Shortest shared start or end worth hoisting.

    Returns:
        (header, rows, the fold line or "" when nothing was hoisted).
    """
    name = header[column]
    if full or len(rows) < 2:
        return header, rows, ""
    words = [r[column].split(" ") for r in rows]
    shortest = min(len(w) for w in words)
    head = 0
    while head < shortest and len({tuple(w[: head + 1]) for w in words}) == 1:
        head += 1
    tail = 0
    while tail < shortest - head and len({tuple(w[len(w) - tail - 1:]) for w in words}) == 1:
        tail += 1
    # Cut only between clauses, so a figure's parenthesis is never split: a shared start ends a clause (its
    # last word ends in ) ; or : or the next word opens a parenthesis); a shared end starts one likewise.
    first = words[0]
    while 0 < head < len(first) and not (first[head - 1].endswith(_CLAUSE_END) or first[head].startswith("(")):
        head -= 1
    while 0 < tail < len(first) and not (first[-tail - 1].endswith(_CLAUSE_END) or first[-tail].startswith("(")):
        tail -= 1
    head = head if head >= min_words else 0
    tail = tail if tail >= min_words else 0
    if not head and not tail:
        return header, rows, ""
    shared = (" ".join(words[0][:head]) + " " if head else "") + "…" + (
        " " + " ".join(words[0][len(words[0]) - tail:]) if tail else "")
    middles = [" ".join(w[head:len(w) - tail]).strip(" ;:,") for w in words]
    line = f"{name}, in every row: \"{shared}\" (said once here; {SEE_ALL} whole)"
    if not any(middles):
        return ([n for i, n in enumerate(header) if i != column],
                [[c for i, c in enumerate(r) if i != column] for r in rows], line.replace(" …", "", 1))
    return header, [[*r[:column], m or "-", *r[column + 1:]] for r, m in zip(rows, middles, strict=True)], line


_ESTIMATES = ("tests", "pass_at_k", "pass_at_k_lo", "pass_at_k_hi", "pass_hat_k", "pass_hat_k_lo", "pass_hat_k_hi")
_FIGURES = ("tests", "cells_short", "pass_at_k", "pass_at_k_lo", "pass_at_k_hi", "pass_hat_k", "pass_hat_k_lo",
            "pass_hat_k_hi")


def _same(a: pd.Series, b: pd.Series, figures: Sequence[str] = _FIGURES) -> bool:
    """The figures of two pass@k rows agree (to the 3 decimals shown; NaN equals NaN)."""
    for name in figures:
        x, y = a[name], b[name]
        if x != x and y != y:      # both NaN
            continue
        if x != x or y != y or round(float(x), 3) != round(float(y), 3):
            return False
    return True


def k_label(ks: Sequence[int]) -> str:
    """The k column of a merged row: "5" for one k, "2–5" for a run of them."""
    return str(ks[0]) if len(ks) == 1 else f"{ks[0]}–{ks[-1]}"


def fold_passk(passk: pd.DataFrame, *, full: bool) -> tuple[pd.DataFrame, str]:
    """The pass@k rows the data can say something with, and the line saying what was left out.

    Left out by default: k = 1 (pass@1 = pass^1 = the Models table's pass rate), a suite's row that has the
    same figures as its model's "(all)" row at that k (one suite held every repeated test), and of a run of
    consecutive k with the same figures (attempts that all agree) every row but one, whose k column then
    reads "2–5".

    Args:
        passk: `pass_k_table` output (sorted by model, suite, k).
        full: Keep every row (the k column still a string).

    Returns:
        (rows with `k` as display text, the fold line or "").
    """
    out = passk.copy()
    out["k"] = out["k"].astype(int).astype(str)
    if full or out.empty:
        return out, ""
    frame = passk.reset_index(drop=True)
    one = frame["k"] == 1
    overall = {(r.model, r.k): i for i, r in enumerate(frame.itertuples()) if r.suite == ALL_SUITES}
    # A suite's row over the same tests as its (all) row (one suite held every repeated test) repeats it; only
    # `cells_short` differs, counted over a different set of tests.
    duplicate = [r.k != 1 and r.suite != ALL_SUITES and (r.model, r.k) in overall
                 and _same(frame.iloc[overall[(r.model, r.k)]], frame.iloc[i], _ESTIMATES)
                 for i, r in enumerate(frame.itertuples())]
    left = frame[~one & ~frame.index.isin([i for i, d in enumerate(duplicate) if d])]
    rows, merged = [], 0
    for _, group in left.groupby(["model", "suite"], sort=False):
        run: list[int] = []
        for index in group.index:
            if run and _same(frame.loc[run[-1]], frame.loc[index]):
                run.append(index)
                continue
            if run:
                rows.append((run, frame.loc[run[0]]))
            run = [index]
        if run:
            rows.append((run, frame.loc[run[0]]))
    kept = []
    for run, first in rows:
        record = first.copy()
        record["k"] = k_label([int(frame.loc[i, "k"]) for i in run])
        merged += len(run) - 1
        kept.append(record)
    import pandas as pd

    shown = pd.DataFrame(kept, columns=passk.columns) if kept else passk.iloc[0:0].astype({"k": str})
    parts = []
    if one.sum():
        parts.append(f"{int(one.sum())} at k = 1 (the pass rate)")
    if sum(duplicate):
        parts.append(f"{sum(duplicate)} per suite over the same tests as (all)")
    if merged:
        parts.append(f"{merged} merged into k = a–b (the same figures at each k)")
    line = f"pass@k rows not shown ({SEE_ALL}): {'; '.join(parts)}" if parts else ""
    return shown.reset_index(drop=True), line
