"""What a schema cannot say: references, templates, and each evaluator kind's own load-time checks.

These run after schema validation, on parts that passed it. Each check appends Diagnostics to a
`Report` (file + positions) instead of raising, so every problem in a file is reported in one pass.
The checks of one evaluator kind (a regex compiles, an inner JSON Schema is valid, a harness exists)
live with the kind, in its registry entry (engine.evaluators.registry); this module runs them.
Compiled templates are cached: a 10,000-test suite repeats the same few strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from engine.base.render import ENV, TemplateSyntaxError, is_template, simple_names
from engine.base.words import did_you_mean
from engine.base.yaml import Positions
from engine.errors import Diagnostic
from engine.evaluators import COMMON_KEYS, COMPOSITIONS, KINDS, CheckSite
from engine.evaluators.markers import UNSCORED

__all__ = [
    "RESERVED_VARIABLES",
    "EvaluatorResolver",
    "Report",
    "check_golden_shape",
    "template_names",
    "walk_strings",
]

RESERVED_VARIABLES = frozenset({"golden", "test_id", "suite"})
_GLOBALS = frozenset(ENV.globals)


@dataclass
class Report:
    """Collects diagnostics for one file, pointing into it by path."""

    file: str
    positions: Positions
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def error(self, path: tuple[Any, ...], message: str, *, key: bool = False) -> None:
        """Add an error at the value (or key) at `path`."""
        line, col = self.positions.of(path, key=key)
        self.diagnostics.append(Diagnostic(self.file, line, col, message))

    def warning(self, path: tuple[Any, ...], message: str, *, key: bool = False) -> None:
        """Add a warning at the value (or key) at `path`: shown, but validation still passes."""
        line, col = self.positions.of(path, key=key)
        self.diagnostics.append(Diagnostic(self.file, line, col, message, severity="warning"))

    @property
    def failed(self) -> bool:
        return any(d.severity == "error" for d in self.diagnostics)


@lru_cache(maxsize=8192)
def template_names(text: str) -> frozenset[str] | str:
    """The variables a template uses, or the syntax error's message when it does not compile."""
    if not is_template(text):
        return frozenset()
    simple = simple_names(text)
    if simple is not None:
        return frozenset(simple)
    from jinja2 import meta

    try:
        parsed = ENV.parse(text)
    except TemplateSyntaxError as exc:
        where = f" (line {exc.lineno} of the text)" if exc.lineno and "\n" in text.strip() else ""
        return f"{exc.message}{where}"
    return frozenset(meta.find_undeclared_variables(parsed)) - _GLOBALS


def walk_strings(value: Any, path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str]]:
    """Every string inside a YAML value (in mappings and lists), with its path, in document order.

    A list filled by one recursive walk (a chain of generators would pass each string up through every level):
    it runs on every test's golden and evaluator.
    """
    found: list[tuple[tuple[Any, ...], str]] = []
    _strings_into(value, path, found)
    return found


def _strings_into(value: Any, path: tuple[Any, ...], found: list[tuple[tuple[Any, ...], str]]) -> None:
    # Concrete types first: YAML gives str, list and dict, and `Mapping` is an ABC, slow to ask.
    if isinstance(value, str):
        found.append((path, value))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _strings_into(item, path + (index,), found)
    elif isinstance(value, (dict, Mapping)):
        for key, item in value.items():
            _strings_into(item, path + (key,), found)


