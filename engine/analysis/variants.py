"""Prompt variants compared the way models are (docs/analysis.md, "Variants").

Within one model, each variant is a column of the test grid: the model's rows are relabelled so that
`model` holds the variant name, and `per_model`, `build_cells` and `compare_to_best` run on them unchanged.
So a variant's score is the mean over tests of its mean over attempts, with the same cluster-robust
t-interval, and two variants are compared paired by test (suite, test_id, case_index) with the same
verdict rule as two models: the paired interval of the mean difference and McNemar's exact test must agree.

Variants are compared within a model, never across models: "cot beats terse on model A" is a claim about
model A. Rows without a variant (a suite without `variants:`) are left out of these tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.analysis.cells import DEFAULT_CLUSTER, build_cells
from engine.analysis.compare import Comparison, compare_to_best
from engine.analysis.load import FALLBACK_ATTR
from engine.analysis.models import per_model
from engine.analysis.stats import DEFAULT_LEVEL

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["VariantComparison", "compare_variants", "has_variants", "per_variant"]


@dataclass(frozen=True)
class VariantComparison:
    """Two variants of one model, paired by test (`comparison.model_a` / `model_b` hold the variant names)."""

    model: str
    comparison: Comparison

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the comparison's fields with `variant_a` / `variant_b`, and the model."""
        fields = self.comparison.to_dict()
        fields["variant_a"], fields["variant_b"] = fields.pop("model_a"), fields.pop("model_b")
        return {"model": self.model, **fields}


def _named(df: pd.DataFrame) -> pd.Series:
    """Each row's variant name, or None (null or "")."""
    if "variant" not in df.columns:
        import pandas as pd

        return pd.Series([None] * len(df), index=df.index, dtype=object)
    variant = df["variant"].astype(object)
    return variant.where(variant.notna() & (variant != ""), None)


def has_variants(df: pd.DataFrame) -> bool:
    """Whether the rows hold at least one named variant."""
    return bool(_named(df).notna().any())


def _by_variant(df: pd.DataFrame, model: str) -> pd.DataFrame:
    """One model's rows with a variant, `model` relabelled as the variant (the grid's columns)."""
    named = _named(df)
    mine = df[(df["model"].astype(str) == model) & named.notna()].copy()
    mine["model"] = named[mine.index].astype(str)
    # Fallback counts are per model; relabelled, they would name no column (the model tables report them).
    mine.attrs = {FALLBACK_ATTR: {"included": False, "rows": {}}}
    return mine


def _models(df: pd.DataFrame) -> list[str]:
    named = _named(df)
    return sorted({str(m) for m in df.loc[named.notna(), "model"]})


def per_variant(df: pd.DataFrame, *, level: float = DEFAULT_LEVEL, cluster_by: str = DEFAULT_CLUSTER
                ) -> pd.DataFrame:
    """One row per (model, variant): `per_model`'s columns with `variant`, best variant first within a model.

    Args:
        df: Results rows (from `load`).
        level: Interval coverage.
        cluster_by: "test" or "case".
    """
    import pandas as pd

    frames = []
    for model in _models(df):
        table = per_model(_by_variant(df, model), level=level, cluster_by=cluster_by)
        table = table.rename(columns={"model": "variant"})
        table.insert(0, "model", model)
        frames.append(table)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def compare_variants(df: pd.DataFrame, *, level: float = DEFAULT_LEVEL, cluster_by: str = DEFAULT_CLUSTER,
                     table: pd.DataFrame | None = None) -> list[VariantComparison]:
    """Per model: its best variant (highest mean score) against each other variant, paired by test.

    Args:
        df: Results rows (from `load`).
        level: Interval coverage (McNemar is read at 1 − level).
        cluster_by: "test" or "case".
        table: `per_variant(df)` already computed (its order names the best variant), or None.
    """
    table = table if table is not None else per_variant(df, level=level, cluster_by=cluster_by)
    out: list[VariantComparison] = []
    for model in _models(df):
        rows = _by_variant(df, model)
        cells = build_cells(rows, cluster_by=cluster_by)
        mine = table[table["model"] == model]
        order = [v for v in mine["variant"] if v in cells.models
                 and cells.has_data[:, cells.models.index(v)].any()]
        out.extend(VariantComparison(model, c) for c in compare_to_best(rows, cells=cells, order=order, level=level))
    return out
