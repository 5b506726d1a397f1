"""Analysis of results Parquet with pandas: load, per-model, per-test, comparisons, diffs, HTML report.

Importable from a notebook without running anything::

    from engine.analysis import load, per_model, per_test, compare
    df = load("results/latest")
    per_model(df)
"""

from __future__ import annotations

from engine.analysis.cells import Cells, build_cells
from engine.analysis.compare import Comparison, Diff, compare, compare_to_best, diff
from engine.analysis.irt import IRTResult, fit_2pl
from engine.analysis.items import per_test, suite_health
from engine.analysis.load import ANALYSIS_COLUMNS, ResultsError, find_parquet_files, load
from engine.analysis.models import TOKENS_NOT_REPORTED, per_model
from engine.analysis.stats import cluster_bootstrap_means, mcnemar_exact, percentile_ci
from engine.analysis.summary import Analysis, analyze

__all__ = [
    "ANALYSIS_COLUMNS",
    "TOKENS_NOT_REPORTED",
    "Analysis",
    "Cells",
    "Comparison",
    "Diff",
    "IRTResult",
    "ResultsError",
    "analyze",
    "build_cells",
    "cluster_bootstrap_means",
    "compare",
    "compare_to_best",
    "diff",
    "find_parquet_files",
    "fit_2pl",
    "load",
    "mcnemar_exact",
    "per_model",
    "per_test",
    "percentile_ci",
    "suite_health",
]
