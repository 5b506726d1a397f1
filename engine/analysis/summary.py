"""Everything `engine analyze` shows, computed once from one grid."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.analysis.agents import per_model_agents
from engine.analysis.cells import CLUSTER_KEYS, DEFAULT_CLUSTER, Cells, build_cells
from engine.analysis.compare import Comparison, compare_to_best
from engine.analysis.items import DEFAULT_ALPHA, DEFAULT_CORRECTION, STATUS_ORDER, per_test, suite_health
from engine.analysis.models import UNSCORED_NOTE, ModelRows, failed_fallbacks, model_rows, per_model
from engine.analysis.passk import pass_k_table
from engine.analysis.stats import DEFAULT_LEVEL
from engine.analysis.variants import VariantComparison, compare_variants, has_variants, per_variant

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Analysis:
    """The tables of one analysis.

    Args:
        models: `per_model` output, best first.
        tests: `per_test` output.
        suites: `suite_health(tests, "suite")`.
        tags: `suite_health(tests, "tag")`.
        passk: `pass_k_table` output (pass@k and pass^k per model, per suite and overall).
        comparisons: The best model against each other model.
        agents: `per_model_agents` output (turns, tool calls, invented tools, outcomes), or None when the
            results hold no multi-turn conversation (a single-turn run shows nothing of it).
        notes: Sentences about the data as a whole (one model, rows left out, ...).
        variants: `per_variant` output (one row per model and prompt variant), or None without variants.
        variant_comparisons: Per model, its best variant against each other one (engine.analysis.variants).
        cluster_by: "test" (intervals over clusters of (suite, test_id)) or "case".
        level: Interval coverage.
        alpha: Error rate of the "discriminating" call.
        correction: "bh" (false-discovery rate) or "holm" (family-wise error rate).
        fallback_included: Rows a fallback model served were kept (`--include-fallback`), not left out.
    """

    models: pd.DataFrame
    tests: pd.DataFrame
    suites: pd.DataFrame
    tags: pd.DataFrame
    passk: pd.DataFrame | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    agents: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    cluster_by: str = DEFAULT_CLUSTER
    level: float = DEFAULT_LEVEL
    alpha: float = DEFAULT_ALPHA
    correction: str = DEFAULT_CORRECTION
    variants: pd.DataFrame | None = None
    variant_comparisons: list[VariantComparison] = field(default_factory=list)
    fallback_included: bool = False

    @property
    def interval_method(self) -> str:
        """How the intervals were made, in words (shown in every output)."""
        keys = ", ".join(CLUSTER_KEYS[self.cluster_by])
        return f"{self.level:.0%} cluster-robust t-intervals, clusters = ({keys})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tables as lists of records, NaN and infinities as None."""
        return {
            "cluster_by": list(CLUSTER_KEYS[self.cluster_by]),
            "interval": self.interval_method,
            "level": self.level,
            "alpha": self.alpha,
            "correction": self.correction,
            "models": _records(self.models),
            "tests": _records(self.tests),
            "suites": _records(self.suites),
            "tags": _records(self.tags),
            "passk": _records(self.passk) if self.passk is not None else [],
            "comparisons": [c.to_dict() for c in self.comparisons],
            "agents": _records(self.agents) if self.agents is not None else [],
            "notes": list(self.notes),
            "variants": _records(self.variants) if self.variants is not None else [],
            "variant_comparisons": [c.to_dict() for c in self.variant_comparisons],
        }


