"""Per-test and per-model tables on tables whose answers are known by construction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from builders import grid_rows, row, write_run

from engine.analysis import (
    TOKENS_NOT_REPORTED,
    analyze,
    compare,
    diff,
    load,
    per_model,
    per_test,
    suite_health,
)

# Four models of clearly different strength, 4 attempts each; each test's role is known by construction.
GRID = {
    "strong": {"disc": [1, 1, 1, 1], "sat": [1, 1, 1, 1], "floor": [0, 0, 0, 0], "flaky": [1, 0, 1, 1],
               "same": [1, 1, 0, 1], "grad": [1, 1, 1, 1]},
    "good": {"disc": [1, 1, 1, 1], "sat": [1, 1, 1, 1], "floor": [0, 0, 0, 0], "flaky": [1, 1, 1, 1],
             "same": [1, 0, 1, 1], "grad": [.6, .6, .6, .6]},
    "weak": {"disc": [0, 0, 0, 0], "sat": [1, 1, 1, 1], "floor": [0, 0, 0, 0], "flaky": [1, 1, 1, 1],
             "same": [0, 1, 1, 0], "grad": [.3, .3, .3, .3]},
    "poor": {"disc": [0, 0, 0, 0], "sat": [1, 1, 1, 1], "floor": [0, 0, 0, 0], "flaky": [1, 1, 1, 1],
             "same": [1, 0, 0, 1], "grad": [0, 0, 0, 0]},
}


def grid_table(**extra: object) -> list[dict]:
    """GRID as rows at temperature 0, except 'same', sampled at temperature 0.7."""
    rows = grid_rows(GRID, threshold=0.9, **extra)
    for r in rows:
        if r["test_id"] == "same":
            r["temperature"] = 0.7
    return rows


@pytest.fixture()
def grid_df(tmp_path: Path) -> pd.DataFrame:
    write_run(tmp_path / "run-1", grid_table(), parts=3)
    return load(tmp_path)


def by_id(tests: pd.DataFrame) -> pd.DataFrame:
    return tests.set_index("test_id")


def test_statuses_known_by_construction(grid_df: pd.DataFrame) -> None:
    tests = by_id(per_test(grid_df))
    assert tests.loc["sat", "status"] == "saturated" and tests.loc["sat", "saturated"]
    assert tests.loc["floor", "status"] == "floor" and "golden" in tests.loc["floor", "reason"]
    # Two strong models 4/4, two weak 0/4: exact p = 6 / C(16, 8) (the 6 tables as extreme: which two are perfect).
    assert tests.loc["disc", "p_value"] == pytest.approx(6 / 12870)
    assert tests.loc["disc", "status"] == "discriminating" and tests.loc["grad", "status"] == "discriminating"
    # Pass counts 3, 3, 2, 2 of 4: no evidence of a difference; "2 of 4" is not a pass (strict majority).
    assert tests.loc["same", "status"] == "uninformative" and tests.loc["same", "p_value"] > 0.5
    assert "no evidence" in tests.loc["same", "reason"]
    # One failed attempt of 16: every model passes by majority, and the failure is no evidence of a difference.
    assert tests.loc["flaky", "status"] == "saturated" and tests.loc["flaky", "p_value"] == 1.0
    # At temperature 0 disagreeing attempts are flaky; at 0.7 ('same') they are sampling, shown as counts.
    assert bool(tests.loc["flaky", "flaky"]) and tests.loc["flaky", "flaky_models"] == "strong"
    assert "strong 3/4" in tests.loc["flaky", "pass_counts"]
    assert not tests.loc[["disc", "sat", "floor", "grad", "same"], "flaky"].any()
    assert tests.loc["same", "mixed_models"] == "good 3/4, poor 2/4, strong 3/4, weak 2/4"
    # BH over the tests whose attempts both pass and fail: disc, flaky, same, grad (sat and floor cannot be called).
    q = tests["q_value"]
    assert q["disc"] == pytest.approx(tests.loc["disc", "p_value"] * 4 / 1)
    assert q["sat"] == 1.0 and q["floor"] == 1.0
    assert tests.loc["disc", "spread"] == 1.0
    assert tests.loc["grad", "difficulty"] == pytest.approx((1 + .6 + .3 + 0) / 4)
    assert tests.loc["sat", "spread"] == 0.0


def test_item_rest_correlation_by_hand(grid_df: pd.DataFrame) -> None:
    tests = by_id(per_test(grid_df))
    # 'grad' orders the models as the rest of the suite does: a strong positive item-rest r.
    models = ["strong", "good", "weak", "poor"]
    item = np.array([np.mean(GRID[m]["grad"]) for m in models])
    rest = np.array([np.mean([np.mean(v) for t, v in GRID[m].items() if t != "grad"]) for m in models])
    assert tests.loc["grad", "item_rest_r"] == pytest.approx(np.corrcoef(item, rest)[0, 1])
    assert tests.loc["grad", "item_rest_r"] > 0.5
    assert np.isnan(tests.loc["sat", "item_rest_r"])  # no variance: no correlation, not a division by zero


def test_per_model_orders_models_and_ci_brackets_the_mean(grid_df: pd.DataFrame) -> None:
    models = per_model(grid_df)
    assert list(models["model"]) == ["strong", "good", "weak", "poor"]
    assert (models["score_lo"] <= models["mean_score"]).all() and (models["mean_score"] <= models["score_hi"]).all()
    strong = models.iloc[0]
    expected = np.mean([np.mean(v) for v in GRID["strong"].values()])
    assert strong["mean_score"] == pytest.approx(expected)
    assert strong["tests"] == 6 and strong["rows"] == 24 and strong["error_rate"] == 0
    assert strong["clusters"] == 6


def test_suite_and_tag_health(tmp_path: Path) -> None:
    rows = grid_table(tags=["math"])
    write_run(tmp_path / "r", rows)
    tests = per_test(load(tmp_path))
    suites = suite_health(tests)
    assert suites.loc[0, "tests"] == 6
    assert suites.loc[0, "saturated"] == pytest.approx(2 / 6)  # 'sat' and 'flaky' (majority passes)
    assert suites.loc[0, "health"] == pytest.approx(2 / 6)
    tags = suite_health(tests, by="tag")
    assert list(tags["tag"]) == ["math"]


def test_compare_counts_and_verdict(tmp_path: Path) -> None:
    a = {f"t{i}": [1] for i in range(30)}
    b = {f"t{i}": [1 if i < 10 else 0] for i in range(30)}
    write_run(tmp_path / "r", grid_rows({"a": a, "b": b}))
    result = compare(load(tmp_path), "a", "b")
    assert (result.tests, result.wins, result.ties, result.losses) == (30, 20, 10, 0)
    assert (result.only_a, result.only_b, result.both_pass, result.both_fail) == (20, 0, 10, 0)
    assert result.mcnemar_p == pytest.approx(2 * 0.5 ** 20)
    assert result.diff_lo > 0 and "a is better than b" in result.verdict
    with pytest.raises(KeyError, match="models: a, b"):
        compare(load(tmp_path), "a", "zzz")


def test_diff_flips_hash_flag_and_regression(tmp_path: Path) -> None:
    base = {"m": {f"t{i}": [1] for i in range(40)}}
    new = {"m": {f"t{i}": [1 if i >= 15 else 0] for i in range(40)}}
    write_run(tmp_path / "a", grid_rows(base, run_id="a"))
    rows = grid_rows(new, run_id="b")
    rows[39]["test_hash"] = "edited"  # t39 changed between runs
    write_run(tmp_path / "b", rows)
    result = diff(tmp_path / "a", tmp_path / "b")
    assert len(result.flips) == 15 and set(result.flips["change"]) == {"pass→fail"}
    summary = result.summary.iloc[0]
    assert summary["changed_tests"] == 1 and summary["tests"] == 39
    assert summary["verdict"] == "regression" and result.regressed == ["m"]
    improvement = diff(tmp_path / "b", tmp_path / "a")
    assert improvement.summary.iloc[0]["verdict"] == "improvement" and not improvement.regressed


def test_one_model_says_so_instead_of_dividing_by_zero(tmp_path: Path) -> None:
    write_run(tmp_path / "r", grid_rows({"only": {"t1": [1], "t2": [0], "t3": [1, 0]}}))
    analysis = analyze(load(tmp_path))
    assert any("one model" in n for n in analysis.notes)
    tests = by_id(analysis.tests)
    assert tests["spread"].isna().all() and tests["item_rest_r"].isna().all()
    assert tests.loc["t1", "status"] == "saturated" and tests.loc["t2", "status"] == "floor"
    # One pass in two is not a pass (strict majority): t3 is on the floor, and flaky at temperature 0.
    assert tests.loc["t3", "status"] == "floor" and tests.loc["t3", "flaky"]
    assert analysis.comparisons == []


def test_one_test(tmp_path: Path) -> None:
    write_run(tmp_path / "r", grid_rows({"a": {"t": [1]}, "b": {"t": [0]}}))
    analysis = analyze(load(tmp_path))
    assert len(analysis.tests) == 1 and any("one test" in n for n in analysis.notes)
    assert analysis.models["mean_score"].tolist() == [1.0, 0.0]


def test_all_errors(tmp_path: Path) -> None:
    write_run(tmp_path / "r", grid_rows({"a": {"t1": [None, None]}, "b": {"t1": [None]}}))
    analysis = analyze(load(tmp_path))
    assert analysis.models["mean_score"].isna().all()
    assert analysis.models["error_rate"].tolist() == [1.0, 1.0]
    assert "no scored rows" in analysis.models.loc[0, "notes"] and "timeout" in analysis.models.loc[0, "notes"]
    assert analysis.tests.loc[0, "status"] == "no-data"
    assert any("every row is an error" in n for n in analysis.notes)


def test_nan_scores_count_as_errors_not_zeros(tmp_path: Path) -> None:
    rows = grid_rows({"a": {"t1": [1, 1]}, "b": {"t1": [0, 0]}})
    rows[1].update(score=float("nan"), passed=None, error_kind="evaluator")
    write_run(tmp_path / "r", rows)
    models = per_model(load(tmp_path)).set_index("model")
    assert models.loc["a", "mean_score"] == 1.0 and models.loc["a", "error_rate"] == 0.5


def test_rows_recorded_unscored_are_neither_errors_nor_in_the_pass_rate(tmp_path: Path) -> None:
    """`eval: {none: true}` rows: no score, no error; counted apart, in the model table and the notes."""
    rows = grid_rows({"a": {"t1": [1], "t2": [0], "t3": [1]}, "b": {"t1": [0], "t2": [0], "t3": [1]}})
    for one in rows:
        if one["test_id"] == "t3":
            one.update(score=None, passed=None, error_kind=None)
    write_run(tmp_path / "r", rows)
    analysis = analyze(load(tmp_path))
    models = analysis.models.set_index("model")
    assert models.loc["a", "pass_rate"] == 0.5 and models.loc["b", "pass_rate"] == 0.0   # t3 left out
    assert models.loc["a", "unscored_rows"] == 1 and models.loc["a", "error_rows"] == 0
    assert models.loc["a", "error_rate"] == 0.0 and "1 of 3 rows recorded unscored" in models.loc["a", "notes"]
    assert any(n.startswith("2 rows recorded unscored (eval: {none: true})") for n in analysis.notes)


def test_the_items_table_counts_unscored_rows_apart_from_errors(tmp_path: Path) -> None:
    """Per test, `error_share` is the error rows' share and `unscored_share` the share recorded unscored, in memory
    and in DuckDB; JUnit skips a test × model whose rows were all recorded unscored and errs one that errored; the
    viewer's "errors only" keeps only tests with an error row."""
    from engine.analysis.junit import junit_xml
    from engine.analysis.large import grid_from_parquet
    from engine.analysis.summary import analyze_grid
    from engine.view.store import Store

    rows = grid_rows({"a": {"t1": [1, 1], "t2": [1, 0], "t3": [1, 1]}, "b": {"t1": [0, 1], "t2": [1, 1],
                                                                            "t3": [0, 0]}})
    for one in rows:
        if one["test_id"] == "t3" or (one["test_id"] == "t2" and one["model"] == "b" and one["attempt"] == 0):
            one.update(score=None, passed=None, error_kind=None)   # eval: {none: true}
        if one["test_id"] == "t1" and one["model"] == "b" and one["attempt"] == 0:
            one.update(score=None, passed=None, error_kind="timeout")
    write_run(tmp_path / "results" / "r", rows)
    in_memory = analyze(load(tmp_path)).tests.set_index("test_id")
    cells, model_rows, agents = grid_from_parquet(tmp_path)
    in_duckdb = analyze_grid(cells, model_rows, agents=agents).tests.set_index("test_id")
    for tests in (in_memory, in_duckdb):
        assert tests["error_share"].to_dict() == {"t1": 0.25, "t2": 0.0, "t3": 0.0}
        assert tests["unscored_share"].to_dict() == {"t1": 0.0, "t2": 0.25, "t3": 1.0}
        assert tests.loc["t3", "status"] == "no-data"
    xml = junit_xml(None, cells=cells)
    assert xml.count("<skipped") == 2 and xml.count("<error") == 0 and 'skipped="2"' in xml
    run = Store(tmp_path / "results").run("r")
    assert [r["test_id"] for r in run.grid(errors=True)["rows"]] == ["t1"]
    t3 = run.grid()["rows"][2]
    assert [(c["rows"], c["scored"], c["unscored"]) for c in t3["cells"]] == [(2, 0, 2), (2, 0, 2)]


