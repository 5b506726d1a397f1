"""docs/results.md names the columns and their struct fields as the rows have them (engine/results/schema.py is
the definition), and no doc names a field of `tool_events`, `ledger` or `transcript` that rows do not have."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from engine.results.schema import SCHEMA

DOCS = Path(__file__).resolve().parents[2] / "docs"
RESULTS = (DOCS / "results.md").read_text(encoding="utf-8")
TABLE = RESULTS.split("## Columns", 1)[1].split("\n\n", 2)[1]
ROWS = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in TABLE.splitlines()[2:]]


def _fields(kind: pa.DataType) -> list[str]:
    return [kind.field(i).name for i in range(kind.num_fields)]


def _struct_text(text: str) -> dict[str, str | None]:
    """`{a, b, c: list<struct{x, y}>}` -> {a: None, b: None, c: "x, y"}, splitting at the top level only."""
    fields: dict[str, str | None] = {}
    depth, start = 0, 0
    for i, char in enumerate(text + ","):
        depth += char == "{"
        depth -= char == "}"
        if char == "," and depth == 0:
            item = text[start:i].strip()
            name, _, inner = item.partition(":")
            nested = re.search(r"list<struct\{(.*)\}>", inner)
            fields[name.strip()] = nested.group(1) if nested else None
            start = i + 1
    return fields


def test_every_column_is_in_the_table_and_every_name_there_is_a_column() -> None:
    documented = [name.strip() for row in ROWS for name in row[0].split(",")]
    assert sorted(documented) == sorted(SCHEMA.names)


def test_the_struct_fields_are_named_as_rows_have_them() -> None:
    checked = 0
    for row in ROWS:
        found = re.fullmatch(r"list<struct\{(.*)\}>", row[1])
        if not found:
            continue
        kind = SCHEMA.field(row[0]).type.value_type
        fields = _struct_text(found.group(1))
        assert list(fields) == _fields(kind), row[0]
        for name, nested in fields.items():
            if nested is not None:
                assert list(_struct_text(nested)) == _fields(kind.field(name).type.value_type), (row[0], name)
        checked += 1
    assert checked == 5   # tool_calls, evaluators, transcript, ledger, tool_events


def test_no_doc_names_an_agent_field_rows_do_not_have() -> None:
    fields = {name: set(_fields(SCHEMA.field(name).type.value_type)) for name in ("tool_events", "ledger",
                                                                                  "transcript")}
    wrong = []
    for doc in sorted(DOCS.glob("*.md")):
        text = doc.read_text(encoding="utf-8")
        for column, field in re.findall(r"(tool_events|ledger|transcript)\[\]\.(\w+)", text):
            if field not in fields[column]:
                wrong.append(f"{doc.name}: {column}[].{field}")
    assert not wrong
