"""The bad-suites corpus: each tests/fixtures/bad_suites/NAME.yaml is reported exactly as NAME.expected says.

An expected line ending in `: ...` matches any text after that point (used for golden-check lines, whose
reason text belongs to the evaluators).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.suite import load_suites
from tests.engine_proc import run_engine

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "bad_suites"
FILES = sorted(CORPUS.glob("*.yaml"))


def test_the_corpus_is_big_enough() -> None:
    assert len(FILES) >= 40
    assert all(f.with_suffix(".expected").is_file() for f in FILES)


def _report(path: Path) -> list[str]:
    _, diagnostics = load_suites([path], golden_check=True)
    diagnostics.sort(key=lambda d: (d.line, d.col))
    return [str(d).replace(str(path), path.name) for d in diagnostics]


def _matches(expected: str, got: str) -> bool:
    if expected.endswith(": ..."):
        return got.startswith(expected[:-3])
    return expected == got


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_bad_suite_is_reported_as_expected(path: Path) -> None:
    expected = path.with_suffix(".expected").read_text(encoding="utf-8").splitlines()
    got = _report(path)
    assert len(got) == len(expected), "\n".join(got)
    for want, have in zip(expected, got, strict=True):
        assert _matches(want, have), f"\nwant: {want}\nhave: {have}"


@pytest.mark.parametrize("name", ["unknown_evaluator", "yaml_tab_indent", "many_errors_one_pass"])
def test_cli_reports_corpus_files_gcc_style(name: str, tmp_path: Path) -> None:
    path = CORPUS / f"{name}.yaml"
    proc = run_engine("validate", path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    expected = path.with_suffix(".expected").read_text(encoding="utf-8").splitlines()
    assert [line.replace(str(path), path.name) for line in lines[:-1]] == expected
    assert lines[-1].startswith(f"{len(expected)} error")


def test_the_valid_fixture_loads_without_a_diagnostic() -> None:
    valid = Path(__file__).resolve().parent / "fixtures" / "valid"
    suites, diagnostics = load_suites([valid])
    assert diagnostics == [] and len(suites) == 1
