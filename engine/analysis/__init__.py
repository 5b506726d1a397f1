"""Analysis of results Parquet with pandas: load, per-model, per-test, comparisons, diffs, HTML report.

Importable from a notebook without running anything::

    from engine.analysis import load, per_model, per_test, compare, pass_k_table
    df = load("results/latest")
    per_model(df)          # intervals over clusters of (suite, test_id)
    pass_k_table(df)       # pass@k and pass^k per model and suite
"""

from __future__ import annotations

from engine.analysis.cells import Cells, build_cells
from engine.analysis.compare import MIN_PAIRED_TESTS, Comparison, Diff, compare, compare_to_best, diff
from engine.analysis.homogeneity import homogeneity_p_values
from engine.analysis.irt import IRTResult, fit_2pl
from engine.analysis.items import per_test, suite_health
from engine.analysis.load import ANALYSIS_COLUMNS, ResultsError, find_parquet_files, load
from engine.analysis.models import TOKENS_NOT_REPORTED, per_model
from engine.analysis.passk import pass_at_k, pass_hat_k, pass_k_table
from engine.analysis.stats import (
    benjamini_hochberg,
    cluster_bootstrap_means,
    cluster_t_interval,
    mcnemar_exact,
    percentile_ci,
    t_quantile,
)
from engine.analysis.summary import Analysis, analyze

__all__ = [
    "ANALYSIS_COLUMNS",
    "MIN_PAIRED_TESTS",
    "TOKENS_NOT_REPORTED",
    "Analysis",
    "Cells",
    "Comparison",
    "Diff",
    "IRTResult",
    "ResultsError",
    "analyze",
    "benjamini_hochberg",
    "build_cells",
    "cluster_bootstrap_means",
    "cluster_t_interval",
    "compare",
    "compare_to_best",
    "diff",
    "find_parquet_files",
    "fit_2pl",
    "homogeneity_p_values",
    "load",
    "mcnemar_exact",
    "pass_at_k",
    "pass_hat_k",
    "pass_k_table",
    "per_model",
    "per_test",
    "percentile_ci",
    "suite_health",
    "t_quantile",
]
