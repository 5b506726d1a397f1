"""The optional 2PL IRT fit: recovery of known parameters, refusals, extreme tests, and `engine analyze --irt`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from builders import grid_rows, write_run

from engine.analysis import IRTResult, build_cells, fit_2pl, load
from engine.analysis.irt import irt_sections
from tests.engine_proc import run_engine


def simulate(seed: int, models: int = 12, tests: int = 200, attempts: int = 10
             ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """Pass/fail rows drawn from a 2PL with known theta ~ N(0, 1), b ~ N(0, 1), log a ~ N(0, 0.5²)."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, 1, models)
    b = rng.normal(0, 1, tests)
    a = np.exp(rng.normal(0, 0.5, tests))
    chance = 1 / (1 + np.exp(-a[:, None] * (theta[None, :] - b[:, None])))
    passed = rng.random((tests, models, attempts)) < chance[:, :, None]
    test, model, _ = np.meshgrid(np.arange(tests), np.arange(models), np.arange(attempts), indexing="ij")
    df = pd.DataFrame({
        "suite": "s", "test_id": [f"t{i:03d}" for i in test.ravel()], "case_index": None,
        "model": [f"m{j:02d}" for j in model.ravel()], "score": passed.ravel().astype(float),
        "passed": passed.ravel(), "threshold": 1.0, "tags": [[] for _ in range(passed.size)],
        "test_hash": "h", "truncated": False,
    })
    return df, theta, b, a


def thetas_in_order(result: IRTResult, models: int) -> np.ndarray:
    return result.models.set_index("model").loc[[f"m{j:02d}" for j in range(models)], "theta"].to_numpy()


# 12 models × 200 tests × 10 attempts. With 5 attempts the fit is as good as the data allow but a's
# correlation drops to ~0.78 on average (0.64 at worst over 20 seeds): each a rests on 12 pass counts.
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_known_parameters(seed: int) -> None:
    df, theta, b, a = simulate(seed)
    result = fit_2pl(df)
    assert result.fitted and result.converged, result.note
    items = result.items
    assert list(items["test_id"]) == [f"t{i:03d}" for i in range(200)]
    assert np.corrcoef(items["b"], b)[0, 1] > 0.9
    assert np.corrcoef(items["a"], a)[0, 1] > 0.7
    assert np.corrcoef(thetas_in_order(result, 12), theta)[0, 1] > 0.9
    # Correlations ignore magnitude (a fit with every a near 1 still correlates): also compare the values on
    # the true parameters' own standardised scale (theta mean 0, sd 1 over these 12 models).
    true_a, true_b = a * theta.std(), (b - theta.mean()) / theta.std()
    assert np.median(np.abs(np.log(items["a"] / true_a))) < 0.25
    assert 0.6 < np.log(items["a"]).std() / np.log(true_a).std() < 1.4
    assert np.median(np.abs(items["b"] - true_b)) < 0.35
    # The scale is identified: theta has mean 0 and sd 1 over the models.
    assert abs(result.models["theta"].mean()) < 1e-9
    assert result.models["theta"].std(ddof=0) == pytest.approx(1.0)
    assert (result.models["theta"].diff().dropna() <= 0).all()  # highest ability first
    assert (result.models["theta_se"] > 0).all() and (items["b_se"] > 0).all()


def test_accepts_a_prebuilt_grid() -> None:
    df, *_ = simulate(3, models=6, tests=30, attempts=3)
    from_grid = fit_2pl(build_cells(df))
    from_rows = fit_2pl(df)
    assert from_grid.fitted and np.allclose(from_grid.items["b"], from_rows.items["b"])


def test_refuses_too_few_models_or_tests_with_a_note() -> None:
    df, *_ = simulate(4, models=4, tests=50, attempts=3)
    few_models = fit_2pl(df)
    assert not few_models.fitted and few_models.items.empty and few_models.models.empty
    assert "4 models with scores" in few_models.note and "at least 5" in few_models.note
    assert fit_2pl(df, min_models=4).fitted
    few_tests = fit_2pl(simulate(5, models=8, tests=6)[0])
    assert not few_tests.fitted and "6 tests with scores" in few_tests.note
    with pytest.raises(ValueError, match="min_models=2"):
        fit_2pl(df, min_models=2)


def test_models_with_only_errors_do_not_count() -> None:
    df, *_ = simulate(6, models=5, tests=30, attempts=2)
    errors = df[df["model"] == "m00"].assign(model="broken", score=np.nan, passed=None)
    result = fit_2pl(pd.concat([df, errors], ignore_index=True))
    assert result.fitted and "broken" not in set(result.models["model"])
    assert not fit_2pl(pd.concat([df[df["model"] != "m01"], errors], ignore_index=True)).fitted


