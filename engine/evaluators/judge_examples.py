"""A judge's calibration examples: answers an author has labelled with the grade the judge should give.

    judge:
      rubric: The answer mentions the 30-day limit.
      calibration:                       # or a file next to the suite: calibration: refunds.jsonl
        - {answer: "Returns within 30 days.", expect: pass}
        - {answer: "No refunds.", expect: fail, prompt: "Can I return it?"}
      min_agreement: 0.8                 # `engine validate --judges` fails under it

An example is `{answer, expect}` plus optional `prompt` (the question; default the test's) and `reference`
(default the judge's own). `expect` is a grade on the judge's scale: "pass"/"fail", a whole number on a
numeric scale, or one of the labels. A file is JSON Lines (one object per line), CSV (a header row naming
the columns) or YAML (a list of objects), resolved inside the suite's folder.

Problems are data (`(where, message)` pairs: the loader reports them at FILE:LINE:COL, a file's own
problems name the file and its line), so one reader serves the load-time check and `validate --judges`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.base.yaml import FileKind, load_yaml_text

__all__ = ["FILE_SUFFIXES", "Example", "coerce_expect", "read_calibration"]

FILE_SUFFIXES = (".jsonl", ".csv", ".yaml", ".yml")
_FIELDS = ("answer", "expect", "prompt", "reference", "note")

Problem = tuple[tuple[Any, ...], str]


@dataclass(frozen=True, slots=True)
class Example:
    """One labelled answer.

    Args:
        answer: The answer the judge grades.
        expect: The grade the author expects (on the judge's scale).
        prompt: The question, or None for the test's own.
        reference: The reference, or None for the judge's own.
        where: Where it was written ("calibration[2]" or "refunds.jsonl:3"), for reports.
        source: "calibration" (the judge's `calibration:`) or "labels" (a reviewer's label of a run's attempt,
            engine.analysis.label_examples).
    """

    answer: str
    expect: Any
    prompt: str | None = None
    reference: str | None = None
    where: str = ""
    source: str = "calibration"


def coerce_expect(value: Any, grades: Mapping[Any, float], numeric: bool) -> Any:
    """`value` as a grade of the scale (a numeric string becomes a number on numeric scales), or None."""
    if numeric and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and not numeric:
        value = value.strip()
        if value not in grades and value.lower() in grades:   # "Pass" in a spreadsheet means pass
            value = value.lower()
    if isinstance(value, bool) or value not in grades:
        return None
    return value


def read_calibration(value: Any, grades: Mapping[Any, float], numeric: bool,
                     suite_dir: Path) -> tuple[list[Example], list[Problem]]:
    """The examples of a `calibration:` value (a list, or a file name), and the problems found.

    Args:
        value: The option as written.
        grades: The judge scale's grades (expect must be one).
        numeric: The scale is numeric.
        suite_dir: Where a file name resolves.

    Returns:
        (examples that are fine, problems as (path under `calibration`, message)).
    """
    if isinstance(value, str):
        return _read_file(value, grades, numeric, suite_dir)
    if not isinstance(value, list) or not value:
        return [], [((), "calibration is a non-empty list of {answer, expect}, or a .jsonl/.csv/.yaml file "
                         "name next to the suite")]
    examples: list[Example] = []
    problems: list[Problem] = []
    for index, item in enumerate(value):
        outcome = _example(item, grades, numeric, f"calibration[{index}]")
        if isinstance(outcome, Example):
            examples.append(outcome)
        else:
            problems.append(((index, *outcome[0]), outcome[1]))
    return examples, problems


def _example(item: Any, grades: Mapping[Any, float], numeric: bool, where: str) -> Example | Problem:
    if not isinstance(item, Mapping):
        return (), f"a calibration example is a mapping {{answer, expect}}, got {type(item).__name__}"
    unknown = [k for k in item if k not in _FIELDS]
    if unknown:
        return (unknown[0],), f"unknown calibration field {unknown[0]!r}; use {', '.join(_FIELDS)}"
    answer = item.get("answer")
    if not isinstance(answer, str):
        return ("answer",), "a calibration example needs `answer:` (the text the judge grades)"
    if "expect" not in item:
        return ("expect",), "a calibration example needs `expect:` (the grade the judge should give)"
    expect = coerce_expect(item["expect"], grades, numeric)
    if expect is None:
        allowed = ", ".join(json.dumps(g) for g in grades)
        return ("expect",), f"expect {json.dumps(item['expect'], default=str)} is not on the judge's scale " \
                            f"({allowed})"
    texts = {k: item.get(k) for k in ("prompt", "reference")}
    for key, text in texts.items():
        if text is not None and not isinstance(text, str):
            return (key,), f"calibration `{key}` must be text"
    return Example(answer, expect, texts["prompt"], texts["reference"], where)


def _read_file(name: str, grades: Mapping[Any, float], numeric: bool,
               suite_dir: Path) -> tuple[list[Example], list[Problem]]:
    path = (suite_dir / name).resolve()
    if Path(name).suffix.lower() not in FILE_SUFFIXES:
        return [], [((), f"calibration file {name!r} must end in {', '.join(FILE_SUFFIXES)}")]
    if not path.is_file():
        return [], [((), f"calibration file {name!r} not found in {suite_dir}; the path is relative to the "
                         "suite file's folder")]
    try:
        rows = _rows(path)
    except (OSError, ValueError, csv.Error) as exc:
        return [], [((), f"calibration file {name}: cannot be read: {exc}")]
    examples: list[Example] = []
    problems: list[Problem] = []
    for label, item in rows:
        outcome = _example(item, grades, numeric, f"{name} {label}")
        if isinstance(outcome, Example):
            examples.append(outcome)
        else:
            field = f" `{outcome[0][0]}`" if outcome[0] else ""
            problems.append(((), f"{name} {label}:{field} {outcome[1]}"))
    if not rows:
        problems.append(((), f"calibration file {name} holds no examples"))
    return examples, problems


def _rows(path: Path) -> list[tuple[str, Any]]:
    """("line N" or "item N", object) per example; raises ValueError naming a line that does not parse."""
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((f"line {number}", json.loads(line)))
                except ValueError as exc:
                    raise ValueError(f"line {number} is not JSON ({exc})") from None
        return rows
    if suffix == ".csv":
        reader = csv.DictReader(text.splitlines())
        out = []
        for row in reader:
            fields = {k: v for k, v in row.items() if k is not None and v not in (None, "")}
            out.append((f"line {reader.line_num}", fields))
        return out
    loaded = load_yaml_text(text, path.name, kind=FileKind("calibration", "list the examples", ""))
    if loaded.diagnostics:
        raise ValueError(str(loaded.diagnostics[0]))
    data = loaded.data
    if not isinstance(data, list):
        raise ValueError("a YAML calibration file is a list of {answer, expect}")
    return [(f"item {index + 1}", item) for index, item in enumerate(data)]
