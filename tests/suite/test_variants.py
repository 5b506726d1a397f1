"""Prompt variants at load time: one test per variant, system and prompt rewritten, hashes and errors."""

from __future__ import annotations

from pathlib import Path

from engine.evaluators import score
from engine.model.answer import Answer
from engine.results.rows import key_of_row, row_key
from engine.suite import load_suites

SUITE = """\
suite: sv
variants:
  terse: {system: "Answer in one word."}
  cot: {prompt: "Think step by step. {{ prompt }}"}
  both: {system: "You answer {{ test_id }}.", prompt: "{{ prompt }} (be brief)"}
tests:
  - id: "q-{{ who }}"
    system: "Original system."
    prompt: "Who is {{ who }}?"
    cases: [{who: Ada}]
    eval: {contains: "{{ who }}"}
  - id: chat
    messages:
      - {role: user, content: first}
      - {role: assistant, content: ok}
      - {role: user, content: second}
    eval: {contains: x}
"""


def load(folder: Path, text: str):
    (folder / "s.yaml").write_text(text, encoding="utf-8")
    return load_suites([folder / "s.yaml"])


def test_every_test_runs_under_each_variant_side_by_side(tmp_path: Path) -> None:
    suites, diagnostics = load(tmp_path, SUITE)
    assert diagnostics == []
    tests = suites[0].tests
    assert [(t.id, t.variant) for t in tests] == [("q-Ada", "terse"), ("q-Ada", "cot"), ("q-Ada", "both"),
                                                  ("chat", "terse"), ("chat", "cot"), ("chat", "both")]
    terse, cot, both = tests[:3]
    assert terse.messages == ({"role": "system", "content": "Answer in one word."},
                              {"role": "user", "content": "Who is Ada?"})
    assert cot.messages == ({"role": "system", "content": "Original system."},
                            {"role": "user", "content": "Think step by step. Who is Ada?"})
    assert both.messages == ({"role": "system", "content": "You answer q-Ada."},
                             {"role": "user", "content": "Who is Ada? (be brief)"})
    assert cot.prompt == "Original system.\n\nThink step by step. Who is Ada?"
    assert terse.case_index == 0 and terse.eval is cot.eval   # the test's own evaluator, shared
    assert [score(t, Answer(text="Ada")).passed for t in (terse, cot)] == [True, True]
    # a conversation: the system message is added first, the last user turn is rewritten
    chat_terse, chat_cot = tests[3], tests[4]
    assert chat_terse.messages[0] == {"role": "system", "content": "Answer in one word."}
    assert [m["content"] for m in chat_cot.messages] == ["first", "ok", "Think step by step. second"]
    assert len({t.hash for t in tests}) == 6
    keys = {row_key("m", t, 0) for t in tests}
    assert len(keys) == 6 and all(k.endswith(f"\x1f{t.variant}") for k, t in zip(
        [row_key("m", t, 0) for t in tests], tests, strict=True))


def test_editing_one_variant_changes_only_its_hashes(tmp_path: Path) -> None:
    before = {(t.id, t.variant): t.hash for t in load(tmp_path, SUITE)[0][0].tests}
    after = {(t.id, t.variant): t.hash for t in load(tmp_path, SUITE.replace("(be brief)", "(be short)"))[0][0].tests}
    assert {k for k in before if before[k] != after[k]} == {("q-Ada", "both"), ("chat", "both")}


def test_row_keys_without_a_variant_are_unchanged_and_read_back(tmp_path: Path) -> None:
    plain = load(tmp_path, "suite: p\ntests:\n  - id: a\n    prompt: hi\n    eval: {none: true}\n")[0][0].tests[0]
    assert plain.variant is None
    assert row_key("m", plain, 1) == "\x1f".join(("m", "p", "a", plain.hash, "", "1"))
    row = {"model": "m", "suite": "p", "test_id": "a", "test_hash": plain.hash, "case_index": None, "attempt": 1}
    assert key_of_row(row) == row_key("m", plain, 1)                   # an old row: no `variant` key at all
    assert key_of_row({**row, "variant": None}) == row_key("m", plain, 1)
    assert key_of_row({**row, "variant": "v"}).endswith("\x1fv")


def test_variant_problems_are_errors_at_the_variant(tmp_path: Path) -> None:
    _, diagnostics = load(tmp_path, """\
suite: sv
variants:
  nope: {prompt: "Think step by step."}
  broken: {system: "{{ oops"}
  undefined: {system: "You are {{ role }}."}
tests:
  - id: a
    prompt: hi
    eval: {none: true}
""")
    found = sorted((d.line, d.message) for d in diagnostics if d.severity == "error")
    assert found[0][0] == 3 and "must use {{ prompt }}" in found[0][1]
    assert found[1][0] == 4 and "does not compile" in found[1][1]
    assert len(found) == 2   # the undefined one is checked only once the others compile
    _, diagnostics = load(tmp_path, "suite: sv\nvariants:\n  u: {system: 'You are {{ role }}.'}\n"
                                    "tests:\n  - id: a\n    prompt: hi\n    eval: {none: true}\n")
    [diag] = diagnostics
    assert diag.line == 3 and "variant 'u'" in diag.message and "test 'a'" in diag.message


def test_a_variant_name_must_be_a_plain_name(tmp_path: Path) -> None:
    _, diagnostics = load(tmp_path, "suite: sv\nvariants:\n  'a b': {system: x}\ntests:\n  - id: a\n    prompt: hi\n")
    assert diagnostics and diagnostics[0].line == 3


def test_the_golden_self_check_runs_once_per_test_not_once_per_variant(tmp_path: Path) -> None:
    _, diagnostics = load_suites_checked(tmp_path, "suite: g\nvariants:\n  a: {system: x}\n  b: {system: y}\n"
                                                   "tests:\n  - id: t\n    prompt: hi\n    golden: Lyon\n"
                                                   "    eval: {contains: Paris}\n")
    assert len(diagnostics) == 1 and "'Paris' not found in 'Lyon'" in diagnostics[0].message


def load_suites_checked(folder: Path, text: str):
    (folder / "s.yaml").write_text(text, encoding="utf-8")
    return load_suites([folder / "s.yaml"], golden_check=True)
