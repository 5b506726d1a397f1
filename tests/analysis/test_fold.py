"""The folded terminal analysis: each fold leaves out only what its line says, and `--full` shows it all.

The helpers are checked on hand-made cells; the CLI checks run `engine analyze` (a subprocess) on a real
Parquet run with repeats, all-zero columns and a long per-test list.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from builders import grid_rows, write_run

from engine.analysis import load
from engine.analysis.fold import FOLD_ROWS, drop_zero_columns, fold_passk, fold_rows, hoist_common_text
from engine.analysis.passk import pass_k_table
from engine.analysis.render import render
from tests.engine_proc import run_engine


def engine(*args: str) -> subprocess.CompletedProcess[str]:
    """`engine ARGS` as a separate process (tests/engine_proc.py: forked from a pre-imported interpreter)."""
    return run_engine(*args)


def test_fold_rows_keeps_the_first_rows_and_counts_the_rest() -> None:
    rows = [[f"t{i}"] for i in range(30)]
    kept, line = fold_rows(rows, "uninformative tests", full=False)
    assert kept == rows[:FOLD_ROWS] and line == f"… {30 - FOLD_ROWS} more uninformative tests: --full shows them"
    assert fold_rows(rows, "tests", full=True) == (rows, "")
    # a list only two rows past the limit is shown whole: hiding two rows would save nothing
    assert fold_rows(rows[:FOLD_ROWS + 2], "tests", full=False) == (rows[:FOLD_ROWS + 2], "")


def test_zero_columns_are_said_once_and_kept_under_full() -> None:
    header = ["model", "errors", "stuck", "bad args", "turns"]
    rows = [["a", "0.0%", "0", "0 (0.0%)", "0.00"], ["b", "0.0%", "0", "1 (25.0%)", "0"]]
    shown, cells, line = drop_zero_columns(header, rows, full=False, keep=("model",))
    assert shown == ["model", "bad args"] and cells == [["a", "0 (0.0%)"], ["b", "1 (25.0%)"]]
    assert line == "0 in every row, so not shown: errors, stuck, turns (--full shows them)"
    assert drop_zero_columns(header, rows, full=True) == (header, rows, "")
    # "-" (no value) and "10" are not zero
    assert drop_zero_columns(["m", "x"], [["a", "-"], ["b", "10"]], full=False) == (["m", "x"],
                                                                                    [["a", "-"], ["b", "10"]], "")


def test_shared_reason_text_is_hoisted_between_clauses_only() -> None:
    header = ["test", "why"]
    rows = [["s/a", "every model passes (2 models, mean score 1.00) (exact test p = 1): it cannot tell them apart"],
            ["s/b", "every model passes (3 models, mean score 0.90) (exact test p = 0.2): it cannot tell them apart"]]
    shown, cells, line = hoist_common_text(header, rows, 1, full=False)
    assert shown == header
    assert [c[1] for c in cells] == ["(2 models, mean score 1.00) (exact test p = 1)",
                                     "(3 models, mean score 0.90) (exact test p = 0.2)"]
    assert line == ('why, in every row: "every model passes … it cannot tell them apart" '
                    "(said once here; --full shows them whole)")
    # identical cells: the column goes, the text is said once
    same = [["s/a", "no model passes: check it"], ["s/b", "no model passes: check it"]]
    assert hoist_common_text(header, same, 1, full=False) == (
        ["test"], [["s/a"], ["s/b"]], 'why, in every row: "no model passes: check it" (said once here; '
                                      "--full shows them whole)")
    assert hoist_common_text(header, rows, 1, full=True) == (header, rows, "")


def _repeated_run() -> pd.DataFrame:
    """Two models; two tests with 5 attempts (suite s), two with one (suite u); m2 disagrees with itself."""
    grid = {"m1": {"r1": [1] * 5, "r2": [0] * 5}, "m2": {"r1": [1, 0, 1, 0, 1], "r2": [0] * 5}}
    rows = grid_rows(grid, suite="s") + grid_rows({"m1": {"o1": [1], "o2": [0]}, "m2": {"o1": [1], "o2": [1]}},
                                                   suite="u")
    return pd.DataFrame(rows)


def test_passk_folds_k1_suite_copies_and_runs_of_equal_figures(tmp_path: Path) -> None:
    write_run(tmp_path / "run", _repeated_run().to_dict(orient="records"))
    table = pass_k_table(load(tmp_path / "run"))
    # k = 1, 2, 3, 5 for (all), s and u (u only at k = 1) per model
    assert len(table) == 2 * (4 + 4 + 1)
    shown, line = fold_passk(table, full=False)
    # m1's attempts agree: one row, k = 2–5; m2's pass@k grows with k: a row per k; no per-suite row (suite s
    # holds every repeated test, so its rows equal the (all) rows)
    assert [(r.model, r.suite, r.k) for r in shown.itertuples()] == [
        ("m1", "(all)", "2–5"), ("m2", "(all)", "2"), ("m2", "(all)", "3"), ("m2", "(all)", "5")]
    assert line == ("pass@k rows not shown (--full shows them): 6 at k = 1 (the pass rate); 6 per suite over "
                    "the same tests as (all); 2 merged into k = a–b (the same figures at each k)")
    m1 = table[(table.model == "m1") & (table.suite == "(all)") & (table.k == 2)].iloc[0]
    assert shown.iloc[0]["pass_at_k"] == m1["pass_at_k"] and shown.iloc[0]["tests"] == 2
    full, none = fold_passk(table, full=True)
    assert none == "" and len(full) == len(table) and list(full["k"]) == [str(k) for k in table["k"]]


def _section_rows(text: str, title: str) -> list[str]:
    """The test rows of one rich table of `engine analyze` output (the lines under its title)."""
    lines = text[text.index(title):].splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("┏")):]   # a long title wraps
    body = []
    for line in lines:
        if not line.startswith(("┏", "┃", "┡", "│", "└")):
            break
        body.append(line)
    return [line for line in body if re.match(r"│ s/\w+ ", line)]


def test_cli_folds_by_default_and_full_shows_everything(tmp_path: Path) -> None:
    # 30 tests no model tells apart (one attempt each, one model passes), one with repeats; nothing errs or is cut
    grid: dict[str, dict[str, list[float | None]]] = {"m1": {}, "m2": {}}
    for i in range(30):
        grid["m1"][f"u{i:02d}"] = [1 if i % 2 else 0]
        grid["m2"][f"u{i:02d}"] = [0 if i % 2 else 1]
    grid["m1"]["rep"], grid["m2"]["rep"] = [1] * 5, [1, 0, 1, 1, 0]
    write_run(tmp_path / "run", grid_rows(grid))
    folded = engine("analyze", str(tmp_path / "run"))
    full = engine("analyze", str(tmp_path / "run"), "--full")
    assert folded.returncode == 0 and full.returncode == 0, folded.stderr + full.stderr
    text, everything = folded.stdout, full.stdout
    uninformative = len(_section_rows(everything, "Uninformative tests"))
    assert uninformative >= 20
    assert len(_section_rows(text, "Uninformative tests")) == FOLD_ROWS
    assert f"… {uninformative - FOLD_ROWS} more uninformative tests: --full shows them (--format csv: every " \
           "test, 31)" in text
    assert "0 in every row, so not shown: errors, truncated (--full shows them)" in text
    lines = everything.splitlines()
    header = "\n".join(lines[1:next(i for i, line in enumerate(lines) if line.startswith("┡"))])   # its header rows
    assert "errors" in header and "truncated" in header
    assert "pass@k rows not shown (--full shows them)" in text
    assert "…" not in everything and "not shown" not in everything and "said once" not in everything
    assert len(text.splitlines()) < len(everything.splitlines())
    # each fold line is one line, never wrapped
    for line in text.splitlines():
        if "--full" in line:
            assert line.startswith(("…", "0 in every row", "pass@k rows", "why, in every row")), line
    # json and csv are complete whether folded or not
    data = json.loads(engine("analyze", str(tmp_path / "run"), "-f", "json").stdout)
    assert len(data["tests"]) == 31 and len(data["passk"]) == len(
        json.loads(engine("analyze", str(tmp_path / "run"), "-f", "json", "--full").stdout)["passk"])
    csv_rows = engine("analyze", str(tmp_path / "run"), "-f", "csv").stdout.strip().splitlines()
    assert len(csv_rows) == 32


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_render_full_is_the_unfolded_output(tmp_path: Path, fmt: str) -> None:
    from engine.analysis.summary import analyze

    write_run(tmp_path / "run", _repeated_run().to_dict(orient="records"))
    analysis = analyze(load(tmp_path / "run"))
    folded, full = render(analysis, fmt), render(analysis, fmt, full=True)
    assert "--full shows them" in folded and "--full" not in full
    if fmt == "markdown":   # the full pass@k table has every row: 18 of them, k written as a number
        assert len(re.findall(r"(?m)^\| m[12] \| (\(all\)|s|u) \| \d+ \|", full)) == 18
        assert len(re.findall(r"(?m)^\| m[12] \| \(all\) \| [\d–]+ \|", folded)) == 4