def json_safe(value: Any) -> Any:
    """Recursively make a value strict-JSON safe: numpy to Python, NaN and ±inf to None, tuples to lists."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is not None and not isinstance(value, (str, int, float, bool, dict, list)):
        import pandas as pd

        if pd.isna(value):
            return None
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [json_safe(row) for row in frame.to_dict(orient="records")]


def summary_lines(analysis: Analysis, *, comparisons: int = 3) -> list[str]:
    """What `engine analyze` says first, in a few lines: what was analysed (errors and fallback rows counted
    apart), the model with the best mean score and the paired verdicts against it, and how the tests class.
    Every figure is one a table below shows; nothing is computed here.

    Args:
        analysis: The analysis.
        comparisons: Verdicts shown at most (the comparisons table holds them all).
    """
    models, tests = analysis.models, analysis.tests
    rows, errors = int(models["rows"].sum()), int(models["error_rows"].sum())
    unscored = int(models["unscored_rows"].sum()) if "unscored_rows" in models else 0
    fallback = int(models["fallback_rows"].sum()) if "fallback_rows" in models else 0
    what = (f"{len(models)} model{'s' if len(models) != 1 else ''}, {len(tests)} test{'s' if len(tests) != 1 else ''}"
            f" (each case counts as one), {rows} rows: {rows - errors - unscored} scored, {errors} errors (not "
            f"scored)" + (f", {unscored} recorded unscored (eval: {{none: true}})" if unscored else ""))
    if fallback:
        what += f"; {fallback} rows served by a fallback model " + ("included" if analysis.fallback_included
                                                                       else "left out")
    lines = [what]
    scored = models[models["tests"] > 0]
    if len(scored):
        best = scored.iloc[0]
        lines.append(f"best mean score: {best['model']} {best['mean_score']:.3f}, pass rate "
                     f"{_share(best['pass_rate'])} [{_share(best['pass_lo'])}, {_share(best['pass_hi'])}] over "
                     f"{int(best['tests'])} tests")
    lines += [c.verdict for c in analysis.comparisons[:comparisons]]
    if len(analysis.comparisons) > comparisons:
        lines.append(f"... {len(analysis.comparisons) - comparisons} more verdicts in the paired comparisons table")
    counts = tests["status"].value_counts() if len(tests) else None
    if counts is not None:
        classes = ", ".join(f"{int(counts[s])} {s}" for s in STATUS_ORDER if counts.get(s))
        flaky = int(tests["flaky"].sum())
        lines.append(f"tests: {classes}" + (f"; {flaky} flaky" if flaky else "")
                     + (" (saturated: every model passes most of its attempts)" if counts.get("saturated") else ""))
    return lines


def _share(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.1%}"


def analyze(df: pd.DataFrame, *, alpha: float = DEFAULT_ALPHA, level: float = DEFAULT_LEVEL,
            cluster_by: str = DEFAULT_CLUSTER, ks: list[int] | None = None, seed: int = 0,
            correction: str = DEFAULT_CORRECTION, cells: Cells | None = None) -> Analysis:
    """Per-model and per-test tables, pass@k, suite and tag health, and the best model against the others.

    Args:
        df: Results rows (from `load`).
        alpha: False-discovery rate of the "discriminating" call (see `per_test`).
        level: Interval coverage.
        cluster_by: "test" (default: clusters of (suite, test_id)) or "case".
        ks: The k values of pass@k / pass^k; None: 1, 2, 3, 5, 10, ... up to the attempts.
        seed: Seed of the Monte Carlo permutations (only for tests with more than 400 attempts).
        correction: "bh" (Benjamini-Hochberg: false-discovery rate alpha) or "holm" (family-wise rate alpha).
        cells: The grid already built from `df` with the same `cluster_by` (saves building it again).
    """
    cells = cells if cells is not None else build_cells(df, cluster_by=cluster_by)
    analysis = analyze_grid(cells, model_rows(df, cells), agents=per_model_agents(df), alpha=alpha, level=level,
                            ks=ks, seed=seed, correction=correction)
    if has_variants(df):
        analysis.variants = per_variant(df, level=level, cluster_by=cluster_by)
        analysis.variant_comparisons = compare_variants(df, level=level, cluster_by=cluster_by,
                                                        table=analysis.variants)
        analysis.notes.append("prompt variants: the model tables pool a test's variants (each cell averages every "
                              "variant's attempts); the variant tables compare them within each model, paired by test")
    return analysis


def analyze_grid(cells: Cells, rows: ModelRows, *, agents: pd.DataFrame | None = None,
                 alpha: float = DEFAULT_ALPHA, level: float = DEFAULT_LEVEL, ks: list[int] | None = None,
                 seed: int = 0, correction: str = DEFAULT_CORRECTION) -> Analysis:
    """`analyze` from aggregates alone: the grid, the per-model row figures and the agent table.

    Every statistic reads only these, which is what lets `engine.analysis.large` compute them in DuckDB
    over more rows than pandas should hold and still call the same functions.

    Args:
        cells: The test × model grid.
        rows: Row-level figures per model (`models.model_rows` or the DuckDB path).
        agents: `per_model_agents` output or None.
        alpha, level, ks, seed, correction: As for `analyze`.
    """
    models = per_model(level=level, cells=cells, rows=rows)
    tests = per_test(alpha=alpha, cells=cells, seed=seed, correction=correction,
                     left_out=failed_fallbacks(rows.fallback))
    notes = _notes(cells, rows)
    order = [m for m in models["model"] if m in cells.models and cells.has_data[:, cells.models.index(m)].any()]
    comparisons = compare_to_best(None, cells=cells, order=order, level=level)
    return Analysis(models=models, tests=tests, suites=suite_health(tests, "suite"),
                    tags=suite_health(tests, "tag"), passk=pass_k_table(ks=ks, level=level, cells=cells),
                    comparisons=comparisons, agents=agents,
                    notes=notes, cluster_by=cells.cluster_by, level=level, alpha=alpha,
                    correction=correction, fallback_included=bool(rows.fallback.get("included")))


def _counts(names: list[str], values: np.ndarray) -> str:
    return ", ".join(f"{n}: {int(v)}" for n, v in zip(names, values, strict=True) if v)


def _notes(cells: Cells, rows: ModelRows) -> list[str]:
    """Sentences about the data as a whole, including a count for every row the statistics leave out."""
    notes = []
    n_rows = int(rows.rows.sum())
    if not n_rows:
        notes.append("no results: the runs hold zero rows")
    if len(cells.models) == 1:
        notes.append(f"one model ({cells.models[0]}): discrimination and comparisons need two or more models")
    if cells.n_clusters == 1:
        notes.append("one test cluster: intervals over tests cannot be computed (they need two or more)")
    fallback = rows.fallback
    if fallback["rows"]:
        total = sum(fallback["rows"].values())
        shown = ", ".join(f"{m}: {c}" for m, c in sorted(fallback["rows"].items()))
        if fallback["included"]:
            notes.append(f"{total} rows served by a fallback model are included (--include-fallback) ({shown})")
        else:
            notes.append(f"{total} rows served by a fallback model were left out ({shown}); "
                         f"--include-fallback keeps them")
            unclassed = failed_fallbacks(fallback)
            if unclassed:
                notes.append(f"{len(unclassed)} test{'s' if len(unclassed) != 1 else ''} with failing rows among "
                             f"them {'are' if len(unclassed) != 1 else 'is'} not classed (status "
                             f"fallback-left-out): the rows left would show them better than they went")
    if n_rows:
        errors = rows.errors
        if errors.sum():
            notes.append(f"{int(errors.sum())} error rows are not scored (they are not zeros) "
                         f"({_counts(cells.models, errors)})")
        unscored = rows.unscored
        if unscored is not None and unscored.sum():
            notes.append(f"{int(unscored.sum())} rows {UNSCORED_NOTE} ({_counts(cells.models, unscored)})")
        if not cells.has_data.any():
            notes.append("every row is an error: no score to analyse (see error_kind / error_message)"
                         if unscored is None or not unscored.sum() else
                         "no row is scored (they are errors or recorded unscored): no score to analyse")
    present = cells.has_data
    if present.any() and int(cells.n_scored[present].max()) == 1 and len(cells.models) >= 2:
        notes.append("one attempt per model and test: no single test can show a difference beyond noise, so no "
                     "test is called discriminating; run with repeat: 3 or more, and rank tests by item-rest r")
    return notes
