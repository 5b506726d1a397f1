"""The DuckDB path (engine/analysis/large.py) gives the same analysis as the in-memory path.

Real Parquet run folders with every awkward row the statistics treat specially: error rows, NaN scores, rows
without `passed` (judged by threshold), missing thresholds, fallback rows, truncation, mixed temperatures,
unreported tokens and costs, a test whose hash changed between runs, several runs and parts, agent rows.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from builders import AGENT_SCHEMA, row, write_run
from typer.testing import CliRunner

from engine.analysis import load
from engine.analysis.large import choose_engine, count_rows, grid_from_parquet
from engine.analysis.load import find_parquet_files
from engine.analysis.summary import analyze, analyze_grid
from engine.cli import app
from engine.errors import ResultsError

pytest.importorskip("duckdb")

MODELS = ("alpha", "beta", "gamma")


def _rows(rng: np.random.Generator, run: int) -> list[dict]:
    out = []
    skill = {"alpha": 0.8, "beta": 0.55, "gamma": 0.3}
    for suite in ("s1", "s2"):
        for t in range(9):
            cases = [None] if t % 3 else [0, 1]
            for case in cases:
                for model in MODELS:
                    for attempt in range(1 + (t % 2) * 2):
                        u = rng.random()
                        score: float | None = float(u < skill[model]) if t % 4 else round(float(u), 3)
                        fields: dict = {
                            "run_id": f"run-{run}", "model": model, "suite": suite, "test_id": f"t{t}",
                            "test_hash": f"h-{t}-{run if t == 5 else 0}", "case_index": case, "attempt": attempt,
                            "threshold": 0.5 if t % 4 == 0 else 1.0, "temperature": 0.0 if model != "gamma" else 0.7,
                            "latency_s": round(float(rng.gamma(2.0, 0.3)), 4), "ttft_visible_s": float(rng.random()),
                            "prompt_tokens": int(rng.integers(5, 50)), "completion_tokens": int(rng.integers(1, 30)),
                            "cost": round(float(rng.random()) / 100, 6),
                            "tags": None if t == 2 else ["easy"] if t < 4 else ["hard"],
                            "truncated": bool(rng.random() < 0.1),
                        }
                        if rng.random() < 0.08:
                            fields.update(score=None, passed=None, error_kind=str(rng.choice(["timeout", "http_500"])))
                        else:
                            judged = None if rng.random() < 0.2 else score >= fields["threshold"]
                            fields.update(score=score, passed=judged)
                        if model == "beta" and rng.random() < 0.2:
                            fields.update(prompt_tokens=None, completion_tokens=None, cost=None)
                        if model == "alpha" and rng.random() < 0.15:   # answered from the response cache
                            fields.update(cached=True)
                        if model == "beta" and attempt == 1:   # answered through a provider's batch
                            fields.update(batch_id=f"batch_{run}")
                        if model == "gamma" and rng.random() < 0.05:
                            fields.update(fallback=True)
                        if t == 8 and suite == "s1":   # no threshold, no verdict: judged against 1.0
                            fields.update(threshold=None, passed=None)
                        out.append(row(**fields))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list:
    rng = np.random.default_rng(7)
    base = tmp_path_factory.mktemp("large")
    folders = [write_run(base / f"run-{i}", _rows(rng, i), parts=2) for i in range(3)]
    # An agent run: the agent columns exist only in this folder's files.
    agent = [row(run_id="run-a", model=m, suite="agents", test_id=f"a{t}", test_hash=f"ha{t}", score=float(t % 2),
                 passed=bool(t % 2), turns=t + 1, prose_turns=t % 2, tool_calls_made=t, invented_tools=int(t % 3 == 0),
                 bad_tool_args=0, outcome=("completed", "capped")[t % 2]) for m in MODELS for t in range(4)]
    folders.append(write_run(base / "run-a", agent, schema=AGENT_SCHEMA))
    # A run with prompt variants: each variant has its own hash; one test was edited under one variant.
    varied = [row(run_id=f"run-v{i}", model=m, suite="variants", test_id=f"v{t}", variant=v,
                  score=float((t + i) % 2), passed=bool((t + i) % 2),
                  test_hash=f"hv{t}-{v}" + ("-edited" if t == 1 and v == "b" and i else ""))
              for i in range(2) for m in MODELS for t in range(3) for v in ("a", "b")]
    folders.append(write_run(base / "run-v", varied))
    return folders


def _close(a: object, b: object) -> bool:
    """Equal, floats to 1e-9 relative (the two paths sum in different orders)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _same(a: pd.DataFrame | None, b: pd.DataFrame | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False,
                                  check_exact=False, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("include_fallback", "cluster_by", "variants"),
                         [(False, "test", True), (True, "case", True), (False, "test", False)])