def test_identical_models_are_refused() -> None:
    df, *_ = simulate(7, models=1, tests=30, attempts=2)
    clones = pd.concat([df.assign(model=f"m{j}") for j in range(6)], ignore_index=True)
    result = fit_2pl(clones)
    assert not result.fitted and "same pass counts" in result.note


def test_tests_everyone_passes_or_fails_stay_finite_and_are_flagged() -> None:
    df, *_ = simulate(8, models=8, tests=60, attempts=4)
    first = df[df["test_id"] == "t000"]
    extremes = pd.concat([first.assign(test_id="all-pass", score=1.0, passed=True),
                          first.assign(test_id="all-fail", score=0.0, passed=False)], ignore_index=True)
    result = fit_2pl(pd.concat([df, extremes], ignore_index=True))
    assert result.fitted and result.converged
    items = result.items.set_index("test_id")
    assert np.isfinite(items[["a", "b", "b_se"]].to_numpy()).all()
    assert np.isfinite(result.models[["theta", "theta_se"]].to_numpy()).all()
    assert items.loc["all-pass", "flag"] == "everyone passes" and items.loc["all-fail", "flag"] == "everyone fails"
    assert items.loc["all-pass", "b"] < result.models["theta"].min()
    assert items.loc["all-fail", "b"] > result.models["theta"].max()
    ranked = [row[0] for _, _, rows in irt_sections(result, top=5)[1:] for row in rows]
    assert len(ranked) == 10 and "s/all-pass" not in ranked and "s/all-fail" not in ranked
    others = items.drop(index=["all-pass", "all-fail"])
    assert (others["flag"] == np.where(others["pass_share"] == 1, "everyone passes",
                                       np.where(others["pass_share"] == 0, "everyone fails", ""))).all()


def engine(*args: str) -> subprocess.CompletedProcess[str]:
    """`engine ARGS` as a separate process (tests/engine_proc.py: forked from a pre-imported interpreter)."""
    return run_engine(*args)


def write_simulated_run(folder: Path, models: int, tests: int = 24, attempts: int = 3, seed: int = 9) -> Path:
    """A real Parquet run whose pass/fail attempts follow a 2PL (scores 0 or 1, threshold 1)."""
    df, *_ = simulate(seed, models=models, tests=tests, attempts=attempts)
    grid: dict[str, dict[str, list[float]]] = {}
    for (model, test), group in df.groupby(["model", "test_id"], sort=True):
        grid.setdefault(str(model), {})[str(test)] = group["score"].tolist()
    return write_run(folder, grid_rows(grid))


def test_cli_irt_prints_abilities_and_discrimination(tmp_path: Path) -> None:
    run = write_simulated_run(tmp_path / "results" / "run-1", models=7)
    df = load(run)
    expected = fit_2pl(df)
    done = engine("analyze", str(tmp_path / "results"), "--irt")
    assert done.returncode == 0, done.stderr
    assert "Models (mean over tests" in done.stdout  # the plain tables still come first
    assert "IRT abilities" in done.stdout and "IRT lowest discrimination (bottom 10)" in done.stdout
    assert "IRT highest discrimination (top 10)" in done.stdout
    best = expected.models.iloc[0]
    assert f"{best.theta:+.2f} [{best.theta_lo:+.2f}, {best.theta_hi:+.2f}]" in done.stdout
    assert best.theta_lo == pytest.approx(best.theta - 1.959964 * best.theta_se)
    assert "not a test between two models" in done.stdout  # intervals, never pairwise significance
    assert "only 7 models" in done.stdout
    flagged = int((expected.items["flag"] != "").sum())
    assert flagged and f"note: {flagged} test" in done.stdout and "left out of the IRT discrimination" in done.stdout
    payload = json.loads(engine("analyze", str(run), "--irt", "-f", "json").stdout)
    assert payload["irt"]["fitted"] and len(payload["irt"]["items"]) == 24
    assert [m["model"] for m in payload["irt"]["models"]] == list(expected.models["model"])
    markdown = engine("analyze", str(run), "--irt", "-f", "markdown").stdout
    assert "### IRT abilities" in markdown and "| model | theta [95% interval] |" in markdown
    plain = engine("analyze", str(run))
    assert plain.returncode == 0 and "IRT" not in plain.stdout


def test_cli_irt_refusal_and_csv_usage(tmp_path: Path) -> None:
    run = write_simulated_run(tmp_path / "run", models=3)
    done = engine("analyze", str(run), "--irt")
    assert done.returncode == 0, done.stderr
    assert "IRT not fitted: 3 models with scores" in done.stdout and "IRT abilities" not in done.stdout
    payload = json.loads(engine("analyze", str(run), "--irt", "-f", "json").stdout)
    assert payload["irt"]["fitted"] is False and payload["irt"]["models"] == []
    csv = engine("analyze", str(run), "--irt", "-f", "csv")
    assert csv.returncode == 2 and "--irt" in csv.stderr and "Traceback" not in csv.stderr
