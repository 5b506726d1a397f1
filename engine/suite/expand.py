"""One schema-valid suite mapping -> Tests: defaults, tools, named evaluators, cases, templates, hashes.

The meaning checks that need a test's context (which variables each case row offers, which tools and
named evaluators exist) happen here, while expanding; each problem becomes a Diagnostic in the Report.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.base.render import render, render_value
from engine.evaluators import compile_spec
from engine.evaluators.base import CompileOptions
from engine.evaluators.judge_prompt import JudgePrompt, parse_judge_prompt
from engine.evaluators.node import has_template
from engine.evaluators.trajectory import conversation_kinds_in
from engine.model.agent import AgentSettings, GoldenTurn
from engine.model.cases import CaseOrigin
from engine.model.mcp_server import McpServerSpec
from engine.model.test import Test
from engine.model.tools import Tool
from engine.model.tree import Node
from engine.model.workspace import WorkspaceSpec
from engine.suite.agent import compile_golden, merge_agent
from engine.suite.cases_from import open_cases
from engine.suite.checks import EvaluatorResolver, Report, check_golden_shape
from engine.suite.content_parts import content_text, render_parts
from engine.suite.conversation import api_name_problems, api_names, check_conversation, sent_turn, tool_choice
from engine.suite.hashing import TestHasher, chat_json, judged_spec
from engine.suite.mcp import compile_mcp, merge_servers
from engine.suite.suite_tools import SuiteTools
from engine.suite.variable_checks import VariableChecks
from engine.workspace.spec import builtin_definition, compile_workspace, hashed_block, split_tools

__all__ = ["NO_EVALUATOR", "Expander", "RowEvaluator"]

#: A test with neither `eval:` nor `defaults.eval` would be scored by nothing; it is refused with both fixes.
NO_EVALUATOR = ("this test has no evaluator, so nothing would check its answers; add an `eval:` (docs/evaluators.md), "
                "or write `eval: {none: true}` to record its answers unscored")

#: The empty state and tools of every single-turn test: one object, so the rows of a definition share all their
#: settings by identity (engine.suite.stored_tests keeps them once). Never written to; a plain dict, as a test
#: is pickled into a scoring process.
_NOTHING: Mapping[str, Any] = {}

# An agent test's settings: limits, initial state, the merged `agent:` block (hashed), offered tools compiled,
# its workspace (None: no workspace), its MCP servers.
_Agent = tuple[AgentSettings, dict[str, Any], dict[str, Any], dict[str, Tool], WorkspaceSpec | None,
               tuple[McpServerSpec, ...]]


@dataclass(slots=True)
class _Frame:
    """What every case row of one test shares (settings, tags, the hashed parts), worked out once per test:
    a table-driven test's rows differ only in their variables."""

    raw: Mapping[str, Any]
    path: tuple[Any, ...]
    spec: Any
    node: Node | None          # compiled once for all rows (a spec without templates), else None
    eval_path: tuple[Any, ...]
    tools: tuple[Any, ...]
    system: Any
    line: int
    agent: _Agent | None
    max_tokens: Any
    temperature: Any
    threshold: float
    repeat: int
    tags: tuple[str, ...]
    hasher: TestHasher
    tool_choice: Any
    api_names: dict[str, str]


@dataclass(frozen=True, slots=True)
class RowEvaluator:
    """Compiles one case row's evaluator from its test's spec (a spec with templates) and the row's variables:
    the loader's compile, run again when a test is read back from its `TestStore`."""

    suite: CompileOptions

    def __call__(self, spec: Any, variables: Mapping[str, Any]) -> Node:
        # What the evaluator's templates see: `golden` always there (None without one); only read.
        seen = variables if "golden" in variables else {**variables, "golden": None}
        return compile_spec(spec, seen, self.suite)