def test_missing_token_counts_are_reported_as_missing(tmp_path: Path) -> None:
    rows = grid_rows({"llama": {"t1": [1]}, "api": {"t1": [1]}})
    rows[0].update(prompt_tokens=None, completion_tokens=None)
    write_run(tmp_path / "r", rows)
    models = per_model(load(tmp_path)).set_index("model")
    assert np.isnan(models.loc["llama", "completion_tokens"])
    assert TOKENS_NOT_REPORTED in models.loc["llama", "notes"]
    assert models.loc["api", "completion_tokens"] == 5 and TOKENS_NOT_REPORTED not in models.loc["api", "notes"]


def test_load_parent_folder_latest_symlink_files_and_new_columns(tmp_path: Path) -> None:
    import pyarrow as pa

    from engine.results.schema import SCHEMA

    old_schema = pa.schema([f for f in SCHEMA if f.name != "isolation"])
    write_run(tmp_path / "results" / "run-a", grid_rows({"a": {"t": [1]}}, run_id="run-a"), schema=old_schema)
    newer = grid_rows({"a": {"t": [0]}}, run_id="run-b", isolation="pidns")
    write_run(tmp_path / "results" / "run-b", newer)
    (tmp_path / "results" / "latest").symlink_to("run-b")
    both = load(tmp_path / "results")
    assert sorted(both["run_id"]) == ["run-a", "run-b"]  # `latest` not counted twice
    assert both.set_index("run_id").loc["run-b", "isolation"] == "pidns"
    assert both.set_index("run_id")["isolation"].isna()["run-a"]
    assert list(load(tmp_path / "results" / "latest")["run_id"]) == ["run-b"]
    one_file = next((tmp_path / "results" / "run-a").glob("*.parquet"))
    assert len(load([one_file, tmp_path / "results" / "run-b"])) == 2


