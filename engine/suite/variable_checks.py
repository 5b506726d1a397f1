"""Does every case row give each variable the test's templates use? One check per test, over all its rows.

The templates of a test (id, prompt, system text, messages, golden, evaluator, named evaluators at their
`use:`) are collected once with the variables each uses; every row is then checked against that list, and a
missing variable is an error at the row (inline `cases:`) or at the file row (`cases_from`, said once per
test and variable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine.base.render import is_template
from engine.base.words import did_you_mean
from engine.evaluators import COMMON_KEYS
from engine.evaluators.node import has_template
from engine.model.cases import CaseOrigin
from engine.suite.checks import RESERVED_VARIABLES, EvaluatorResolver, Report, template_names, walk_strings
from engine.suite.content_parts import part_sources

__all__ = ["Template", "VariableChecks"]

# (where it is written, what it is in words, the variables it uses)
Template = tuple[tuple[Any, ...], str, frozenset[str]]


class VariableChecks:
    """The variable checks of one suite file (named evaluators' variables are found once per name)."""

    def __init__(self, resolver: EvaluatorResolver, report: Report) -> None:
        self.resolver = resolver
        self.report = report
        self._named_vars: dict[str, frozenset[str]] = {}
        self._told: set[tuple[tuple[Any, ...], str]] = set()   # (test, variable) missing from a file row, said

    def templates(self, raw: Mapping[str, Any], path: tuple[Any, ...], system: Any,
                  system_path: tuple[Any, ...], spec: Any, eval_path: tuple[Any, ...] | None) -> list[Template]:
        """The test's templates; one that does not compile is an error here (and is left out).

        Args:
            raw: The test as written.
            path: Its path (`("tests", 3)`).
            system: Its system text (its own or the default's), at `system_path`.
            spec: The evaluator spec as written (its own or the default's) at `eval_path`; None: no evaluator.
        """
        report = self.report
        found: list[Template] = []
        # Only template text can add anything (`template_names` of any other text is empty), so the paths of
        # the usual plain id, prompt, system text and golden are never built.
        sources: list[tuple[tuple[Any, ...], Any]] = [
            (path + (key,), raw[key]) for key in ("id", "prompt") if _template_text(raw.get(key))]
        if _template_text(system):
            sources.append((system_path, system))
        for i, message in enumerate(raw.get("messages") or ()):
            content = message.get("content")
            where = path + ("messages", i, "content")
            sources.extend(part_sources(content, where) if isinstance(content, list) else [(where, content)])
        if "golden" in raw and has_template(raw["golden"]):
            sources.extend(walk_strings(raw["golden"], path + ("golden",)))
        for src_path, text in sources:
            if isinstance(text, str):
                names = template_names(text)
                if isinstance(names, str):
                    report.error(src_path, f"this template does not compile: {names}")
                elif names:
                    found.append((src_path, _describe(src_path), names))
        if eval_path is not None:
            found.extend(self.eval_templates(spec, eval_path))
        return found

    def check_rows(self, rows: Iterable[Any], templates: list[Template], path: tuple[Any, ...],
                   golden_given: bool) -> None:
        """Report each variable a template uses that a row does not give (`rows`: [None] without cases)."""
        if not templates and isinstance(rows, list):
            # Nothing to miss: skip the walk. (Not for `cases_from`: its first pass reports the file's problems.)
            return
        # The variables the templates need: a row (inline, or none) that gives all of them is passed without
        # building its sets.
        needed = frozenset().union(*(names for _, _, names in templates)) - {"test_id", "suite"}
        for row_index, row in enumerate(rows):
            if row is None or type(row) is dict:
                given = row if row is not None else {}
                if all(name in given or (name == "golden" and golden_given) for name in needed):
                    continue
            available = set(row or ()) | {"test_id", "suite"}
            if golden_given or (row and "golden" in row):
                available.add("golden")
            missing: dict[str, list[tuple[tuple[Any, ...], str]]] = {}
            for src_path, what, names in templates:
                for name in sorted(names - available):
                    missing.setdefault(name, []).append((src_path, what))
            for name, uses in missing.items():
                self._undefined(name, uses, path, row_index if row is not None else None, available,
                                getattr(row, "origin", None))

    def eval_templates(self, spec: Any, path: tuple[Any, ...]) -> list[Template]:
        """(where, what, variables) for each template in an evaluator spec at `path`; named ones at their `use:`."""
        out: list[Template] = []
        if not isinstance(spec, Mapping):
            return out
        if "use" in spec and isinstance(spec["use"], str):
            names = self._named_variables(spec["use"])
            if names:
                out.append((path + ("use",), f"named evaluator '{spec['use']}'", names))
            return out
        for key, value in spec.items():
            if key in ("all", "any") and isinstance(value, list):
                for i, child in enumerate(value):
                    out.extend(self.eval_templates(child, path + (key, i)))
            elif key == "not":
                out.extend(self.eval_templates(value, path + (key,)))
            elif key not in COMMON_KEYS or isinstance(value, str):
                for text_path, text in walk_strings(value, path + (key,)):
                    used = template_names(text)
                    if isinstance(used, frozenset) and used:
                        out.append((text_path, "evaluator", used))
        return out

    def _named_variables(self, name: str) -> frozenset[str]:
        if name not in self._named_vars:
            self._named_vars[name] = frozenset()  # guards loops; the resolver reports them
            found: set[str] = set()
            for _, _, names in self.eval_templates(self.resolver.named.get(name), ("evaluators", name)):
                found |= names
            self._named_vars[name] = frozenset(found)
        return self._named_vars[name]

    def _undefined(self, name: str, uses: list[tuple[tuple[Any, ...], str]], test_path: tuple[Any, ...],
                   row_index: int | None, available: set[str], origin: CaseOrigin | None = None) -> None:
        src_path = uses[0][0]
        what = " and the ".join(dict.fromkeys(w for _, w in uses))
        if origin is not None:
            # A file row: said once per test and variable, not once for each of a million rows.
            if (test_path, name) not in self._told:
                self._told.add((test_path, name))
                verb = "use" if " and " in what else "uses"
                guess = did_you_mean(name, available - RESERVED_VARIABLES)
                hint = f" — did you mean '{guess}'?" if guess else ""
                self.report.diagnostics.append(origin.diagnostic(
                    f"this row has no '{name}', which the {what} {verb} (test at {self.report.file}:"
                    f"{self.report.positions.of(test_path)[0]}){hint}; add the column, or map one to it with "
                    f"`columns: {{{name}: <column>}}`"))
            return
        if name == "golden":
            verb = "use" if " and " in what else "uses"
            self.report.error(src_path, f"the {what} {verb} {{{{ golden }}}}, but this test has no `golden:`"
                              + (f" (nor does case row {row_index + 1})" if row_index is not None else "")
                              + "; add the reference answer")
            return
        if row_index is not None:
            verb = "use" if " and " in what else "uses"
            self.report.error(test_path + ("cases", row_index), f"case row {row_index + 1} has no value for "
                              f"'{name}', which the {what} {verb}; add `{name}:` to the row")
            return
        guess = did_you_mean(name, available - RESERVED_VARIABLES)
        hint = f" — did you mean '{guess}'?" if guess else "; give it a value in `cases:` rows or remove it"
        verb = "use" if " and " in what else "uses"
        self.report.error(src_path, f"the {what} {verb} the variable '{name}', which is not defined{hint}")


def _template_text(value: Any) -> bool:
    return isinstance(value, str) and is_template(value)


def _describe(path: tuple[Any, ...]) -> str:
    """What a template path is, in words: "prompt", "test id", "system text", "message 2"."""
    last = path[-1]
    if last == "id":
        return "test id"
    if last == "content":
        return f"message {path[-2] + 1}"
    if "golden" in path:
        return "golden"
    return str(last)
