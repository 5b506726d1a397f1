"""Composition: `all`, `any`, `not`, weights, thresholds and `must` gates. The only place they live.

Every node of an evaluator spec becomes one Verdict; compositions keep their children's verdicts so
results can show the breakdown. Leaves are looked up in the registry handed in by
`engine.evaluators` and never see negation, weights or thresholds.

Scoring rules (docs/evaluators.md has the full story):

- `all`: weighted mean of the children whose weight is > 0 (weights default 1; `weight: 0` is
  reported, never counted). Without a threshold it passes when every counted child passed.
- `any`: the best counted child. Without a threshold it passes when one counted child passed.
- `not`: 1 - the child's score; passes when the child did not.
- `threshold` on any node: passed = score >= threshold.
- `must: true` on a child: when that child fails, the parent fails whatever its score (a gate).
- A child that could not judge (an error verdict) makes its parent an error too: its score is
  not trustworthy, and errors are kept apart from fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.base.render import TemplateSyntaxError, UndefinedError, is_template, render_value
from engine.evaluators.base import COMMON_KEYS, EvalContext, Leaf, error
from engine.model import Answer, Verdict

COMPOSITIONS = frozenset({"all", "any", "not", "use"})

# Nodes without a template string in their own keys read the same for every answer: their kind,
# common options and (for leaves) value and options are worked out once per spec object (from its
# second use on) and reused across cases, repeats and models. Keyed by id() with the spec kept in
# the entry, so an id is never reused while cached; specs are treated as immutable once a test
# holds them (the loader builds them).
_Common = tuple[float, float | None, str | None, bool]   # weight, threshold, name, must
_Static = tuple[Mapping[str, Any], str, _Common, Any, dict[str, Any]]
_STATIC: dict[int, _Static] = {}
_SEEN: dict[int, Mapping[str, Any]] = {}   # specs scored once so far (same id rule)
_STATIC_LIMIT = 100_000
_NO_VALUE = object()


def has_template(value: Any) -> bool:
    """True when `render_value` would render something inside `value` (it walks dicts and lists alike).

    Args:
        value: A YAML value.
    """
    if isinstance(value, str):
        return is_template(value)
    if isinstance(value, Mapping):
        return any(has_template(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_template(v) for v in value)
    return False


def short(value: Any, limit: int = 60) -> str:
    """`repr` of a value cut to one readable line (long answers are truncated with an ellipsis)."""
    text = repr(value).replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def node_kind(spec: Mapping[str, Any], registry: Mapping[str, Leaf]) -> str:
    """The evaluator key of a node: the one key that names a composition or a catalogue entry.

    Raises:
        ValueError: when the node names no known evaluator or several.
    """
    kinds = [k for k in spec if k in COMPOSITIONS or k in registry]
    if len(kinds) == 1:
        return str(kinds[0])
    if not kinds:
        unknown = [k for k in spec if k not in COMMON_KEYS]
        raise ValueError(f"unknown evaluator {', '.join(map(repr, unknown)) or '(empty mapping)'}; "
                         f"known: {', '.join(sorted(set(registry) | COMPOSITIONS))}")
    raise ValueError(f"one evaluator per mapping, found {', '.join(map(repr, kinds))}; "
                     "wrap several in `all: [...]`")


def _common(spec: Mapping[str, Any], variables: Mapping[str, Any]) -> tuple[float, float | None, str | None, bool]:
    """Read weight, threshold, name and must (they may be templates too)."""
    weight = float(_rendered(spec.get("weight", 1), variables))
    raw_threshold = spec.get("threshold")
    threshold = None if raw_threshold is None else float(_rendered(raw_threshold, variables))
    name = spec.get("name")
    must = bool(_rendered(spec.get("must", False), variables))
    if weight < 0:
        raise ValueError(f"weight must be >= 0, got {weight}")
    if threshold is not None and not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be between 0 and 1, got {threshold}")
    return weight, threshold, None if name is None else str(name), must


_SCALARS = frozenset({int, float, bool, type(None)})


def _rendered(value: Any, variables: Mapping[str, Any]) -> Any:
    """`render_value`, skipped for the plain numbers and booleans it would return unchanged."""
    return value if type(value) in _SCALARS else render_value(value, variables)


def evaluate_node(spec: Any, answer: Answer, ctx: EvalContext, registry: Mapping[str, Leaf],
                  root_threshold: float | None = None) -> Verdict:
    """Score one node of an evaluator spec (and its subtree). Never raises.

    Args:
        spec: The node as written: a one-key mapping plus common options.
        answer: The normalised answer.
        ctx: The evaluation context.
        registry: YAML key -> leaf function.
        root_threshold: For the root node only: the test's threshold, used when the node has none.
    """
    kind = "?"
    try:
        if type(spec) is not dict and not isinstance(spec, Mapping):
            return error(f"an evaluator must be a mapping like {{contains: Paris}}, got {short(spec)}")
        static = _STATIC.get(id(spec))
        if static is not None and static[0] is spec:
            kind = static[1]
            weight, threshold, name, must = static[2]
        else:
            try:
                kind = node_kind(spec, registry)
            except ValueError as exc:
                return error(str(exc))
            weight, threshold, name, must = _common(spec, ctx.variables)
            if _SEEN.get(id(spec)) is spec:   # scored before: worth keeping (a spec scored once is not)
                _SEEN.pop(id(spec), None)   # pop, not del: exec specs are scored on worker threads too
                static = _remember(spec, kind, (weight, threshold, name, must), ctx.variables)
            else:
                static = None   # (a stale entry under a reused id must not be used)
                if len(_SEEN) >= _STATIC_LIMIT:
                    _SEEN.clear()
                _SEEN[id(spec)] = spec
        if kind in COMPOSITIONS:
            result = _composite(kind, spec, answer, ctx, registry)
        elif static is not None:
            result = _call_leaf(kind, static[3], dict(static[4]), answer, ctx, registry)
        else:
            result = _leaf(kind, spec, answer, ctx, registry)
    except (UndefinedError, TemplateSyntaxError) as exc:
        return error(f"template error in the {kind} evaluator: {exc}", kind=kind)
    except Exception as exc:  # noqa: BLE001 - a crash becomes an error verdict, never a stopped run
        return error(f"{kind} evaluator could not judge: {type(exc).__name__}: {exc}", kind=kind)

    score = min(1.0, max(0.0, result.score))
    effective = threshold if threshold is not None else root_threshold
    passed = result.passed if effective is None else score >= effective
    gated = [c for c in result.children if c.details.get("must") and not c.passed]
    reason = result.reason
    if gated and not result.error:
        passed = False
        gate = gated[0]
        reason = f"required check {gate.name or gate.kind} failed: {gate.reason}"
    if result.error:
        passed = False
    if (not must and threshold is None and not gated and passed is result.passed and kind == result.kind
            and name == result.name and weight == result.weight and score == result.score
            and type(score) is type(result.score)):
        return result   # the node adds nothing to its own verdict (the usual leaf): no copy needed
    details = dict(result.details)
    if must:
        details["must"] = True
    if threshold is not None:
        details["threshold"] = threshold
    return Verdict(score=score, passed=passed, reason=reason, kind=kind, name=name, weight=weight,
                   error=result.error, children=result.children, details=details)


def _remember(spec: Mapping[str, Any], kind: str, common: tuple[float, float | None, str | None, bool],
              variables: Mapping[str, Any]) -> _Static | None:
    """Cache a node whose own keys hold no template (children of a composition are nodes of their own)."""
    own = [v for k, v in spec.items() if k != kind] if kind in COMPOSITIONS else list(spec.values())
    if has_template(own):
        return None
    value: Any = _NO_VALUE
    options: dict[str, Any] = {}
    if kind not in COMPOSITIONS:
        value = render_value(spec[kind], variables)
        options = {k: render_value(v, variables) for k, v in spec.items() if k != kind and k not in COMMON_KEYS}
    if len(_STATIC) >= _STATIC_LIMIT:
        _STATIC.clear()
    static: _Static = (spec, kind, common, value, options)
    _STATIC[id(spec)] = static
    return static


def _leaf(kind: str, spec: Mapping[str, Any], answer: Answer, ctx: EvalContext,
          registry: Mapping[str, Leaf]) -> Verdict:
    value = render_value(spec[kind], ctx.variables)
    options = {k: render_value(v, ctx.variables) for k, v in spec.items() if k != kind and k not in COMMON_KEYS}
    return _call_leaf(kind, value, options, answer, ctx, registry)


def _call_leaf(kind: str, value: Any, options: dict[str, Any], answer: Answer, ctx: EvalContext,
               registry: Mapping[str, Leaf]) -> Verdict:
    verdict = registry[kind](value, options, answer, ctx)
    if not isinstance(verdict, Verdict):
        return error(f"{kind} evaluator returned {type(verdict).__name__}, not a Verdict", kind=kind)
    return verdict


def _children(kind: str, spec: Mapping[str, Any], answer: Answer, ctx: EvalContext,
              registry: Mapping[str, Leaf]) -> list[Verdict]:
    items = spec[kind]
    if kind == "not":
        items = [items]
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError(f"`{kind}` takes a non-empty list of evaluators, got {short(items)}")
    return [evaluate_node(item, answer, ctx, registry) for item in items]


def _label(verdict: Verdict) -> str:
    return verdict.name or verdict.kind or "check"


def _composite(kind: str, spec: Mapping[str, Any], answer: Answer, ctx: EvalContext,
               registry: Mapping[str, Leaf]) -> Verdict:
    if kind == "use":
        # The loader replaces `use: NAME` by the named evaluator; reaching here means it did not.
        return error(f"named evaluator {short(spec['use'])} was not resolved; define it under the suite's "
                     "`evaluators:` and check its spelling", kind="use")
    children = tuple(_children(kind, spec, answer, ctx, registry))
    counted = [c for c in children if c.weight > 0]
    errors = [c for c in children if c.error and (c.weight > 0 or c.details.get("must"))]
    if errors:
        first = errors[0]
        return Verdict(score=0.0, passed=False, error=True, kind=kind, children=children,
                       reason=f"could not judge {_label(first)}: {first.reason}")
    if kind == "not":
        child = children[0]
        score = 1.0 - child.score
        passed = not child.passed
        reason = (f"as required, {_label(child)} did not pass ({child.reason})" if passed
                  else f"{_label(child)} passed but must not: {child.reason}")
        return Verdict(score=score, passed=passed, reason=reason, kind=kind, children=children)
    if not counted:
        return Verdict(score=1.0, passed=True, reason="no counted checks (every weight is 0)", kind=kind,
                       children=children)
    if kind == "all":
        total = sum(c.weight for c in counted)
        score = sum(c.weight * c.score for c in counted) / total
        failed = [c for c in counted if not c.passed]
        passed = not failed
        ok = len(counted) - len(failed)
        if passed:
            report_only = len(children) - len(counted)
            reason = f"all {len(counted)} checks passed" + (f" (+{report_only} report-only)" if report_only else "")
        else:
            reason = (f"{ok} of {len(counted)} checks passed (score {score:.2f}); "
                      f"{_label(failed[0])}: {failed[0].reason}")
        return Verdict(score=score, passed=passed, reason=reason, kind=kind, children=children)
    # any
    best = max(counted, key=lambda c: (c.passed, c.score))
    passed = any(c.passed for c in counted)
    score = max(c.score for c in counted)
    reason = (f"{_label(best)} passed: {best.reason}" if passed
              else f"none of {len(counted)} alternatives passed; best {_label(best)}: {best.reason}")
    return Verdict(score=score, passed=passed, reason=reason, kind=kind, children=children)