class EvaluatorResolver:
    """Checks evaluator specs and inlines `{use: name}` references.

    Args:
        named: The suite's `evaluators:` mapping (already schema-valid).
        report: Where problems go.
        suite_dir: The suite's folder, for `exec.harness: ./file.yaml`.
    """

    def __init__(self, named: Mapping[str, Any], report: Report, suite_dir: Path) -> None:
        self.named = named
        self.report = report
        self.suite_dir = suite_dir
        self._resolved: dict[str, Any] = {}
        self._broken: set[str] = set()
        self._stack: list[str] = []

    def check_definitions(self) -> None:
        """Check every named evaluator once (regexes, inner schemas, templates, references)."""
        for name in self.named:
            self.resolve_named(name, ("evaluators", name))

    def resolve_named(self, name: str, site: tuple[Any, ...]) -> Any:
        """The named evaluator with its own references inlined, or None when it is broken/unknown."""
        if name in self._resolved:
            return self._resolved[name]
        if name in self._broken:
            return None
        if name not in self.named:
            guess = did_you_mean(name, self.named)
            hint = f" — did you mean '{guess}'?" if guess else " — define it under `evaluators:` at the top"
            self.report.error(site, f"unknown named evaluator '{name}'{hint}")
            return None
        if name in self._stack:
            cycle = " -> ".join([*self._stack[self._stack.index(name):], name])
            self.report.error(("evaluators", name), f"named evaluators refer to each other in a loop: {cycle}")
            self._broken.add(name)
            return None
        self._stack.append(name)
        try:
            resolved = self.resolve(self.named[name], ("evaluators", name))
        finally:
            self._stack.pop()
        if resolved is None:
            self._broken.add(name)
        else:
            self._resolved[name] = resolved
        return resolved

    def resolve(self, spec: Any, path: tuple[Any, ...]) -> Any:
        """Check one evaluator spec at `path` and return it with `use` inlined (None when broken)."""
        if not isinstance(spec, Mapping):
            return None
        kind = next((k for k in spec if k in KINDS), None)   # the kind's key, wherever options sit beside it
        if kind is None:
            return None
        value = spec[kind]
        here = path + (kind,)
        if kind == "use":
            target = self.resolve_named(str(value), here)
            if target is None:
                return None
            merged = dict(target)
            for option in COMMON_KEYS:  # options written beside `use:` win over the named ones
                if option in spec:
                    merged[option] = spec[option]
            merged.setdefault("name", str(value))
            return merged
        ok = True
        if kind in ("all", "any"):
            children = [self.resolve(child, here + (i,)) for i, child in enumerate(value)]
            ok = all(c is not None for c in children)
            value = children
        elif kind == "not":
            value = self.resolve(value, here)
            ok = value is not None
            children = [value]
        else:
            children = []
        for index, child in enumerate(children):
            if isinstance(child, Mapping) and UNSCORED in child:
                self.report.error(here if kind == "not" else here + (index,), f"`{UNSCORED}: true` stands alone "
                                  f"as a test's whole eval (answers recorded unscored); inside `{kind}` it would "
                                  "be a check that neither passes nor fails; remove it")
                ok = False
        if kind not in COMPOSITIONS:
            ok = self._check_leaf(kind, value, spec, path)
        for text_path, text in walk_strings(spec if kind not in COMPOSITIONS else
                                            {k: v for k, v in spec.items() if k in COMMON_KEYS}, path):
            problem = template_names(text)
            if isinstance(problem, str):
                self.report.error(text_path, f"this template does not compile: {problem}")
                ok = False
        if not ok:
            return None
        out = dict(spec)
        out[kind] = value
        return out

    def _check_leaf(self, kind: str, value: Any, spec: Mapping[str, Any], path: tuple[Any, ...]) -> bool:
        """Run the kind's own load-time check (its registry entry); True when it found nothing."""
        check = KINDS[kind].check
        if check is None:
            return True
        before = self._errors()
        check(value, spec, CheckSite(error=lambda where, message: self.report.error(path + where, message),
                                     suite_dir=self.suite_dir,
                                     warning=lambda where, message: self.report.warning(path + where, message,
                                                                                         key=True)))
        return self._errors() == before   # warnings do not break the spec

    def _errors(self) -> int:
        return sum(d.severity == "error" for d in self.report.diagnostics)


def check_golden_shape(raw: Mapping[str, Any], path: tuple[Any, ...], report: Report) -> None:
    """A test's mapping golden: `eval:` indented under it by mistake, a malformed `tool_calls:` envelope."""
    golden = raw.get("golden")
    if not isinstance(golden, dict):
        return
    if "eval" in golden and "eval" not in raw:
        report.error(path + ("golden", "eval"), "`eval:` is indented under `golden:`, so it became part "
                     "of the golden answer and this test has no evaluator; line `eval:` up with "
                     "`golden:`", key=True)
    if "tool_calls" in golden:
        calls = golden["tool_calls"]
        if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                                   for c in calls):
            report.error(path + ("golden", "tool_calls"), "a golden `tool_calls:` must be a list of "
                         "{name: ..., arguments: {...}} mappings")
            return
        for i, call in enumerate(calls):
            extra = set(call) - {"name", "arguments"}
            if extra:
                report.error(path + ("golden", "tool_calls", i), f"a golden tool call has only `name` and "
                             f"`arguments`; remove {', '.join(sorted(extra))}")
            elif not isinstance(call.get("arguments", {}), dict):
                report.error(path + ("golden", "tool_calls", i, "arguments"),
                             "golden tool-call `arguments` must be a mapping of argument -> value")
