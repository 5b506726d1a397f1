"""Everything `engine analyze` shows, computed once from one grid."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.analysis.cells import build_cells
from engine.analysis.compare import Comparison, compare_to_best
from engine.analysis.items import DEFAULT_EPSILON, per_test, suite_health
from engine.analysis.models import per_model
from engine.analysis.stats import DEFAULT_RESAMPLES

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
        comparisons: The best model against each other model.
        notes: Sentences about the data as a whole (one model, errors, ...).
    """

    models: pd.DataFrame
    tests: pd.DataFrame
    suites: pd.DataFrame
    tags: pd.DataFrame
    comparisons: list[Comparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tables as lists of records, NaN as None."""
        return {
            "models": _records(self.models),
            "tests": _records(self.tests),
            "suites": _records(self.suites),
            "tags": _records(self.tags),
            "comparisons": [c.to_dict() for c in self.comparisons],
            "notes": list(self.notes),
        }


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    import math

    out = []
    for row in frame.to_dict(orient="records"):
        clean: dict[str, Any] = {}
        for key, value in row.items():
            if isinstance(value, tuple):
                value = list(value)
            elif hasattr(value, "item"):
                value = value.item()
            if isinstance(value, float) and math.isnan(value):
                value = None
            clean[str(key)] = value
        out.append(clean)
    return out


def analyze(df: pd.DataFrame, *, epsilon: float = DEFAULT_EPSILON, resamples: int = DEFAULT_RESAMPLES,
            seed: int = 0) -> Analysis:
    """Per-model and per-test tables, suite and tag health, and the best model against the others.

    Args:
        df: Results rows (from `load`).
        epsilon: Score differences below this count as none (see `per_test`).
        resamples: Bootstrap resamples.
        seed: Bootstrap seed.
    """
    cells = build_cells(df)
    models = per_model(df, resamples=resamples, seed=seed, cells=cells)
    tests = per_test(df, epsilon=epsilon, cells=cells)
    notes = []
    if len(cells.models) == 1:
        notes.append(f"one model ({cells.models[0]}): discrimination and comparisons need two or more models")
    if len(tests) == 1:
        notes.append("one test: CIs over tests are degenerate (a single cluster)")
    if len(df) and not cells.has_data.any():
        notes.append("every row is an error: no score to analyse (see error_kind / error_message)")
    order = [m for m in models["model"] if cells.has_data[:, cells.models.index(m)].any()]
    comparisons = compare_to_best(df, cells=cells, order=order, resamples=max(resamples, 1000), seed=seed)
    return Analysis(models=models, tests=tests, suites=suite_health(tests, "suite"),
                    tags=suite_health(tests, "tag"), comparisons=comparisons, notes=notes)
