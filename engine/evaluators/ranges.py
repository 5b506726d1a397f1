"""The bounds a recorded figure or a count must keep (`{min, max}`, and `equals` for counts), read once from an
evaluator's value, with the JSON Schema that the catalogue declares for them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.base.words import short
from engine.errors import EvaluatorConfigError

__all__ = ["Range", "bounds_schema", "parse_range"]


@dataclass(frozen=True, slots=True)
class Range:
    """The bounds a figure must keep: `equals`, or `min` and/or `max` (inclusive)."""

    low: float | None
    high: float | None
    exact: float | None

    def holds(self, got: float) -> bool:
        if self.exact is not None:
            return got == self.exact
        return (self.low is None or got >= self.low) and (self.high is None or got <= self.high)

    def words(self, unit: Callable[[float], str]) -> str:
        if self.exact is not None:
            return f"exactly {unit(self.exact)}"
        if self.low is not None and self.high is not None:
            return f"between {unit(self.low)} and {unit(self.high)}"
        return f"at most {unit(self.high)}" if self.high is not None else f"at least {unit(self.low or 0)}"


def parse_range(kind: str, value: Any, extra: tuple[str, ...], *, exact: bool, whole: bool) -> Range:
    """`{min, max}` (and `equals` for counts) from the node's value, checked once."""
    bounds = ("equals", "min", "max") if exact else ("min", "max")
    if not isinstance(value, Mapping):
        raise EvaluatorConfigError(f"{kind} takes a mapping like {{{kind}: {{max: 2}}}}, got {short(value)}",
                                   kind=kind)
    unknown = [k for k in value if k not in (*bounds, *extra)]
    if unknown:
        raise EvaluatorConfigError(f"{kind}: unknown option {unknown[0]!r}; use {', '.join((*bounds, *extra))}",
                                   kind=kind, option=str(unknown[0]))
    got: dict[str, float | None] = {}
    for name in bounds:
        raw = value.get(name)
        if raw is None:
            got[name] = None
            continue
        if not _number(raw) or raw < 0 or (whole and raw != int(raw)):
            what = "a whole number >= 0" if whole else "a number >= 0"
            raise EvaluatorConfigError(f"{kind}: {name} must be {what}, got {short(raw)}", kind=kind, option=name)
        got[name] = float(raw)
    low, high, equal = got.get("min"), got.get("max"), got.get("equals")
    if low is None and high is None and equal is None:
        raise EvaluatorConfigError(f"{kind}: give {' or '.join(bounds)}, e.g. {{{kind}: {{max: 2}}}}", kind=kind)
    if equal is not None and (low is not None or high is not None):
        raise EvaluatorConfigError(f"{kind}: `equals` cannot be combined with min or max; keep one", kind=kind,
                                   option="equals")
    if low is not None and high is not None and low > high:
        raise EvaluatorConfigError(f"{kind}: min {low:g} is above max {high:g}; swap them", kind=kind, option="min")
    return Range(low, high, equal)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def bounds_schema(integer: bool, exact: bool, **extra: Any) -> dict[str, Any]:
    """The schema of `{min, max}` (with `exact`, `equals` too) over numbers or, with `integer`, whole numbers."""
    number = {"type": "integer" if integer else "number", "minimum": 0}
    props: dict[str, Any] = {"min": {**number, "description": "At least this (inclusive)."},
                             "max": {**number, "description": "At most this (inclusive)."}}
    if exact:
        props["equals"] = {**number, "description": "Exactly this."}
    return {"type": "object", "additionalProperties": False, "minProperties": 1, "properties": {**props, **extra}}