def test_fallback_rows_are_dropped_unless_asked(tmp_path: Path) -> None:
    rows = grid_rows({"a": {"t1": [1], "t2": [0]}})
    rows[1]["fallback"] = True
    rows.append(row(model="a", test_id="t3", score=1.0, passed=True, fallback=None))
    write_run(tmp_path / "r", rows)
    assert sorted(load(tmp_path)["test_id"]) == ["t1", "t3"]
    assert len(load(tmp_path, include_fallback=True)) == 3


def test_load_errors_name_the_path_and_the_fix(tmp_path: Path) -> None:
    from engine.analysis import ResultsError

    with pytest.raises(ResultsError, match="no such file"):
        load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultsError, match="engine run"):
        load(tmp_path / "empty")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(ResultsError, match=r"bad\.parquet"):
        load(tmp_path / "bad.parquet")


def test_case_index_separates_tests_of_one_id(tmp_path: Path) -> None:
    rows = [row(model=m, test_id="t", case_index=c, score=float(s), passed=bool(s))
            for m, c, s in [("a", 0, 1), ("a", 1, 0), ("b", 0, 1), ("b", 1, 1)]]
    write_run(tmp_path / "r", rows)
    tests = per_test(load(tmp_path))
    assert list(tests["case_index"]) == [0, 1]
    # One attempt each: a 1-vs-0 split is no evidence (exact p = 1).
    assert list(tests["status"]) == ["saturated", "uninformative"]


