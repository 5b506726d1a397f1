"""`engine analyze --subset`: the choice on simulated runs with known truth, its refusals, and no held-out leak."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from simulate import simulate, simulate_2pl

from engine.analysis.cells import build_cells
from engine.analysis.stats import kendall_tau_b, spearman
from engine.analysis.subset import _fit, _greedy, choose_subset, filter_text, parse_size


def test_parse_size_counts_and_percentages() -> None:
    assert parse_size("40", 200) == 40
    assert parse_size("20%", 200) == 40
    assert parse_size(" 12.5% ", 80) == 10
    assert parse_size("0.1%", 100) == 1          # at least one test
    for bad, words in (("abc", "a number of tests"), ("0", "at least one"), ("100%", "a share"),
                       ("200", "hold 200 tests"), ("-3", "at least one")):
        with pytest.raises(ValueError, match=words):
            parse_size(bad, 200)


def test_rank_correlations_agree_with_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(0, 6, 12).astype(float)      # ties on purpose
        y = x + rng.integers(-2, 3, 12)
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
        assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
    assert np.isnan(spearman(np.ones(5), np.arange(5.0))) and np.isnan(kendall_tau_b([1.0, 2.0], [1.0, 2.0]))


# 30 models × 200 tests × 3 attempts drawn from a 2PL (theta, b ~ N(0, 1), log a ~ N(0, 0.5²)), --subset 20%.
# Measured over seeds 0-4: held-out Spearman 0.92-0.98, MAE 0.017-0.030 against 0.035-0.037 for random subsets.
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_twenty_percent_keeps_the_ranking_of_held_out_models_and_beats_random(seed: int) -> None:
    df, _ = simulate_2pl(np.random.default_rng(seed), models=30, tests=200, repeats=3)
    cells = build_cells(df)
    result = choose_subset(cells, parse_size("20%", 200))
    holdout = result.holdout
    assert result.method == "irt-information" and result.size == 40 and holdout is not None
    assert holdout.models == 30
    assert holdout.spearman >= 0.9 and holdout.kendall >= 0.75
    assert holdout.mae < 0.85 * holdout.random_mae
    assert holdout.random_worse_share >= 0.8
    assert holdout.spearman > holdout.random_spearman
    # The figures are what they say: recomputed from the models table.
    table = result.models
    assert holdout.mae == pytest.approx((table["held_out"] - table["full"]).abs().mean())
    assert holdout.spearman == pytest.approx(spearman(table["held_out"], table["full"]))
    full = cells.n_passed.sum(axis=0) / cells.n_scored.sum(axis=0)   # equal attempts: the mean of the shares
    assert np.allclose(table.set_index("model").loc[cells.models, "full"], full)
    assert len(set(result.test_ids())) == 40 and result.calls_share == pytest.approx(0.2)


@pytest.mark.parametrize("seed", [0, 1])
def test_suite_simulation_with_cases_keeps_the_ranking(seed: int) -> None:
    """The statistics simulation (one slope for all, correlated cases): ranking kept, random beaten.

    Seeds 0-4: held-out Spearman 0.97-0.99, MAE 0.020-0.025 against 0.033-0.036 for random subsets.
    """
    rng = np.random.default_rng(100 + seed)
    df, _ = simulate(rng, rng.normal(0, 1, 25), tests=80, cases=3, repeats=3)
    result = choose_subset(build_cells(df), parse_size("20%", 240))
    assert result.holdout is not None
    assert result.holdout.spearman >= 0.9
    assert result.holdout.mae < 0.85 * result.holdout.random_mae


def test_saturated_and_floor_tests_are_not_chosen() -> None:
    df, _ = simulate_2pl(np.random.default_rng(7), models=12, tests=60, repeats=3)
    easy = df[df["test_id"].isin([f"t{i}" for i in range(20)])].index
    hard = df[df["test_id"].isin([f"t{i}" for i in range(20, 30)])].index
    df.loc[easy, ["score", "passed"]] = [1.0, True]
    df.loc[hard, ["score", "passed"]] = [0.0, False]
    result = choose_subset(build_cells(df), 15)
    chosen = {int(t[1:]) for t in result.selected["test_id"]}
    assert chosen and min(chosen) >= 30, chosen


def test_held_out_estimate_sees_only_its_subset_answers() -> None:
    """No leak: a held-out model's estimate moves with its answers on its own subset, never with the rest."""
    df, _ = simulate_2pl(np.random.default_rng(3), models=10, tests=80, repeats=2)
    cells = build_cells(df)
    before = choose_subset(cells, 16)
    h = cells.models.index("m4")
    others = np.arange(len(cells.models)) != h
    fold = _fit(cells.n_scored[:, others], cells.n_passed[:, others], tol=1e-4)
    assert fold is not None
    pick = set(cells.items["test_id"].iloc[_greedy(fold, cells.n_scored[:, others], 16)])
    outside = (df["model"] == "m4") & ~df["test_id"].isin(pick)
    flipped = df.copy()
    flipped.loc[outside, "passed"] = ~flipped.loc[outside, "passed"].astype(bool)
    flipped.loc[outside, "score"] = flipped.loc[outside, "passed"].astype(float)
    after = choose_subset(build_cells(flipped), 16)
    row = lambda r: r.models.set_index("model").loc["m4"]  # noqa: E731
    assert row(after)["full"] != pytest.approx(row(before)["full"])        # its full score moved ...
    assert row(after)["held_out"] == pytest.approx(row(before)["held_out"])  # ... its held-out estimate did not


def test_too_few_models_are_said_not_informative() -> None:
    df, _ = simulate_2pl(np.random.default_rng(1), models=4, tests=40, repeats=3)
    four = choose_subset(build_cells(df), 8)
    assert four.method == "difficulty-strata" and four.holdout is None
    assert any("not informative" in n and "IRT fit needs 5" in n for n in four.notes)
    assert four.models["held_out"].isna().all() and four.models["estimate"].notna().all()
    assert any("handful of tests" in n for n in four.notes)     # 8 tests < 10

    df, _ = simulate_2pl(np.random.default_rng(1), models=5, tests=40, repeats=3)
    five = choose_subset(build_cells(df), 12)
    assert five.method == "irt-information" and five.holdout is None
    assert any("held-out check needs 6" in n and "not informative" in n for n in five.notes)

    df, _ = simulate_2pl(np.random.default_rng(1), models=7, tests=40, repeats=3)
    seven = choose_subset(build_cells(df), 12)
    assert seven.holdout is not None and seven.holdout.models == 7
    assert any("only 7 held-out models" in n for n in seven.notes)


def test_filter_text_is_commented_and_lists_the_tests() -> None:
    df, _ = simulate_2pl(np.random.default_rng(2), models=8, tests=30, repeats=2)
    result = choose_subset(build_cells(df), 6)
    text = filter_text(result, "engine analyze r --subset 6", ["r"])
    lines = text.splitlines()
    entries = [line for line in lines if not line.startswith("#")]
    assert entries == sorted(f"sim/{t}" for t in result.selected["test_id"])
    assert lines[0] == "# engine analyze r --subset 6" and any("held out" in line for line in lines)


def test_one_model_or_no_spread_still_answers() -> None:
    frame = pd.concat([simulate_2pl(np.random.default_rng(5), models=1, tests=20, repeats=2)[0]])
    result = choose_subset(build_cells(frame), 5)
    assert result.method == "difficulty-strata" and len(result.selected) == 5
    with pytest.raises(ValueError, match="1 to 19"):
        choose_subset(build_cells(frame), 20)
