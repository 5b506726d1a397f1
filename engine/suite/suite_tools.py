"""The suite's declared tools as the expander checks and offers them (moved out of engine/suite/expand.py, which
had grown past 400 lines; unchanged)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.base.diagnostic import Problem
from engine.base.words import did_you_mean
from engine.evaluators.json_eval import check_json_schema
from engine.model.tools import Tool
from engine.suite.checks import Report
from engine.suite.hashing import canonical_json
from engine.suite.tools import compile_tools
from engine.workspace.spec import split_tools

__all__ = ["SuiteTools"]


class SuiteTools:
    """The tool checks of `Expander` (engine.suite.expand): a suite's `tools:` checked and compiled once, a
    test's tool names checked, and the OpenAI definitions of each list of names built once."""

    report: Report
    tools: Mapping[str, Any]
    agent_tools: dict[str, Tool]
    _offered_tools: dict[tuple[str, ...], tuple[tuple[dict[str, Any], ...], str]]

    def _check_tools(self) -> None:
        for name, tool in self.tools.items():
            params = tool.get("parameters")
            found = check_json_schema(params)
            if found:
                inner, reason = found
                self.report.error(("tools", name, "parameters") + inner,
                                  f"the parameters of tool '{name}' are not a valid JSON Schema: {reason}")
            elif isinstance(params, dict) and params.get("type") != "object":
                self.report.error(("tools", name, "parameters"), f"the parameters of tool '{name}' must be a "
                                  "JSON Schema with `type: object` (function arguments are always an object)")

    def _compile_tools(self) -> None:
        """Compile every tool with its `returns` rules once for the suite (agent tests use them)."""
        self.agent_tools, problems = compile_tools(self.tools)
        for problem in problems:
            if len(problem.path) > 2 and problem.path[2] == "parameters":
                continue   # `_check_tools` reports a bad parameters schema, in the words single-turn tests get
            self._problem(problem)

    def _problem(self, problem: Problem) -> None:
        self.report.error(problem.path, problem.message, key=problem.key)

    def _check_tool_names(self, names: Any, path: tuple[Any, ...]) -> bool:
        ok = True
        for i, name in enumerate(names or ()):
            if not isinstance(name, str) or name in self.tools:
                continue   # a declared tool (asked first: split_tools never reads a declared name as a built-in)
            if split_tools([name], self.tools, ())[1]:
                continue   # a built-in workspace tool (engine.workspace.spec.split_tools checks those)
            guess = did_you_mean(name, self.tools)
            hint = f" — did you mean '{guess}'?" if guess else " — define it under `tools:` at the top"
            self.report.error(path + (i,), f"unknown tool '{name}'{hint}")
            ok = False
        return ok

    def _offered(self, names: tuple[str, ...]) -> tuple[tuple[dict[str, Any], ...], str]:
        """The OpenAI definitions of these suite tools and their canonical JSON, built once per list of names
        (the tests of a suite offer the same few lists; the definitions are never changed after loading)."""
        if names not in self._offered_tools:
            tools = tuple(self._openai_tool(n) for n in names)
            self._offered_tools[names] = (tools, canonical_json(list(tools)))
        return self._offered_tools[names]

    def _openai_tool(self, name: str) -> dict[str, Any]:
        tool = self.tools[name]
        return {"type": "function", "function": {"name": name, "description": tool.get("description", ""),
                                                 "parameters": tool.get("parameters") or {}}}