class Expander(SuiteTools):
    """Turns one schema-valid suite mapping into Tests, checking meaning on the way."""

    def __init__(self, data: dict[str, Any], report: Report, suite_dir: Path) -> None:
        self.data = data
        self.report = report
        self.suite_dir = suite_dir
        self.suite_id = data.get("suite", "")
        self.defaults: Mapping[str, Any] = data.get("defaults") or {}
        self.tools: Mapping[str, Any] = data.get("tools") or {}
        self.resolver = EvaluatorResolver(data.get("evaluators") or {}, report, suite_dir)
        self.variables = VariableChecks(self.resolver, report)
        self._default_node: Node | None = None
        self.agent_tools: dict[str, Tool] = {}
        self._api_names: dict[str, str] = {}   # tool key -> the name the API sees (tools with a `name:`)
        self.judge_prompt = self._judge_prompt(data.get("judge_prompt"))
        self.compile_options = CompileOptions(judge_prompt=self.judge_prompt)   # what every evaluator compiles with
        self.row_evaluator = RowEvaluator(self.compile_options)
        self._suite_dir_text = str(suite_dir)
        self._offered_tools: dict[tuple[str, ...], tuple[tuple[dict[str, Any], ...], str]] = {}
        self._suite_tags: tuple[str, ...] | None = None   # the suite's and the defaults' tags, for tests without
        self._suite_mcp: tuple[McpServerSpec, ...] = ()

    def expand(self, skip: set[int]) -> Iterator[Test]:
        """The suite's tests, one at a time as they are expanded (a million case rows are never held at once)."""
        self._check_tools()
        for problem in api_name_problems(self.tools):
            self.report.error(problem.path, problem.message, key=problem.key)
        self._api_names = api_names(self.tools)
        self._compile_tools()
        if "mcp" in self.data:
            self._suite_mcp = self._mcp(self.data["mcp"], ("mcp",))
        self.resolver.check_definitions()
        default_eval = None
        if "eval" in self.defaults:
            default_eval = self.resolver.resolve(self.defaults["eval"], ("defaults", "eval"))
        # A default evaluator without templates is compiled once and shared by every test that uses it.
        if default_eval is not None and not has_template(default_eval):
            self._default_node = self._compile(default_eval, ("defaults", "eval"), {})
        self._check_tool_names(self.defaults.get("tools", ()), ("defaults", "tools"))
        first_line: dict[str, int] = {}
        for index, raw in enumerate(self.data.get("tests") or ()):
            if index in skip or not isinstance(raw, dict):
                continue
            expanded = False
            for test in self._expand_test(raw, ("tests", index), default_eval):
                expanded = True
                if test.id in first_line:
                    where = ("tests", index, "id") if test.case_index is None else ("tests", index, "cases",
                                                                                     test.case_index)
                    row = "" if test.case_index is None else f" from case row {test.case_index + 1}"
                    if test.case_origin is not None:   # a `cases_from` row: point at the row in its file
                        self.report.diagnostics.append(test.case_origin.diagnostic(
                            f"duplicate test id '{test.id}' (first used on line {first_line[test.id]} of "
                            f"{self.report.file}); make the test's id a template of a column whose values are "
                            "unique, e.g. `id: q-{{ id }}`"))
                        continue
                    self.report.error(where, f"duplicate test id '{test.id}'{row} (first used on line "
                                      f"{first_line[test.id]}); test ids must be unique within a suite")
                    continue
                first_line[test.id] = test.line
                yield test
            raw_id = raw.get("id")
            if (not expanded and isinstance(raw_id, str) and "cases" not in raw and "cases_from" not in raw
                    and "{" not in raw_id):
                # A test with its own errors still claims its id, so a clash is reported in the same pass.
                if raw_id in first_line:
                    self.report.error(("tests", index, "id"), f"duplicate test id '{raw_id}' (first used on "
                                      f"line {first_line[raw_id]}); test ids must be unique within a suite")
                else:
                    first_line[raw_id] = self.report.positions.of(("tests", index))[0]

    # -- one test -----------------------------------------------------------------------------------------
    def _setting(self, raw: Mapping[str, Any], key: str, default: Any = None) -> Any:
        return raw[key] if key in raw else self.defaults.get(key, default)

    def _expand_test(self, raw: dict[str, Any], path: tuple[Any, ...], default_eval: Any) -> Iterator[Test]:
        report = self.report
        errors_before = len(report.diagnostics)
        tools_at = path + ("tools",) if "tools" in raw else ("defaults", "tools")
        tool_names, builtins, tool_problems = split_tools(self._setting(raw, "tools", ()), self.tools, tools_at)
        for tool_problem in tool_problems:
            report.error(tool_problem.path, tool_problem.message, key=tool_problem.key)
        tools_ok = self._check_tool_names(raw.get("tools", ()), path + ("tools",)) and not tool_problems
        workspace = self._workspace(raw, path, builtins)
        if "eval" in raw:
            eval_path = path + ("eval",)
            spec = self.resolver.resolve(raw["eval"], eval_path)
        else:
            spec, eval_path = default_eval, ("defaults", "eval")
            golden = raw.get("golden")
            if "eval" not in self.defaults and not (isinstance(golden, dict) and "eval" in golden):
                report.error(path, NO_EVALUATOR)   # (an `eval:` indented under `golden:` has its own error)
        golden_given = "golden" in raw
        check_golden_shape(raw, path, self.report)
        system = self._setting(raw, "system")
        system_path = path + ("system",) if "system" in raw else ("defaults", "system")
        messages = raw.get("messages")
        if messages and any(m.get("role") == "system" for m in messages) and "system" in raw:
            report.error(path + ("system",), "this test sets `system:` and also has a system turn in `messages:`; "
                                             "keep one of them")
        offered = [*tool_names, *(name for name, _ in builtins)]
        if messages and tools_ok:
            for problem in check_conversation(messages, offered, path + ("messages",)):
                report.error(problem.path, problem.message, key=problem.key)
        choice = self._tool_choice(raw, path, offered)
        cases: Any = raw.get("cases") or [None]
        if "cases_from" in raw:
            cases = self._cases_from(raw, path)
        # Templates and the variables they use, checked once per test against every case row.
        has_eval = "eval" in raw or default_eval is not None
        templates = self.variables.templates(raw, path, system, system_path, raw.get("eval", self.defaults.get("eval")),
                                             eval_path if has_eval else None)
        self.variables.check_rows(cases, templates, path, golden_given)
        agent = self._agent(raw, path, tool_names, workspace)
        if agent is None or workspace is None:
            self._check_conversation_kinds(spec, eval_path, agent is not None)
        if not tools_ok or any(d.severity == "error" for d in report.diagnostics[errors_before:]):
            return
        tools, shared_json = self._offered(tuple(tool_names))
        tools_json: str | None = shared_json
        if workspace is not None:
            tools += tuple(builtin_definition(builtin, name) for name, builtin in workspace.tools)
            tools_json = None
        line = report.positions.of(path)[0]
        # Compiled once for all case rows when the spec has no template; else once per row (`_one`).
        node: Node | None = None
        if spec is not None and not has_template(spec):
            node = self._default_node if spec is default_eval else self._compile(spec, eval_path, {})
            if node is None:
                return   # its problems are reported (a broken default once, at `defaults:`)
        frame = self._frame(raw, path, spec, node, eval_path, tools, tools_json, system, line, agent, choice)
        for row_index, row in enumerate(cases):
            test = self._one(frame, row, row_index if row is not None else None)
            if test is not None:
                yield test

    def _check_conversation_kinds(self, spec: Any, eval_path: tuple[Any, ...], agent: bool) -> None:
        """A check that reads a conversation on a single-turn test, or `failed_commands` on a test without a
        workspace, could only give an error verdict: say so now, at the check."""
        for where, kind in conversation_kinds_in(spec):
            if not agent:
                self.report.error(eval_path + where, f"{kind} reads a multi-turn conversation, and this test has "
                                  "none; give the test an `agent:` block (or a `workspace:`), or drop the check",
                                  key=True)
            elif kind == "failed_commands":
                self.report.error(eval_path + where, "failed_commands counts a workspace's failed commands, and "
                                  "this test has no `workspace:`; for declared tools use {tool_status: {none: "
                                  "[error]}}", key=True)

    def _frame(self, raw: Mapping[str, Any], path: tuple[Any, ...], spec: Any, node: Node | None,
               eval_path: tuple[Any, ...], tools: tuple[Any, ...], tools_json: str | None, system: Any, line: int,
               agent: _Agent | None, choice: Any = None) -> _Frame:
        max_tokens, temperature = self._setting(raw, "max_tokens"), self._setting(raw, "temperature")
        threshold = float(self._setting(raw, "threshold", 1.0))
        if "tags" in raw:
            tags = tuple(_unique([*self.data.get("tags", ()), *self.defaults.get("tags", ()), *raw["tags"]]))
        else:
            if self._suite_tags is None:
                self._suite_tags = tuple(_unique([*self.data.get("tags", ()), *self.defaults.get("tags", ())]))
            tags = self._suite_tags
        names = {t["function"]["name"]: self._api_names[t["function"]["name"]] for t in tools
                 if t["function"]["name"] in self._api_names}
        hasher = self._hasher(spec, tools, tools_json, max_tokens, temperature, threshold, agent, choice, names)
        return _Frame(raw=raw, path=path, spec=spec, node=node, eval_path=eval_path, tools=tools, system=system,
                      line=line, agent=agent, max_tokens=max_tokens, temperature=temperature, threshold=threshold,
                      repeat=int(self._setting(raw, "repeat", 1)), tags=tags, hasher=hasher, tool_choice=choice,
                      api_names=names)

    def _hasher(self, spec: Any, tools: tuple[Any, ...], tools_json: str | None, max_tokens: Any, temperature: Any,
                threshold: float, agent: _Agent | None, choice: Any = None,
                names: dict[str, str] | None = None) -> TestHasher:
        """The test's hasher: what its rows share, encoded once."""
        # a suite's judge_prompt changes how its judges score: it is in the hash (only of tests with a judge)
        return TestHasher(tools=tools, eval_spec=judged_spec(spec, self.judge_prompt), max_tokens=max_tokens,
                          temperature=temperature, threshold=threshold,
                          agent=agent[2] if agent is not None else None,
                          returns={t["function"]["name"]: self.tools[t["function"]["name"]].get("returns")
                                   for t in tools if t["function"]["name"] in self.tools}
                          if agent is not None else None, tools_json=tools_json, tool_choice=choice, api_names=names)

    def _tool_choice(self, raw: Mapping[str, Any], path: tuple[Any, ...], offered: list[str]) -> Any:
        """The test's `tool_choice` as sent (its own or the defaults'), or None: not set, or no tools to go with."""
        own = "tool_choice" in raw
        value = self._setting(raw, "tool_choice")
        if value is None or (not offered and not own):
            return None   # a default choice means nothing to a test without tools: never sent
        where = path + ("tool_choice",) if own else ("defaults", "tool_choice")
        sent, problems = tool_choice(value, offered, where)
        for problem in problems:
            self.report.error(problem.path, problem.message)
        if sent is not None and not offered:
            self.report.warning(where, f"`tool_choice: {value}` is never sent: this test offers no tools; remove "
                                "it or add `tools:`", key=True)
            return None
        return sent

    def _workspace(self, raw: Mapping[str, Any], path: tuple[Any, ...],
                   builtins: list[tuple[str, str]]) -> WorkspaceSpec | None:
        """The test's `workspace:` compiled with its built-in tools (problems reported), or None."""
        if "workspace" not in raw:
            if builtins:
                self.report.error(path + ("tools",) if "tools" in raw else ("defaults", "tools"),
                                  f"built-in tool '{builtins[0][1]}' acts on a workspace; give the test a "
                                  "`workspace:` (a folder next to the suite, or inline `files:`)")
            return None
        spec, problems = compile_workspace(raw["workspace"], self.suite_dir, path + ("workspace",))
        for problem in problems:
            self.report.error(problem.path, problem.message, key=problem.key)
        if spec is None:
            return None
        return replace(spec, tools=tuple(builtins))

    def _agent(self, raw: Mapping[str, Any], path: tuple[Any, ...],
               tool_names: list[str], workspace: WorkspaceSpec | None = None) -> _Agent | None:
        """(limits, initial state, the `agent` block as merged, the offered tools compiled, the workspace) of an
        agent test, or None for a single-turn one; built once per test, shared by its case rows. A test with a
        `workspace:` is an agent test even without an `agent:` block."""
        block = merge_agent(self.defaults.get("agent"), raw.get("agent"))
        own_mcp = self._mcp(raw["mcp"], path + ("mcp",)) if "mcp" in raw else ()
        if block is None and (workspace is not None or "mcp" in raw or self._suite_mcp):
            block = {}
        if block is None:
            return None
        settings = AgentSettings(max_turns=int(block.get("max_turns", 8)), max_repeats=int(block.get("max_repeats", 2)),
                                 max_prose_turns=int(block.get("max_prose_turns", 3)))
        for i, name in enumerate(tool_names):
            tool = self.tools.get(name)
            if isinstance(tool, Mapping) and "returns" not in tool:
                where = path + ("tools", i) if "tools" in raw else ("defaults", "tools", i)
                self.report.warning(where, f"tool '{name}' has no `returns:`, so in this agent test every call "
                                    "of it is answered with an error; declare what it returns")
        offered = {name: self.agent_tools[name] for name in tool_names if name in self.agent_tools}
        if workspace is not None:
            block = {**block, "workspace": hashed_block(workspace)}   # the hash covers the seed and the built-ins
        servers = merge_servers(self._suite_mcp, own_mcp)
        for server in servers:
            if server.sandbox and workspace is None:
                where = path + ("mcp",) if any(s is server for s in own_mcp) else ("mcp",)
                self.report.error(where, f"MCP server '{server.name}' has `sandbox: true`, which runs it in the "
                                  "test's workspace sandbox, and this test has no `workspace:`; give it one or drop "
                                  "`sandbox: true`")
        if servers:
            block = {**block, "mcp": [server.hashed() for server in servers]}
        return settings, dict(block.get("state") or {}), block, offered, workspace, servers

    def _mcp(self, value: Any, path: tuple[Any, ...]) -> tuple[McpServerSpec, ...]:
        """An `mcp:` block compiled (engine.suite.mcp); its problems reported, () when it has any."""
        servers, problems = compile_mcp(value, path, self._suite_dir_text)
        for problem in problems:
            self.report.error(problem.path, problem.message, key=problem.key)
        if not servers:
            return ()
        at = [path + (i,) for i in range(len(servers))] if isinstance(value, list) else [path]
        return tuple(replace(server, declared=(self.report.file, *self.report.positions.of(where)))
                     for server, where in zip(servers, at, strict=True))

    def _golden_turns(self, golden: Any, where: tuple[Any, ...], row: str,
                      workspace: bool = False) -> tuple[GoldenTurn, ...] | None:
        """An agent test's golden conversation, compiled; None when it has problems (reported)."""
        if isinstance(golden, str):
            golden = [golden]   # the answer alone: a conversation of one turn, without tool calls
        turns, problems = compile_golden(golden, where, ends_with_calls=workspace)
        for problem in problems:
            self.report.error(problem.path, problem.message + row, key=problem.key)
        return None if problems else turns

    def _cases_from(self, raw: Mapping[str, Any], path: tuple[Any, ...]) -> Any:
        """A test's rows from `cases_from` (engine/suite/cases_from.py), streamed; [] when it has problems."""
        if "cases" in raw:
            self.report.error(path + ("cases_from",), "this test has both `cases:` and `cases_from:`; keep one "
                                                      "(move the inline rows into the file, or the file's rows "
                                                      "into `cases:`)", key=True)
            return []
        return open_cases(raw["cases_from"], path + ("cases_from",), self.report, self.suite_dir) or []

    def _compile(self, spec: Any, eval_path: tuple[Any, ...], variables: Mapping[str, Any]) -> Node | None:
        """The compiled tree of a spec shared by a test's rows; None when it has problems (reported)."""
        return self._checked(compile_spec(spec, variables, self.compile_options), eval_path)

    def _checked(self, node: Node, eval_path: tuple[Any, ...], where: str = "") -> Node | None:
        """`node`, or None when it has problems: each node's problem (a bad option, a failed template) becomes an
        error at it."""
        if node.problem is None and not node.children:
            return node   # the usual leaf: nothing to walk
        problems = [(node_path, n.problem) for node_path, n in node.walk() if n.problem is not None]
        for node_path, problem in problems:
            self.report.error(eval_path + node_path, f"{problem}{where}")
        return None if problems else node

    def _judge_prompt(self, value: Any) -> JudgePrompt | None:
        """The suite's `judge_prompt:` (engine.evaluators.judge_prompt), or None; a problem is an error at it."""
        if value is None:
            return None
        parsed = parse_judge_prompt(value, self.suite_dir)
        if isinstance(parsed, str):
            self.report.error(("judge_prompt",), parsed)
            return None
        return parsed

    def _one(self, frame: _Frame, row: Mapping[str, Any] | None, row_index: int | None) -> Test | None:
        raw, path, agent = frame.raw, frame.path, frame.agent
        variables: dict[str, Any] = dict(row or {})
        variables["suite"] = self.suite_id
        origin: CaseOrigin | None = getattr(row, "origin", None)
        images: list[tuple[str, int, int]] = []
        errors_before = len(self.report.diagnostics)
        where = f" (case row {row_index + 1})" if row_index is not None else ""
        if origin is not None:
            where = f" (case row {origin.row}, {origin.describe()})"
        try:
            test_id = render(raw["id"], variables)
            if row_index is not None and test_id == raw["id"]:
                test_id = f"{test_id}[{row_index}]"  # a plain id with cases: one id per row
            variables["test_id"] = test_id
            golden = variables.get("golden", raw.get("golden"))
            if golden is not None:
                golden = render_value(golden, variables)
                variables["golden"] = golden
            system = frame.system
            system_text = render(system, variables) if isinstance(system, str) else None
            messages_json: str | None = None
            if "messages" in raw:
                messages = [sent_turn(m, lambda text: render(text, variables)) or
                            {"role": m["role"], "content": render(m["content"], variables)
                             if not isinstance(m["content"], list) else
                             self._parts(m, path + ("messages", i, "content"), variables, agent, images)}
                            for i, m in enumerate(raw["messages"])]
                if system_text and not any(m["role"] == "system" for m in messages):
                    messages.insert(0, {"role": "system", "content": system_text})
                prompt = "\n\n".join(content_text(m["content"] or "") for m in messages)
            else:
                user = render(raw["prompt"], variables)
                messages = ([{"role": "system", "content": system_text}] if system_text else [])
                messages.append({"role": "user", "content": user})
                prompt = f"{system_text}\n\n{user}" if system_text else user
                messages_json = chat_json(system_text, user)   # what the hash encodes, from its two strings
        except Exception as exc:  # noqa: BLE001 - sandbox refusals, undefined attributes, type errors in expressions
            self.report.error(path, f"cannot fill in this test's templates{where}: {exc}")
            return None
        if len(self.report.diagnostics) > errors_before and any(
                d.severity == "error" for d in self.report.diagnostics[errors_before:]):
            return None   # an image part's problem (reported at the image)
        spec, node = frame.spec, frame.node
        if spec is not None and node is None:
            node = self._checked(self.row_evaluator(spec, variables), frame.eval_path, where)
            if node is None:
                return None
        golden_turns: tuple[GoldenTurn, ...] = ()
        if agent is not None and golden is not None:
            in_row = row is not None and "golden" in row
            golden_path = path + (("cases", row_index, "golden") if in_row else ("golden",))
            compiled = self._golden_turns(golden, golden_path, where, workspace=agent[4] is not None)
            if compiled is None:
                return None
            golden_turns = compiled
        hashed_vars = dict(variables)   # what the hash covers: the variables but the test's id and suite
        del hashed_vars["test_id"], hashed_vars["suite"]
        digest = frame.hasher.digest(messages=messages, prompt=prompt, variables=hashed_vars,
                                     messages_json=messages_json)
        agent_fields: dict[str, Any] = {"initial_state": _NOTHING, "agent_tools": _NOTHING}
        if agent is not None:
            agent_fields = {"agent": agent[0], "initial_state": agent[1], "golden_turns": golden_turns,
                            "agent_tools": agent[3], "workspace": agent[4], "mcp": agent[5]}
        return Test(suite=self.suite_id, id=test_id, file=self.report.file, line=frame.line, messages=tuple(messages),
                    prompt=prompt, eval=spec, golden=golden, variables=variables, tools=frame.tools, tags=frame.tags,
                    max_tokens=frame.max_tokens, temperature=frame.temperature, threshold=frame.threshold,
                    repeat=frame.repeat, case_index=row_index, hash=digest, suite_dir=self._suite_dir_text,
                    evaluator=node, case_origin=origin, images=tuple(images), tool_choice=frame.tool_choice,
                    api_names=frame.api_names, **agent_fields)

    def _parts(self, message: Mapping[str, Any], where: tuple[Any, ...], variables: Mapping[str, Any],
               agent: _Agent | None, images: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
        """A message's content parts rendered and checked (engine.suite.content_parts); problems reported."""
        parts, found, problems = render_parts(message["content"], lambda text: render(text, variables),
                                              self.suite_dir, where, message["role"], agent is not None)
        for problem_path, text in problems:
            self.report.error(problem_path, text)
        images.extend((written, *self.report.positions.of(at)) for written, at in found)
        return parts


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
