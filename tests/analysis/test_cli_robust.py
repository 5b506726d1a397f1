"""Every command on awkward runs written as real Parquet: disjoint models, zero rows, fallback-only models.

Output JSON is parsed strictly: a bare NaN or Infinity fails the test.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from builders import grid_rows, write_run

from engine.analysis import analyze, load
from engine.analysis.render import render
from tests.engine_proc import run_engine


def engine(*args: str) -> subprocess.CompletedProcess[str]:
    """`engine ARGS` as a separate process (tests/engine_proc.py: forked from a pre-imported interpreter)."""
    return run_engine(*args)


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in JSON output")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture()
def disjoint(tmp_path: Path) -> Path:
    """Model a ran t0..t5, model b ran u0..u5: no test in common."""
    grid = {"a": {f"t{i}": [1, 0, 1] for i in range(6)}, "b": {f"u{i}": [0, 0, 1] for i in range(6)}}
    return write_run(tmp_path / "results" / "run-1", grid_rows(grid, run_id="run-1"))


def test_analyze_every_format_survives_disjoint_models(disjoint: Path) -> None:
    data = strict_json(engine("analyze", str(disjoint), "-f", "json").stdout)
    comparison = data["comparisons"][0]
    assert comparison["tests"] == 0 and comparison["mean_diff"] is None and comparison["diff_lo"] is None
    assert "share no scored test" in comparison["verdict"] and comparison["better"] is None
    assert data["cluster_by"] == ["suite", "test_id"] and "cluster-robust t" in data["interval"]
    assert all(r["models"] == 1 and not r["discriminating"] for r in data["tests"])
    done = engine("analyze", str(disjoint))
    assert done.returncode == 0 and "share no scored test" in done.stdout, done.stderr
    assert not re.search(r"\bnan\b", done.stdout, re.IGNORECASE)
    assert list(csv.DictReader(io.StringIO(engine("analyze", str(disjoint), "-f", "csv").stdout)))
    # The other renderings, in process (the command only adds option parsing around `render`).
    analysis = analyze(load(disjoint))
    for table in ("models", "tests", "suites", "tags", "passk", "comparisons"):
        assert list(csv.DictReader(io.StringIO(render(analysis, "csv", table=table)))), table
    markdown = render(analysis, "markdown")
    assert "share no scored test" in markdown and not re.search(r"\bnan\b", markdown, re.IGNORECASE)
    irt = engine("analyze", str(disjoint), "--irt", "-f", "json")
    assert irt.returncode == 0 and strict_json(irt.stdout)["irt"]["fitted"] is False


def test_report_and_diff_survive_disjoint_models(disjoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = engine("report", str(disjoint), "-o", str(out))
    assert done.returncode == 0, done.stderr
    payload = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', out.read_text(),
                        re.DOTALL)
    assert payload is not None
    data = strict_json(payload.group(1).replace("<\\/", "</"))
    assert data["comparisons"][0]["diff_lo"] is None and data["passk"]
    # A second run in which model b ran a's tests: a and b each share nothing with their other run.
    other = write_run(tmp_path / "run-2", grid_rows({"b": {f"t{i}": [1] for i in range(6)},
                                                     "c": {f"t{i}": [1] for i in range(6)}}, run_id="run-2"))
    as_json = engine("diff", str(disjoint), str(other), "-f", "json")
    assert as_json.returncode == 0, as_json.stderr
    summary = strict_json(as_json.stdout)["summary"]
    assert [(r["model"], r["verdict"], r["mean_diff"]) for r in summary] == [("b", "no common tests", None)]
    for fmt in ("table", "csv"):
        done = engine("diff", str(disjoint), str(other), "-f", fmt)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_zero_row_run_exits_2_with_no_results(tmp_path: Path) -> None:
    empty = write_run(tmp_path / "empty", [])
    full = write_run(tmp_path / "full", grid_rows({"a": {"t": [1]}}))
    for args in (["analyze", str(empty)], ["analyze", str(empty), "-f", "json"],
                 ["report", str(empty), "-o", str(tmp_path / "r.html")], ["diff", str(full), str(empty)]):
        done = engine(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "no results" in done.stderr and "Traceback" not in done.stderr, args


def test_rows_left_out_are_counted_and_a_gateway_only_model_does_not_vanish(tmp_path: Path) -> None:
    rows = grid_rows({"a": {f"t{i}": [1, None] for i in range(6)}, "gw": {f"t{i}": [1, 1] for i in range(6)}})
    for r in rows:
        if r["model"] == "gw":
            r.update(fallback=True, served_model="backup")
    write_run(tmp_path / "r", rows)
    data = strict_json(engine("analyze", str(tmp_path / "r"), "-f", "json").stdout)
    models = {m["model"]: m for m in data["models"]}
    assert models["gw"]["tests"] == 0 and models["gw"]["fallback_rows"] == 12 and models["gw"]["mean_score"] is None
    assert "every row (12) was served by a fallback model" in models["gw"]["notes"]
    assert models["a"]["error_rows"] == 6 and "6 of 12 rows errored" in models["a"]["notes"]
    notes = " | ".join(data["notes"])
    assert "12 rows served by a fallback model were left out (gw: 12)" in notes
    assert "6 error rows are not scored" in notes and "a: 6" in notes
    table = engine("analyze", str(tmp_path / "r")).stdout
    assert "gw" in table and "fallback" in table
    kept = strict_json(engine("analyze", str(tmp_path / "r"), "-f", "json", "--include-fallback").stdout)
    assert {m["model"]: m["tests"] for m in kept["models"]} == {"a": 6, "gw": 6}
    assert any("are included" in n for n in kept["notes"])


def test_pass_at_k_in_analyze_and_csv(tmp_path: Path) -> None:
    grid = {"a": {f"t{i}": [1, 0, 0, 0] for i in range(8)}, "b": {f"t{i}": [1, 1, 1, 0] for i in range(8)}}
    write_run(tmp_path / "r", grid_rows(grid))
    data = strict_json(engine("analyze", str(tmp_path / "r"), "-f", "json").stdout)
    rows = {(r["model"], r["k"]): r for r in data["passk"]}
    assert sorted({k for _, k in rows}) == [1, 2, 3, 4]
    assert rows[("a", 2)]["pass_at_k"] == pytest.approx(1 - 3 / 6)  # 1 − C(3,2)/C(4,2)
    assert rows[("b", 2)]["pass_hat_k"] == pytest.approx(3 / 6)  # C(3,2)/C(4,2)
    assert rows[("a", 4)]["pass_hat_k"] == 0.0 and rows[("b", 4)]["pass_at_k"] == 1.0
    table = engine("analyze", str(tmp_path / "r")).stdout
    assert "pass@k" in table and "pass^k" in table
    picked = engine("analyze", str(tmp_path / "r"), "-f", "csv", "--table", "passk", "--k", "1,3")
    assert {r["k"] for r in csv.DictReader(io.StringIO(picked.stdout))} == {"1", "3"}
    bad = engine("analyze", str(tmp_path / "r"), "--cluster-by", "row")
    assert bad.returncode == 2 and "--cluster-by row" in bad.stderr
