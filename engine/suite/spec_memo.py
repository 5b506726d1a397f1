"""Evaluator specs many tests write alike, checked and prepared once per suite file.

A suite repeats a few specs over thousands of tests (`eval: {contains: "{{ golden }}"}`, `eval: {use:
one_word}`): each test used to resolve its spec (the kind's load-time check, every string's template), list
the variables its templates use, ask whether it has templates, encode it for the test hash and compile it.
For a spec written the same way as one already seen, and which came through all of that without a word
(no error, no warning), the answers are the same: `SpecMemo` keeps them. Only flat specs are remembered (a
mapping of plain values: text, numbers, booleans, null), keyed by their items and the values' types (so `1`
and `1.0` and `true`, equal in Python, are three specs); anything else, and every spec with a problem, goes
the usual way for every test, so each problem is still reported at its own test.

On the 10,003-test bench suite 4,287 of its 5,716 tests write one of three such specs (issue #22 item 3, fourth
pass; the figure is beside `SpecMemo`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.base.flat import FlatKey, flat_key
from engine.evaluators import Node, compile_spec
from engine.evaluators.judge_prompt import JudgePrompt, with_judge_prompt
from engine.evaluators.node import has_template
from engine.evaluators.plan import Plan, plan_spec
from engine.suite.checks import EvaluatorResolver, Report
from engine.suite.hashing import canonical_json
from engine.suite.variable_checks import Template, VariableChecks

__all__ = ["SpecFacts", "SpecMemo"]


@dataclass(frozen=True, slots=True)
class SpecFacts:
    """What a flat spec gives every test that writes it so (one that came through without a diagnostic).

    Args:
        resolved: The spec with `use` inlined, as the resolver returned it (each test gets a copy).
        templates: Its templates as `VariableChecks` lists them, paths relative to the spec.
        eval_json: The canonical JSON of the resolved spec with the suite's judge prompt: what the hash encodes.
        plan: Compiles a row of a templated spec (engine.evaluators.plan), or None: `compile_spec` per row.
        node: The compiled tree of a spec without templates (shared by its tests; Nodes are immutable).
    """

    resolved: Mapping[str, Any]
    templates: tuple[Template, ...]
    eval_json: str
    plan: Plan | None
    node: Node | None

    def templates_at(self, path: tuple[Any, ...]) -> list[Template]:
        """The spec's templates with their paths under `path` (the test's `eval`)."""
        return [(path + where, what, names) for where, what, names in self.templates]


class SpecMemo:
    """Resolves a test's spec as `EvaluatorResolver.resolve` does, remembering the facts of clean flat specs.

    The bench suite's expansion with and without it (its facts, the plans and the hashers shared through it):
    0.41 -> 0.31 s of CPU (medians of 9 whole loads in turn in one process, `flat_key` patched to None for
    "without", the full test suite running beside; issue #22 item 3, fourth pass).

    Args:
        resolver: The suite's resolver (it reports each problem at its test).
        variables: The suite's variable checks (they list a spec's templates).
        report: The file's report (a spec that added any diagnostic is not remembered).
        judge_prompt: The suite's `judge_prompt`, which the hash and the compile see.
    """

    def __init__(self, resolver: EvaluatorResolver, variables: VariableChecks, report: Report,
                 judge_prompt: JudgePrompt | None) -> None:
        self.resolver = resolver
        self.variables = variables
        self.report = report
        self.judge_prompt = judge_prompt
        self._known: dict[FlatKey, SpecFacts] = {}

    def resolve(self, written: Any, path: tuple[Any, ...]) -> tuple[Any, SpecFacts | None]:
        """The spec with `use` inlined (None when broken: its problems are reported), and its facts when known.

        Args:
            written: The test's `eval` as written.
            path: Where it is (`("tests", 3, "eval")`).
        """
        key = flat_key(written)
        if key is not None:
            facts = self._known.get(key)
            if facts is not None:
                return dict(facts.resolved), facts
        before = len(self.report.diagnostics)
        spec = self.resolver.resolve(written, path)
        if key is None or spec is None or len(self.report.diagnostics) != before:
            return spec, None
        facts = self._facts(written, spec)
        if facts is not None:
            self._known[key] = facts
        return spec, facts

    def _facts(self, written: Any, spec: Any) -> SpecFacts | None:
        as_compiled = with_judge_prompt(spec, self.judge_prompt)
        node: Node | None = None
        plan: Plan | None = None
        if has_template(spec):
            plan = plan_spec(as_compiled)
        else:
            node = compile_spec(as_compiled, {})
            if any(n.problem is not None for _, n in node.walk()):
                return None   # each test reports it (Expander._compile)
        return SpecFacts(resolved=spec, templates=tuple(self.variables.eval_templates(written, ())),
                         eval_json=canonical_json(as_compiled), plan=plan, node=node)