def test_duckdb_path_equals_in_memory_path(runs: list, include_fallback: bool, cluster_by: str,
                                           variants: bool) -> None:
    runs = runs if variants else runs[:-1]
    memory = analyze(load(runs, include_fallback=include_fallback), cluster_by=cluster_by)
    cells, rows, agents = grid_from_parquet(runs, include_fallback=include_fallback, cluster_by=cluster_by)
    out_of_core = analyze_grid(cells, rows, agents=agents)
    assert len(memory.models) == 3 and memory.tests.shape[0] > 25   # the fixture is not trivially small
    assert memory.models["error_rows"].sum() > 0 and memory.models["fallback_rows"].sum() > 0
    # t5's hash differs between runs; v1 was edited under one variant only (its other variant has another hash).
    changed = sorted(memory.tests.loc[memory.tests["hash_changed"], "test_id"])
    assert changed == (["t5", "t5", "v1"] if variants else ["t5", "t5"])
    for name in ("models", "tests", "suites", "tags", "passk", "agents"):
        _same(getattr(memory, name), getattr(out_of_core, name))
    assert _close([c.to_dict() for c in memory.comparisons], [c.to_dict() for c in out_of_core.comparisons])
    # The variant tables are computed in memory only (docs/analysis.md); every other note is the same.
    assert [n for n in memory.notes if not n.startswith("prompt variants")] == out_of_core.notes


def test_duckdb_grid_matches_hand_counts(runs: list) -> None:
    """One cell checked against the rows themselves, not against the other path."""
    df = load(runs)
    cells, rows, _ = grid_from_parquet(runs)
    sel = df[(df["suite"] == "s2") & (df["test_id"] == "t1") & (df["model"] == "alpha")]
    i = int(np.flatnonzero((cells.items["suite"] == "s2") & (cells.items["test_id"] == "t1"))[0])
    j = cells.models.index("alpha")
    scored = sel["score"].notna()
    assert cells.n_rows[i, j] == len(sel) and cells.n_scored[i, j] == scored.sum()
    assert math.isclose(cells.score[i, j], sel.loc[scored, "score"].mean())
    alpha_rows = df[df["model"] == "alpha"]
    assert rows.rows[j] == len(alpha_rows)
    timed = alpha_rows.loc[~alpha_rows["cached"].fillna(False).astype(bool), "latency_s"]
    assert len(timed) < len(alpha_rows) and rows.cached is not None and rows.cached[j] == len(alpha_rows) - len(timed)
    batched = df[df["model"] == "beta"]["batch_id"].notna().sum()
    assert rows.batched is not None and batched > 0
    assert (rows.batched[cells.models.index("beta")], rows.batched[j]) == (batched, 0)
    assert math.isclose(rows.latency[j, 1], float(np.quantile(timed, 0.9)))
    assert rows.fallback["rows"] == {"gamma": int(load(runs, include_fallback=True)["fallback"].sum())}


def test_auto_switches_on_row_count(runs: list, monkeypatch: pytest.MonkeyPatch) -> None:
    files = find_parquet_files(runs)
    total = count_rows(files)
    assert total == len(load(runs, include_fallback=True))
    assert choose_engine(files, row_limit=total)[0] == "pandas"
    engine, why = choose_engine(files, row_limit=total - 1)
    assert engine == "duckdb" and f"{total:,} rows" in why
    monkeypatch.setitem(sys.modules, "duckdb", None)   # as if the extra were not installed
    engine, why = choose_engine(files, row_limit=10)
    assert engine == "pandas" and "pip install '.[duckdb]'" in why
    with pytest.raises(ResultsError, match=r"\[duckdb\]"):
        choose_engine(files, "duckdb")


def test_cli_engine_option_and_glob(runs: list) -> None:
    runner = CliRunner()
    glob = str(runs[0].parent / "run-[0-9]")
    outputs = {}
    for engine in ("pandas", "duckdb"):
        result = runner.invoke(app, ["analyze", glob, "--format", "json", "--engine", engine])
        assert result.exit_code == 0, result.output
        outputs[engine] = json.loads(result.stdout)
    assert _close(outputs["pandas"], outputs["duckdb"])
    assert {m["model"] for m in outputs["duckdb"]["models"]} == set(MODELS)
    assert sum(m["rows"] for m in outputs["duckdb"]["models"]) == len(load(runs[:3]))
    bad = runner.invoke(app, ["analyze", str(runs[0]), "--engine", "spark"])
    assert bad.exit_code == 2 and "--engine spark" in bad.output


def test_has_values_reads_footers_and_falls_back_to_the_column(tmp_path: Path) -> None:
    """The judges section's second load is skipped only when no row has a judge verdict."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.analysis.load import has_values

    def write(name: str, values: list, *, statistics: bool = True) -> Path:
        path = tmp_path / name
        pq.write_table(pa.table({"judge_calls": pa.array(values, pa.int32()), "x": list(range(len(values)))}),
                       path, row_group_size=2, write_statistics=statistics)
        return path

    empty, judged = write("empty.parquet", [None] * 5), write("judged.parquet", [None, None, None, None, 1])
    bare = tmp_path / "bare.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), bare)
    assert not has_values([empty, bare], "judge_calls")
    assert has_values([empty, judged], "judge_calls")    # the value sits in the last row group
    assert has_values([write("nostats.parquet", [None, 2], statistics=False)], "judge_calls")
    assert not has_values([write("nostats-empty.parquet", [None, None], statistics=False)], "judge_calls")