def test_verdicts_need_enough_tests_and_both_rules(tmp_path: Path) -> None:
    # Three tests, a wins all: too few to compare, whatever the data look like.
    write_run(tmp_path / "few", grid_rows({"a": {f"t{i}": [1] for i in range(3)},
                                           "b": {f"t{i}": [0] for i in range(3)}}))
    few = compare(load(tmp_path / "few"), "a", "b")
    assert few.verdict.startswith("too few tests to compare (3)") and few.better is None
    # Ten tests, a passes all and b none: a zero-width interval, so McNemar (p = 2 / 2**10) decides.
    write_run(tmp_path / "ten", grid_rows({"a": {f"t{i}": [1] for i in range(10)},
                                           "b": {f"t{i}": [0] for i in range(10)}}))
    ten = compare(load(tmp_path / "ten"), "b", "a")
    assert ten.better == "a" and ten.mcnemar_p == pytest.approx(2 / 2**10)
    assert ten.verdict.startswith("a is better than b by +1.000") and "zero width" in ten.verdict
    # A run diff over three tests: too few for a regression verdict, however bad.
    write_run(tmp_path / "base", grid_rows({"m": {f"t{i}": [1] for i in range(3)}}, run_id="base"))
    write_run(tmp_path / "new", grid_rows({"m": {f"t{i}": [0] for i in range(3)}}, run_id="new"))
    result = diff(tmp_path / "base", tmp_path / "new")
    assert result.summary.loc[0, "verdict"] == "too few tests to compare (3)" and not result.regressed


