"""`calibration:` and `min_agreement:` on a judge, checked when the suite loads: FILE:LINE:COL errors for an
expect off the scale, a missing or unreadable file, a bad row; every file format read into the same examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.evaluators.judge import parse_scale
from engine.evaluators.judge_examples import Example, read_calibration
from engine.suite import load_suites


def problems(tmp_path: Path, judge: str) -> list[str]:
    (tmp_path / "s.yaml").write_text("suite: s\ntests:\n  - id: t\n    prompt: q\n    eval:\n      judge:\n"
                                     + "".join(f"        {line}\n" for line in judge.splitlines()))
    _, diagnostics = load_suites([tmp_path / "s.yaml"])
    return [str(d).replace(str(tmp_path) + "/", "") for d in diagnostics]


def test_an_expect_off_the_scale_is_an_error_at_its_place(tmp_path: Path) -> None:
    got = problems(tmp_path, "rubric: r\ncalibration:\n  - {answer: a, expect: pass}\n  - {answer: b, expect: maybe}")
    assert got == ["s.yaml:10:33: error: expect \"maybe\" is not on the judge's scale (\"pass\", \"fail\")"]
    got = problems(tmp_path, "rubric: r\nscale: 1-5\ncalibration: [{answer: a, expect: 6}]")
    assert len(got) == 1 and got[0].startswith("s.yaml:9:") and "expect 6 is not on the judge's scale" in got[0]
    labels = "rubric: r\nscale: [{label: good, score: 1}, {label: bad, score: 0}]\n"
    assert problems(tmp_path, labels + "calibration: [{answer: a, expect: good}]") == []
    assert "expect \"pass\" is not on" in problems(tmp_path, labels + "calibration: [{answer: a, expect: pass}]")[0]


def test_min_agreement_needs_examples_and_a_file_must_exist(tmp_path: Path) -> None:
    (got,) = problems(tmp_path, "rubric: r\nmin_agreement: 0.8")
    assert got.startswith("s.yaml:8:24: error: min_agreement needs `calibration:`")
    (got,) = problems(tmp_path, "rubric: r\ncalibration: labels.jsonl")
    assert got.startswith("s.yaml:8:22: error: calibration file 'labels.jsonl' not found")
    (got,) = problems(tmp_path, "rubric: r\ncalibration: labels.txt")
    assert got.startswith("s.yaml:8:22: error: calibration file 'labels.txt' must end in .jsonl, .csv")


def test_a_bad_row_in_a_file_names_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "labels.jsonl").write_text('{"answer": "a", "expect": "pass"}\n\n{"answer": "b", "expect": "no"}\n')
    (got,) = problems(tmp_path, "rubric: r\ncalibration: labels.jsonl")
    assert got.startswith("s.yaml:8:22: error: labels.jsonl line 3: `expect` expect \"no\" is not on")
    (tmp_path / "labels.jsonl").write_text('{"answer": "a", "expect": "pass"}\nnot json\n')
    (got,) = problems(tmp_path, "rubric: r\ncalibration: labels.jsonl")
    assert "labels.jsonl: cannot be read: line 2 is not JSON" in got
    (tmp_path / "labels.csv").write_text("answer,expect\nfine,Pass\nbad,fail\nodd\n")
    (got,) = problems(tmp_path, "rubric: r\ncalibration: labels.csv")
    assert "labels.csv line 4: `expect` a calibration example needs `expect:`" in got


@pytest.mark.parametrize(("name", "text"), [
    ("l.jsonl", '{"answer": "a", "expect": 4}\n{"answer": "b", "expect": "2", "prompt": "q?"}\n'),
    ("l.csv", "answer,expect,prompt\na,4,\nb,2,q?\n"),
    ("l.yaml", "- {answer: a, expect: 4}\n- {answer: b, expect: '2', prompt: 'q?'}\n"),
])
def test_every_file_format_reads_the_same_examples(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)
    scale = parse_scale("1-5")
    examples, found = read_calibration(name, scale.grades, scale.numeric, tmp_path)
    assert found == []
    assert [(e.answer, e.expect, e.prompt) for e in examples] == [("a", 4, None), ("b", 2, "q?")]
    assert isinstance(examples[0], Example) and examples[1].where.startswith(name)
