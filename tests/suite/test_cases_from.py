"""`cases_from:` files (engine/suite/cases_from.py): rows become exactly the Tests inline `cases:` would make,
and every problem in the data points at FILE:LINE:COL of the row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from engine.model.test import Test
from engine.suite import load_suites
from tests.engine_proc import run_engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cases_from"

TEST = """  - id: {id}
    prompt: "Q: {{{{ question }}}}"
    eval: {{equals: "{{{{ golden }}}}"}}
"""


def load(tmp_path: Path, body: str, *, golden_check: bool = True, name: str = "s.yaml") -> tuple[list[Test], list[str]]:
    path = tmp_path / name
    path.write_text(f"suite: s\ntests:\n{body}", encoding="utf-8")
    suites, diagnostics = load_suites([path], golden_check=golden_check)
    tests = [t for s in suites for t in s.tests]
    return tests, [str(d).replace(str(tmp_path) + "/", "") for d in diagnostics]


def test_csv_rows_make_the_same_tests_as_inline_cases(tmp_path: Path) -> None:
    """Quoting, doubled quotes, a line break in a field and non-ASCII text survive; Tests and hashes are equal."""
    shutil.copy(FIXTURES / "capitals.csv", tmp_path)
    from_file, problems = load(tmp_path, TEST.format(id="'{{ id }}'") + "    cases_from: capitals.csv\n")
    assert problems == []
    inline_rows = [{"id": "cap-fr", "question": 'Capital of France, "the" city?', "golden": "Paris"},
                   {"id": "cap-jp", "question": "Capital of Japan —\nthe eastern one?", "golden": "東京"},
                   {"id": "cap-is", "question": "Capital of Iceland?", "golden": "Reykjavík"}]
    inline, problems = load(tmp_path, TEST.format(id="'{{ id }}'") + "    cases: " + json.dumps(inline_rows) + "\n",
                            name="inline.yaml")
    assert problems == []
    assert [t.id for t in from_file] == ["cap-fr", "cap-jp", "cap-is"]
    assert from_file[1].messages[-1]["content"] == "Q: Capital of Japan —\nthe eastern one?"
    assert [t.hash for t in from_file] == [t.hash for t in inline]
    # Test equality covers everything but the file name of the suite (the two suites are two files).
    assert [t for t in from_file] == [_renamed(t, from_file[0].file) for t in inline]
    origin = from_file[1].case_origin
    assert origin is not None and (origin.line, origin.row, origin.golden_col) == (3, 2, 3)


def _renamed(test: Test, file: str) -> Test:
    from dataclasses import replace

    return replace(test, file=file)


def test_a_plain_id_numbers_rows_like_inline_cases(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "capitals.csv", tmp_path)
    tests, _ = load(tmp_path, TEST.format(id="cap") + "    cases_from: {file: capitals.csv}\n")
    assert [(t.id, t.case_index) for t in tests] == [("cap[0]", 0), ("cap[1]", 1), ("cap[2]", 2)]


def test_short_and_long_rows_point_at_line_and_field(tmp_path: Path) -> None:
    (tmp_path / "cases.csv").write_text('id,question,golden\n1,"two\nlines",a\n2,short\n3,x,y,extra\n4,ok,b\n',
                                        encoding="utf-8")
    tests, problems = load(tmp_path, TEST.format(id="q-{{ id }}") + "    cases_from: cases.csv\n")
    assert tests == []
    assert problems[0].startswith("cases.csv:4:3: error: this row has 2 fields but the header has 3: no value for "
                                  "'golden'; ")
    assert problems[1].startswith("cases.csv:5:4: error: this row has 4 fields but the header has 3: field 4 "
                                  "('extra') has no column; ")
    assert len(problems) == 2   # each bad row once, though the expander reads the file twice


def test_jsonl_malformed_line_and_non_object(tmp_path: Path) -> None:
    (tmp_path / "c.jsonl").write_text('{"id": 1, "question": "a", "golden": "a"}\n\n{"id": 2, "question": }\n'
                                      '[1, 2]\n', encoding="utf-8")
    _, problems = load(tmp_path, TEST.format(id="q-{{ id }}") + "    cases_from: c.jsonl\n")
    assert problems[0].startswith("c.jsonl:3:23: error: this line is not valid JSON (Expecting value); ")
    assert problems[1].startswith("c.jsonl:4:1: error: this line is a JSON list, not an object; ")


def test_edgejson_csv_and_jsonl_give_equal_tests_with_json_goldens(tmp_path: Path) -> None:
    """Real rows (EdgeJSON, see the fixtures' README): a JSON-text golden cell becomes the object the JSONL holds."""
    shutil.copy(FIXTURES / "edgejson.csv", tmp_path)
    shutil.copy(FIXTURES / "edgejson.jsonl", tmp_path)
    body = "  - id: '{{ id }}'\n    prompt: '{{ prompt }}'\n    eval: {is_json: true}\n    cases_from: edgejson.%s\n"
    from_csv, problems = load(tmp_path, body % "csv")
    assert problems == []
    from_jsonl, problems = load(tmp_path, body % "jsonl", name="j.yaml")
    assert problems == []
    assert len(from_csv) == 6 and isinstance(from_csv[0].golden, dict)
    assert [t.golden for t in from_csv] == [t.golden for t in from_jsonl]
    assert [t.hash for t in from_csv] == [t.hash for t in from_jsonl]
    assert "\n" in from_csv[0].prompt


def test_json_columns_are_decoded_and_a_bad_cell_points_at_it(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text('id,question,golden\n1,a,"[1, 2]"\n2,b,{not json\n', encoding="utf-8")
    tests, problems = load(tmp_path, TEST.format(id="q-{{ id }}") + "    cases_from: c.csv\n", golden_check=False)
    assert [t.golden for t in tests] == [[1, 2], "{not json"]   # only a cell that parses becomes JSON
    _, problems = load(tmp_path, TEST.format(id="q-{{ id }}") + "    cases_from: {file: c.csv, json: [golden]}\n",
                       golden_check=False)
    assert problems[0].startswith("c.csv:3:3: error: the 'golden' cell is not valid JSON (")
    tests, problems = load(tmp_path, TEST.format(id="q-{{ id }}") + "    cases_from: {file: c.csv, json: []}\n",
                           golden_check=False)
    assert [t.golden for t in tests] == ["[1, 2]", "{not json"]   # `json: []`: every cell stays text


def test_parquet_keeps_types_and_equals_inline(tmp_path: Path) -> None:
    table = pa.table({"a": [2, 10], "b": [3, -4], "golden": [5, 6]})
    pq.write_table(table, tmp_path / "sums.parquet", row_group_size=1)   # two row groups: two batches
    body = "  - id: add-{{ a }}-{{ b }}\n    prompt: '{{ a }} + {{ b }}?'\n    eval: {contains: '5'}\n"
    from_file, problems = load(tmp_path, body + "    cases_from: sums.parquet\n")
    assert problems == ["sums.parquet: error: row 2: test 'add-10--4' (defined at s.yaml:3): the golden answer "
                        "scores 0.00, below the threshold 1: " + problems[0].split("threshold 1: ")[1]]
    (tmp_path / "s.yaml").unlink()
    inline, _ = load(tmp_path, body + "    cases: [{a: 2, b: 3, golden: 5}, {a: 10, b: -4, golden: 6}]\n",
                     golden_check=False, name="s2.yaml")
    from_file, _ = load(tmp_path, body + "    cases_from: sums.parquet\n", golden_check=False)
    assert [t.hash for t in from_file] == [t.hash for t in inline]
    assert from_file[0].variables["a"] == 2   # an int, as in YAML


def test_a_folder_reads_every_case_file_in_name_order(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    (folder / "b.csv").write_text("id,question,golden\nb1,q,g\n", encoding="utf-8")
    (folder / "a.jsonl").write_text('{"id": "a1", "question": "q", "golden": "g"}\n', encoding="utf-8")
    (folder / "sub" / "c.tsv").write_text("id\tquestion\tgolden\nc1\tq\tg\n", encoding="utf-8")
    (folder / "notes.txt").write_text("not a case file", encoding="utf-8")
    (folder / ".hidden.csv").write_text("junk", encoding="utf-8")
    tests, problems = load(tmp_path, TEST.format(id="'{{ id }}'") + "    cases_from: data\n", golden_check=False)
    assert problems == []
    assert [t.id for t in tests] == ["a1", "b1", "c1"]
    assert tests[2].case_origin is not None and tests[2].case_origin.file == str(tmp_path / "data/sub/c.tsv")


def test_columns_filter_limit_and_sample(tmp_path: Path) -> None:
    lines = ["n,level,text"] + [f"{i},{'hard' if i % 3 == 0 else 'easy'},t{i}" for i in range(1, 101)]
    (tmp_path / "c.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    body = "  - id: r-{{ num }}\n    prompt: '{{ q }}'\n    eval: {none: true}\n    cases_from:\n      file: c.csv\n"
    pick = "      columns: {num: n, q: text}\n"
    # The filter reads the file's columns, picked or not: `level` is not a variable (nor in the hash).
    tests, problems = load(tmp_path, body + pick + "      filter: \"level == 'hard' and n|int > 90\"\n",
                           golden_check=False)
    assert problems == [] and [t.id for t in tests] == ["r-93", "r-96", "r-99"]
    assert set(tests[0].variables) == {"num", "q", "suite", "test_id"}
    tests, problems = load(tmp_path, body + pick + "      filter: \"level == 'hard' and num|int > 30\"\n",
                           golden_check=False)
    # Row 1 is easy, so `and` never reads `num`; row 3 is the first that does, and a failing filter is said once.
    assert problems == ["c.csv:4:1: error: the filter `level == 'hard' and num|int > 30` fails on this row: 'num' is "
                        "undefined; it is a Jinja expression over the file's columns (as the file names them)"]
    picked = body.replace("{{ num }}", "{{ n }}").replace("'{{ q }}'", "'{{ level }}'")
    tests, problems = load(tmp_path, picked + "      columns: [n, level]\n      filter: \"level == 'hard'\"\n"
                           "      limit: 5\n", golden_check=False)
    assert problems == []
    assert [t.id for t in tests] == ["r-3", "r-6", "r-9", "r-12", "r-15"]
    sample = body + pick + "      sample: {n: 10, seed: 7}\n"
    first, _ = load(tmp_path, sample, golden_check=False)
    again, _ = load(tmp_path, sample, golden_check=False)
    other, _ = load(tmp_path, sample.replace("seed: 7", "seed: 8"), golden_check=False)
    numbers = [int(t.variables["num"]) for t in first]
    assert len(first) == 10 and numbers == sorted(numbers)   # kept in file order
    assert [t.id for t in first] == [t.id for t in again] != [t.id for t in other]
    assert set(first[0].variables) == {"num", "q", "suite", "test_id"}


def test_filter_that_does_not_compile_points_at_the_yaml(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "capitals.csv", tmp_path)
    body = TEST.format(id="'{{ id }}'") + "    cases_from: {file: capitals.csv, filter: 'id =='}\n"
    _, problems = load(tmp_path, body)
    assert problems[0].startswith("s.yaml:6:46: error: this filter does not compile: ")


def test_missing_column_missing_file_empty_file_and_missing_variable(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "capitals.csv", tmp_path)
    body = TEST.format(id="'{{ id }}'")
    _, problems = load(tmp_path, body + "    cases_from:\n      file: capitals.csv\n"
                                        "      columns: {id: id, question: qestion, golden: golden}\n")
    assert problems == ["capitals.csv:1:1: error: no column 'qestion', but `columns:` (s.yaml:8:16) maps 'question' "
                        "to it; did you mean 'question'?"]
    _, problems = load(tmp_path, body + "    cases_from: nope/cases.csv\n")
    assert problems == ["s.yaml:6:17: error: no such file: nope/cases.csv; `cases_from` paths are "
                        "relative to the suite file's folder"]
    (tmp_path / "empty.csv").write_text("\n\n", encoding="utf-8")
    _, problems = load(tmp_path, body + "    cases_from: empty.csv\n")
    assert problems[0].startswith("empty.csv: error: the file is empty; ")
    (tmp_path / "many.csv").write_text("id,golden\n" + "".join(f"{i},x\n" for i in range(50)), encoding="utf-8")
    _, problems = load(tmp_path, body + "    cases_from: many.csv\n")
    # Once for the test, at the first row, not once per row.
    assert problems == ["many.csv:2:1: error: this row has no 'question', which the prompt uses (test at s.yaml:3); "
                        "add the column, or map one to it with `columns: {question: <column>}`"]


def test_golden_column_failing_its_evaluator_points_at_the_cell(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text("id,question,golden\na,q1,Paris\nb,q2,Lyon\n", encoding="utf-8")
    _, problems = load(tmp_path, "  - id: '{{ id }}'\n    prompt: '{{ question }}'\n    eval: {contains: Paris}\n"
                                 "    cases_from: c.csv\n")
    assert problems == ["c.csv:3:3: error: test 'b' (defined at s.yaml:3): the golden answer scores 0.00, below the "
                        "threshold 1: " + problems[0].split("threshold 1: ")[1]]
    assert "fix the golden or the evaluator" in problems[0]


def test_engine_validate_reports_a_file_row_golden_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text("id,question,golden\na,q1,Paris\nb,q2,Lyon\n", encoding="utf-8")
    (tmp_path / "s.yaml").write_text("suite: s\ntests:\n  - id: '{{ id }}'\n    prompt: '{{ question }}'\n"
                                     "    eval: {contains: Paris}\n    cases_from: c.csv\n", encoding="utf-8")
    done = run_engine("validate", "s.yaml", cwd=tmp_path)
    assert done.returncode == 1
    expected = "c.csv:3:3: error: test 'b' (defined at s.yaml:3): the golden answer scores 0.00"
    assert expected in done.stdout + done.stderr


def test_a_changed_row_changes_only_its_hash(tmp_path: Path) -> None:
    rows = [f"{i},question {i},g{i}" for i in range(20)]
    body = TEST.format(id="q-{{ id }}") + "    cases_from: c.csv\n"
    (tmp_path / "c.csv").write_text("id,question,golden\n" + "\n".join(rows) + "\n", encoding="utf-8")
    before = {t.id: t.hash for t in load(tmp_path, body, golden_check=False)[0]}
    rows[7] = "7,question seven,g7"
    rows.insert(3, "new,a new row,gn")
    (tmp_path / "c.csv").write_text("id,question,golden\n" + "\n".join(rows) + "\n", encoding="utf-8")
    after = {t.id: t.hash for t in load(tmp_path, body, golden_check=False)[0]}
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"q-7"} and set(after) - set(before) == {"q-new"}


def test_cases_and_cases_from_together_and_neither_file_nor_dataset(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "capitals.csv", tmp_path)
    _, problems = load(tmp_path, TEST.format(id="'{{ id }}'") + "    cases_from: capitals.csv\n    cases: [{id: a}]\n")
    assert any("has both `cases:` and `cases_from:`" in p for p in problems)
    _, problems = load(tmp_path, TEST.format(id="'{{ id }}'") + "    cases_from: {limit: 3}\n")
    assert problems and problems[0].startswith("s.yaml:6:")


def test_duplicate_ids_from_rows_point_at_the_row(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text("id,question,golden\na,q,g\na,q2,g\n", encoding="utf-8")
    _, problems = load(tmp_path, TEST.format(id="q-{{ id }}") + "    cases_from: c.csv\n", golden_check=False)
    assert problems[0].startswith("c.csv:3:1: error: duplicate test id 'q-a' (first used on line 3 of s.yaml); ")


def test_a_json_array_keeps_types_and_names_a_bad_row(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text('[{"id": "a", "question": "q", "golden": {"x": 1}}, 7]', encoding="utf-8")
    _, problems = load(tmp_path, TEST.format(id="'{{ id }}'") + "    cases_from: c.json\n", golden_check=False)
    assert problems == ["c.json: error: row 2: is a JSON int, not an object"]
    (tmp_path / "c.json").write_text('[{"id": "a", "question": "q", "golden": {"x": 1}}]', encoding="utf-8")
    tests, problems = load(tmp_path, TEST.format(id="'{{ id }}'") + "    cases_from: c.json\n", golden_check=False)
    assert problems == [] and tests[0].golden == {"x": 1}


def test_every_bad_row_is_reported_up_to_a_cap(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text("id,question,golden\n" + "x\n" * 100, encoding="utf-8")
    _, problems = load(tmp_path, TEST.format(id="'{{ id }}'") + "    cases_from: c.csv\n", golden_check=False)
    assert len(problems) == 21 and problems[0] == ("c.csv: error: stopped reading after 20 problems; fix these and "
                                                   "run again")
    assert problems[-1].startswith("c.csv:21:2: error: this row has 1 field but")


def test_a_bom_is_fine_and_a_non_utf8_file_says_how_to_save_it(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_bytes("\ufeffid,question,golden\na,Qué?,sí\n".encode())
    tests, problems = load(tmp_path, TEST.format(id="'{{ id }}'") + "    cases_from: c.csv\n")
    assert problems == [] and tests[0].variables["question"] == "Qué?"
    (tmp_path / "c.csv").write_bytes("id,question,golden\na,Qué?,sí\n".encode("latin-1"))
    _, problems = load(tmp_path, TEST.format(id="'{{ id }}'") + "    cases_from: c.csv\n")
    assert len(problems) == 1 and problems[0].startswith("c.csv:") and "save it as UTF-8" in problems[0]
