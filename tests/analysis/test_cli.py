"""`engine analyze` and `engine diff` as a user runs them: real subprocesses, real Parquet, exit codes."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from builders import grid_rows, write_run

from tests.engine_proc import run_engine

GOOD = {f"t{i}": [1] * 5 for i in range(20)}
WEAK = {f"t{i}": [1 if i < 8 else 0] * 5 for i in range(20)}


def engine(*args: str) -> subprocess.CompletedProcess[str]:
    """`engine ARGS` as a separate process (tests/engine_proc.py: forked from a pre-imported interpreter)."""
    return run_engine(*args)


@pytest.fixture()
def results(tmp_path: Path) -> Path:
    write_run(tmp_path / "results" / "run-1", grid_rows({"good": GOOD, "weak": WEAK}, run_id="run-1"))
    return tmp_path / "results"


def test_table_output_names_the_better_model_and_the_saturated_tests(results: Path) -> None:
    done = engine("analyze", str(results))
    assert done.returncode == 0, done.stderr
    assert "good is better than weak" in done.stdout
    assert "Saturated tests" in done.stdout and "s/t0" in done.stdout


def test_json_csv_markdown(results: Path) -> None:
    data = json.loads(engine("analyze", str(results), "--format", "json").stdout)
    assert [m["model"] for m in data["models"]] == ["good", "weak"]
    assert data["comparisons"][0]["only_a"] == 12 and data["comparisons"][0]["only_b"] == 0
    rows = list(csv.DictReader(io.StringIO(engine("analyze", str(results), "-f", "csv").stdout)))
    assert len(rows) == 20 and {r["status"] for r in rows} == {"saturated", "discriminating"}
    models = list(csv.DictReader(io.StringIO(engine("analyze", str(results), "-f", "csv", "--table", "models").stdout)))
    assert [r["model"] for r in models] == ["good", "weak"]
    markdown = engine("analyze", str(results), "-f", "markdown").stdout
    assert "| model | tests |" in markdown and "### Paired comparisons" in markdown


def test_fail_under_exit_codes(results: Path) -> None:
    assert engine("analyze", str(results), "--fail-under", "0.3").returncode == 0
    low = engine("analyze", str(results), "--fail-under", "0.5")
    assert low.returncode == 1 and "weak mean score 0.400 is below --fail-under 0.5" in low.stderr


def test_usage_errors_exit_2_with_a_message(results: Path, tmp_path: Path) -> None:
    for args in (["analyze", str(tmp_path / "missing")], ["analyze", str(results), "--format", "xml"],
                 ["analyze", str(results), "--fail-under", "7"], ["analyze"]):
        done = engine(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and done.stderr.strip()


def test_fail_on_regression_and_diff(tmp_path: Path) -> None:
    base, new = tmp_path / "base", tmp_path / "new"
    write_run(base, grid_rows({"m": GOOD}, run_id="base"))
    write_run(new, grid_rows({"m": WEAK}, run_id="new"))
    regressed = engine("analyze", str(new), "--fail-on-regression", str(base))
    assert regressed.returncode == 1 and "m: regression" in regressed.stderr
    assert engine("analyze", str(base), "--fail-on-regression", str(new)).returncode == 0
    shown = engine("diff", str(base), str(new))
    assert shown.returncode == 1 and "pass→fail" in shown.stdout and "regression" in shown.stdout
    flips = json.loads(engine("diff", str(base), str(new), "-f", "json").stdout)["flips"]
    assert len(flips) == 12


def test_junit_one_testcase_per_test_and_model(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "junit" / "analysis.xml"
    assert engine("analyze", str(results), "--junit", str(out), "-f", "json").returncode == 0
    root = ET.parse(out).getroot()
    assert root.get("tests") == "40" and root.get("failures") == "12" and root.get("errors") == "0"
    weak = root.find("testsuite[@name='weak']")
    assert weak is not None and len(weak.findall("testcase")) == 20
    assert len(weak.findall("testcase/failure")) == 12


def test_fallback_rows_are_excluded_unless_included(tmp_path: Path) -> None:
    rows = grid_rows({"m": {"t1": [1], "t2": [0]}})
    rows[1]["fallback"] = True
    write_run(tmp_path / "r", rows)
    plain = json.loads(engine("analyze", str(tmp_path / "r"), "-f", "json").stdout)
    assert plain["models"][0]["tests"] == 1
    kept = json.loads(engine("analyze", str(tmp_path / "r"), "-f", "json", "--include-fallback").stdout)
    assert kept["models"][0]["tests"] == 2


def test_the_summary_comes_first_and_repeats_the_tables_figures(results: Path) -> None:
    done = engine("analyze", str(results))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    data = json.loads(engine("analyze", str(results), "--format", "json").stdout)
    best = data["models"][0]
    assert lines[:5] == [
        "Summary",
        "  2 models, 20 tests (each case counts as one), 200 rows: 200 scored, 0 errors (not scored)",
        f"  best mean score: good 1.000, pass rate 100.0% [{best['pass_lo']:.1%}, {best['pass_hi']:.1%}] over 20 tests",
        f"  {data['comparisons'][0]['verdict']}",
        "  tests: 12 discriminating, 8 saturated (saturated: every model passes most of its attempts)",
    ]
    assert sum(1 for t in data["tests"] if t["status"] == "discriminating") == 12
    markdown = engine("analyze", str(results), "--format", "markdown").stdout
    assert markdown.startswith("### Summary\n\n- 2 models, 20 tests")