def test_cases_of_one_test_form_one_cluster(tmp_path: Path) -> None:
    rows = [row(model=m, test_id=f"t{t}", case_index=c, score=float(s), passed=bool(s))
            for m, s in (("a", 1), ("b", 0)) for t in range(4) for c in range(3)]
    write_run(tmp_path / "r", rows)
    df = load(tmp_path)
    models = per_model(df).set_index("model")
    assert models.loc["a", "tests"] == 12 and models.loc["a", "clusters"] == 4
    assert per_model(df, cluster_by="case").loc[0, "clusters"] == 12
    # 4 clusters are below the 5 a verdict needs, though there are 12 paired cases.
    assert compare(df, "a", "b").verdict.startswith("too few tests to compare (4)")
    assert compare(df, "a", "b", cluster_by="case").better == "a"


def test_saturated_tests_do_not_dilute_the_evidence_of_the_others(tmp_path: Path) -> None:
    grid = {"a": {"disc": [1] * 4, **{f"sat{i}": [1] * 4 for i in range(60)}},
            "b": {"disc": [0] * 4, **{f"sat{i}": [1] * 4 for i in range(60)}}}
    write_run(tmp_path / "r", grid_rows(grid))
    tests = by_id(per_test(load(tmp_path)))
    # 4/4 against 0/4: p = 2 / C(8, 4); 60 saturated tests beside it do not multiply it by 61.
    assert tests.loc["disc", "p_value"] == pytest.approx(2 / 70)
    assert tests.loc["disc", "q_value"] == pytest.approx(2 / 70) and tests.loc["disc", "status"] == "discriminating"
