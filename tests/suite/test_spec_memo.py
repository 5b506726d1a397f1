"""Specs many tests write alike are prepared once (engine.suite.spec_memo): the Tests and the diagnostics are
exactly those of preparing every test's spec on its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.base.flat import flat_key
from engine.evaluators import score
from engine.model import Answer
from engine.suite import hashing, load_suites, spec_memo

ROOT = Path(__file__).resolve().parents[2]

SUITE = """\
suite: memo
evaluators:
  one_word: {all: [{regex: '^\\W*\\w+\\W*$'}, {equals: "{{ golden }}", weight: 3}]}
tests:
  - {id: a, prompt: p, golden: Paris, eval: {contains: "{{ golden }}"}}
  - {id: b, prompt: p, golden: Rome, eval: {contains: "{{ golden }}"}}
  - {id: c, prompt: p, golden: x, eval: {contains: x, weight: 1}}
  - {id: d, prompt: p, golden: x, eval: {contains: x, weight: 1.0}}
  - {id: e, prompt: p, golden: x, eval: {contains: x, weight: 2}}
  - {id: f, prompt: p, golden: x, eval: {contains: x}}
  - {id: g, prompt: p, golden: x, eval: {contains: x}}
  - {id: g2, prompt: p, golden: x, eval: {contains: x}, threshold: 0.5}
  - {id: g3, prompt: p, golden: x, eval: {contains: x}, threshold: 1}
  - {id: g4, prompt: p, golden: x, eval: {contains: x}, temperature: 0.0, max_tokens: 5}
  - {id: g5, prompt: p, golden: x, eval: {contains: x}, temperature: -0.0, max_tokens: 5.0}
  - {id: g6, prompt: p, golden: x, eval: {contains: x}, temperature: 0, tags: [own]}
  - {id: h, prompt: p, golden: Word, eval: {use: one_word}}
  - {id: i, prompt: p, golden: Other, eval: {use: one_word, weight: 2}}
  - {id: j, prompt: p, golden: Word, eval: {use: one_word}}
  - id: "k-{{ n }}"
    prompt: "n is {{ n }}"
    cases: [{n: 1, golden: 1}, {n: 2, golden: 2}, {n: 3, golden: 3.0}]
    eval: {numeric: "{{ golden }}"}
  - id: "l-{{ n }}"
    prompt: "n is {{ n }}"
    cases: [{n: 1, golden: 1}, {n: 2, golden: 2}]
    eval: {numeric: "{{ golden }}"}
"""

BROKEN = """\
suite: broken
tests:
  - {id: m, prompt: p, golden: x, eval: {contains: "{{ nope }}"}}
  - {id: n, prompt: p, golden: x, eval: {contains: "{{ nope }}"}}
  - {id: o, prompt: p, golden: x, eval: {regex: "("}}
  - {id: q, prompt: p, golden: x, eval: {regex: "("}}
  - {id: r, prompt: p, golden: abc, eval: {numeric: "{{ golden }}"}}
  - {id: s, prompt: p, golden: "7", eval: {numeric: "{{ golden }}"}}
  - {id: t, prompt: p, golden: abc, eval: {numeric: "{{ golden }}"}}
"""


def _load(paths: list[Path]) -> tuple[list[Any], list[Any]]:
    suites, diagnostics = load_suites(paths, golden_check=True)
    # Verdicts of a few answers, except where scoring runs programs (exec: temporary paths and durations differ
    # from run to run) or calls a model.
    tests = [(repr(t), t.hash, t.line, t.evaluator,
              [] if t.evaluator is None or t.evaluator.blocking or t.evaluator.is_async else
              [score(t, Answer(text=a)) for a in ("Paris", "7", "Word")])
             for s in suites for t in s.tests]
    return tests, [(d.file, d.line, d.col, d.message, d.severity) for d in diagnostics]


@pytest.mark.parametrize("where", ["written", "broken", "hash_pins", "valid", "suites"])
def test_the_memo_changes_no_test_and_no_diagnostic(where: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if where in ("written", "broken"):
        (tmp_path / "memo.yaml").write_text(SUITE if where == "written" else BROKEN, encoding="utf-8")
        paths = [tmp_path / "memo.yaml"]
    else:
        paths = [{"hash_pins": ROOT / "tests/fixtures/hash_pins", "valid": ROOT / "tests/suite/fixtures/valid",
                  "suites": ROOT / "suites"}[where]]
    remembered = _load(paths)
    monkeypatch.setattr(spec_memo, "flat_key", lambda spec: None)   # every test's spec prepared on its own
    assert _load(paths) == remembered
    tests, diagnostics = remembered
    if where == "written":
        assert len(tests) == 20 and diagnostics == []
    if where == "broken":
        # The two tests that write a broken spec alike both get their error (m/n: an undefined variable; o/q:
        # a bad regex), and so do the goldens a shared plan cannot compile (r/t), not the sound one (s).
        lines = sorted({line for _, line, _, _, severity in diagnostics if severity == "error"})
        assert lines == [3, 4, 5, 6, 7, 9], diagnostics


def test_equal_values_of_other_types_are_other_specs(tmp_path: Path) -> None:
    (tmp_path / "memo.yaml").write_text(SUITE, encoding="utf-8")
    suites, _ = load_suites([tmp_path / "memo.yaml"])
    by_id = {t.id: t for t in suites[0].tests}
    assert [type(by_id[i].eval["weight"]) for i in "cd"] == [int, float]   # type: ignore[index]
    assert len({by_id[i].hash for i in "cde"}) == 3   # 1 and 1.0 are two specs (1 == 1.0 in Python)
    for test in by_id.values():
        variables = {k: v for k, v in test.variables.items() if k not in ("test_id", "suite")}
        assert test.hash == hashing.test_hash(messages=test.messages, prompt=test.prompt, tools=test.tools,
                                              eval_spec=test.eval, variables=variables, max_tokens=test.max_tokens,
                                              temperature=test.temperature, threshold=test.threshold)
    assert by_id["f"].eval is not by_id["g"].eval and by_id["f"].eval == by_id["g"].eval
    assert by_id["f"].evaluator is by_id["g"].evaluator   # a spec without templates: compiled once
    # Settings of other values or types give other hashes (a threshold is read as a float: 1 is 1.0).
    assert by_id["g"].hash == by_id["g3"].hash
    assert len({by_id[i].hash for i in ("g", "g2", "g4", "g5", "g6")}) == 5


def test_flat_key() -> None:
    assert flat_key({"contains": "x", "weight": 1}) == (("contains", str, "x"), ("weight", int, 1))
    assert flat_key({"contains": "x", "weight": 1}) != flat_key({"contains": "x", "weight": 1.0})
    assert flat_key({"contains": ["x"]}) is None and flat_key("x") is None


def test_number_traps_are_still_found_beside_plain_numbers(tmp_path: Path) -> None:
    # engine.suite.loader passes plain ASCII digits without parsing them; a leading zero or a fraction is still read.
    (tmp_path / "n.yaml").write_text(
        "suite: n\ntests:\n  - id: \"t-{{ v }}\"\n    prompt: \"{{ v }}\"\n    golden: x\n    eval: {contains: x}\n"
        "    cases: [{v: 0}, {v: 10}, {v: 007}, {v: 1.10}, {v: 00}, {v: 7}]\n", encoding="utf-8")
    _, diagnostics = load_suites([tmp_path / "n.yaml"])
    assert sorted(d.message.split(" as ")[0] for d in diagnostics if d.message.startswith("YAML reads")) == [
        "YAML reads 00", "YAML reads 007", "YAML reads 1.10"]
