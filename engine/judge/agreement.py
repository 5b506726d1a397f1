"""Agreement statistics for judges: percent agreement, Cohen's κ, weighted κ, Krippendorff's α.

Pure functions over plain sequences (no pandas), each returning None when the figure is undefined for the
data (no pairs; no variation to agree beyond chance) rather than a made-up 0 or 1. Every definition is
written out in docs/analysis.md ("Judges"); tests/analysis/test_judges.py checks each against tables
computed by hand and against the worked example of Krippendorff (2011).

- `agreement`: share of pairs with equal values.
- `within_one`: share of numeric pairs at most one grade apart.
- `cohen_kappa`: Cohen (1960), nominal: κ = (p_o - p_e) / (1 - p_e), p_e = Σ_k p_A(k) p_B(k).
- `weighted_kappa`: Cohen (1968) with quadratic disagreement weights w_ij = ((i - j) / (K - 1))²:
  κ_w = 1 - Σ w_ij o_ij / Σ w_ij e_ij, o observed and e chance (product of marginals) proportions.
- `krippendorff_alpha`: Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": α = 1 - D_o / D_e
  from the coincidence matrix, any number of coders, missing values allowed, nominal / ordinal / interval.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

__all__ = ["METRICS", "agreement", "cohen_kappa", "krippendorff_alpha", "weighted_kappa", "within_one"]

METRICS = ("nominal", "ordinal", "interval")


def agreement(a: Sequence[Any], b: Sequence[Any]) -> float | None:
    """Share of positions where `a` and `b` hold the same value; None for no pairs."""
    _same_length(a, b)
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a) if a else None


def within_one(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Share of numeric pairs at most 1 apart (adjacent grades count as agreeing); None for no pairs."""
    _same_length(a, b)
    return sum(abs(x - y) <= 1 for x, y in zip(a, b, strict=True)) / len(a) if a else None


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float | None:
    """Cohen's κ (nominal) of two coders over the same items.

    Returns:
        κ, or None when there are no pairs or chance agreement is 1 (both coders gave one same value
        throughout: agreement beyond chance is undefined).
    """
    _same_length(a, b)
    n = len(a)
    if not n:
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    count_a, count_b = Counter(a), Counter(b)
    expected = sum(count_a[k] * count_b[k] for k in count_a) / (n * n)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def weighted_kappa(a: Sequence[Hashable], b: Sequence[Hashable], order: Sequence[Hashable]) -> float | None:
    """Cohen's weighted κ with quadratic weights over the ordered categories `order`.

    Returns:
        κ_w, or None when there are no pairs or the chance-weighted disagreement is 0.

    Raises:
        ValueError: a value not in `order`.
    """
    _same_length(a, b)
    n = len(a)
    if not n or len(order) < 2:
        return None
    rank = {value: i for i, value in enumerate(order)}
    k = len(order)
    try:
        pairs = [(rank[x], rank[y]) for x, y in zip(a, b, strict=True)]
    except KeyError as exc:
        raise ValueError(f"value {exc.args[0]!r} is not one of the ordered categories {list(order)}") from None
    row, col = Counter(i for i, _ in pairs), Counter(j for _, j in pairs)

    def weight(i: int, j: int) -> float:
        return ((i - j) / (k - 1)) ** 2

    observed = sum(weight(i, j) for i, j in pairs) / n
    expected = sum(weight(i, j) * row[i] * col[j] for i in row for j in col) / (n * n)
    if expected == 0:
        return None
    return 1.0 - observed / expected


def krippendorff_alpha(units: Sequence[Sequence[Any]], metric: str = "nominal",
                       order: Sequence[Any] | None = None) -> float | None:
    """Krippendorff's α over units (items) each holding the values its coders gave (None: not coded).

    Args:
        units: One sequence per unit; units with fewer than two values are not pairable and are left out.
        metric: nominal, ordinal (ranks in `order`, else the values' sorted order) or interval (numbers).
        order: The ordered categories for the ordinal metric (categories no coder used count 0).

    Returns:
        α, or None when fewer than two pairable values exist or the values do not vary (D_e = 0).
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    coincidences: defaultdict[tuple[Any, Any], float] = defaultdict(float)
    for unit in units:
        values = [v for v in unit if v is not None]
        m = len(values)
        if m < 2:
            continue
        for i, c in enumerate(values):
            for j, k in enumerate(values):
                if i != j:
                    coincidences[(c, k)] += 1.0 / (m - 1)
    totals: defaultdict[Any, float] = defaultdict(float)
    for (c, _), weight in coincidences.items():
        totals[c] += weight
    n = sum(totals.values())
    if n <= 1:
        return None
    delta = _delta(metric, totals, order)
    observed = sum(weight * delta(c, k) for (c, k), weight in coincidences.items())
    expected = sum(totals[c] * totals[k] * delta(c, k) for c in totals for k in totals)
    if expected == 0:
        return None
    return 1.0 - (n - 1) * observed / expected


def _delta(metric: str, totals: Mapping[Any, float], order: Sequence[Any] | None) -> Any:
    """δ²(c, k) of the metric (Krippendorff 2011, section E)."""
    if metric == "nominal":
        return lambda c, k: 0.0 if c == k else 1.0
    if metric == "interval":
        return lambda c, k: (float(c) - float(k)) ** 2
    ranked = list(order) if order is not None else sorted(totals)
    rank = {value: i for i, value in enumerate(ranked)}
    counts = [totals.get(value, 0.0) for value in ranked]

    def ordinal(c: Any, k: Any) -> float:
        low, high = sorted((rank[c], rank[k]))
        between = sum(counts[low:high + 1])
        return (between - (counts[low] + counts[high]) / 2) ** 2

    return ordinal


def _same_length(a: Sequence[Any], b: Sequence[Any]) -> None:
    if len(a) != len(b):
        raise ValueError(f"two coders must grade the same items: {len(a)} values against {len(b)}")
