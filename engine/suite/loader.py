"""Suite files -> validated, expanded `Suite`s: YAML, then schema, then meaning checks, then expansion.

One pass reports every problem in every file. A file with any error yields no Suite; its diagnostics are
still returned. Warnings (e.g. a golden `1.10` read as the number 1.1) do not stop a suite.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.errors import Diagnostic
from engine.model import Suite, Test
from engine.suite.checks import (
    RESERVED_VARIABLES,
    EvaluatorResolver,
    Report,
    check_json_schema,
    template_names,
)
from engine.suite.hashing import test_hash
from engine.suite.render import render, render_value
from engine.suite.schema import did_you_mean, validate
from engine.suite.yaml import load_yaml_file

__all__ = ["expand_paths", "load_suite_file", "load_suites"]

_SUFFIXES = (".yaml", ".yml")


def expand_paths(paths: list[str | Path]) -> tuple[list[Path], list[Diagnostic]]:
    """Files to load: files as given, folders searched recursively for *.yaml / *.yml (sorted).

    Args:
        paths: Files and folders.

    Returns:
        The files (each once), and a diagnostic for every path that does not exist.
    """
    files: list[Path] = []
    problems: list[Diagnostic] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES and p.is_file())
            files.extend(p for p in found if _looks_like_suite(p))
        elif path.is_file():
            files.append(path)
        else:
            problems.append(Diagnostic(str(raw), 0, 0, "no such file or folder"))
    unique: dict[Path, None] = {}
    for f in files:
        unique.setdefault(f, None)
    return list(unique), problems


def _looks_like_suite(path: Path) -> bool:
    """In a folder, skip YAML files that are plainly not suites (models files, harness files).

    A file counts as a suite when its text has a top-level `suite:` or `tests:` key; anything else found
    while walking a folder is someone else's file. A file named on the command line is always checked.
    """
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(("suite:", "tests:", "suite :", "tests :")):
                    return True
    except OSError:
        return True
    return False


def load_suites(paths: list[str | Path], *, golden_check: bool = False) -> tuple[list[Suite], list[Diagnostic]]:
    """Load, check and expand suites.

    Args:
        paths: Suite files or folders (searched recursively for *.yaml / *.yml, sorted).
        golden_check: Also score each test's golden answer with its own evaluator.

    Returns:
        The suites without errors, and every diagnostic found in every file.
    """
    was_enabled = gc.isenabled()
    # Loading builds millions of small objects and no reference cycles worth collecting; the cyclic
    # collector's repeated full passes cost a third of the time on a 10,000-test suite.
    gc.disable()
    try:
        return _load_suites(paths, golden_check)
    finally:
        if was_enabled:
            gc.enable()


def _load_suites(paths: list[str | Path], golden_check: bool) -> tuple[list[Suite], list[Diagnostic]]:
    files, diagnostics = expand_paths(paths)
    suites: list[Suite] = []
    first_file: dict[str, tuple[str, int]] = {}
    for path in files:
        suite, found, suite_line = load_suite_file(path)
        diagnostics.extend(found)
        if suite is None:
            continue
        if suite.id in first_file:
            other, other_line = first_file[suite.id]
            diagnostics.append(Diagnostic(suite.file, suite_line, 1, f"suite id '{suite.id}' is already used by "
                                          f"{other}:{other_line}; suite ids must be unique, rename one"))
            continue
        first_file[suite.id] = (suite.file, suite_line)
        suites.append(suite)
    if golden_check and suites:
        from engine.suite.golden import check_goldens

        golden_problems = check_goldens(suites)
        diagnostics.extend(golden_problems)
        bad_files = {d.file for d in golden_problems if d.severity == "error"}
        suites = [s for s in suites if s.file not in bad_files]
    return suites, diagnostics


def load_suite_file(path: Path, file: str | None = None) -> tuple[Suite | None, list[Diagnostic], int]:
    """Load one suite file.

    Args:
        path: The file.
        file: The name used in diagnostics (default: the path as given).

    Returns:
        (the Suite or None when it has errors, its diagnostics, the line of its `suite:` key).
    """
    name = file if file is not None else str(path)
    loaded = load_yaml_file(path, name)
    if loaded.diagnostics:
        return None, loaded.diagnostics, 1
    data = loaded.data
    if not isinstance(data, dict):
        return None, [Diagnostic(name, 1, 1, "a suite file must be a mapping with `suite:` and `tests:` keys, "
                                             "not a single value or a list")], 1
    report = Report(name, loaded.positions)
    report.diagnostics.extend(validate(data, loaded.positions, name, "suite"))
    suite_line = loaded.positions.of(("suite",), key=True)[0]
    schema_failed = report.failed
    broken_sections = {p for p in _error_paths(report, data)}
    if schema_failed and any(not isinstance(section, int) for section in broken_sections):
        # Only tests with their own errors can be skipped; a broken shared section would mislead every test.
        return None, report.diagnostics, suite_line
    expander = _Expander(data, report, path.parent)
    try:
        tests = expander.expand(skip={i for i in broken_sections if isinstance(i, int)})
    except Exception as exc:  # noqa: BLE001  a bug here must still end in a message, never a traceback
        report.error((), f"internal error while checking this file ({type(exc).__name__}: {exc}); "
                         "please report it with this file attached")
        return None, _dedupe(report.diagnostics), suite_line
    _warn_number_traps(report, loaded.positions)
    report.diagnostics = _dedupe(report.diagnostics)
    if report.failed:
        return None, report.diagnostics, suite_line
    suite = Suite(id=data["suite"], file=name, description=data.get("description", ""),
                  tags=tuple(data.get("tags", ())), tests=tuple(tests))
    return suite, report.diagnostics, suite_line


def _dedupe(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Each problem once, in file order (a default used by many tests is reported once)."""
    unique = list(dict.fromkeys(diagnostics))
    unique.sort(key=lambda d: (d.line, d.col))
    return unique


def _error_paths(report: Report, data: dict[str, Any]) -> set[Any]:
    """Which sections have schema errors: top-level key names, and test indexes (ints)."""
    positions = report.positions
    out: set[Any] = set()
    # Map each diagnostic back to the section it lies in, by line range.
    raw_tests = data.get("tests")
    tests: list[Any] = raw_tests if isinstance(raw_tests, list) else []
    starts = sorted((positions.of(("tests", i))[0], i) for i in range(len(tests)))
    section_starts = sorted((positions.of((key,), key=True)[0], key) for key in data)
    for diag in report.diagnostics:
        section = None
        for line, key in section_starts:
            if line <= diag.line:
                section = key
        if section == "tests":
            index = None
            for line, i in starts:
                if line <= diag.line:
                    index = i
            out.add(index if index is not None else "tests")
        elif section is not None:
            out.add(section)
    return out


def _warn_number_traps(report: Report, positions: Any) -> None:
    """Warn where YAML turned a golden/case value like `1.10` or `007` into a different-looking number."""
    for path, raw in positions.raw.items():
        if "golden" not in path and "cases" not in path:
            continue
        value = _lookup_number(raw)
        if value is not None and str(value) != raw and raw.lower() not in ("true", "false"):
            report.warning(path, f"YAML reads {raw} as the number {value}; if you meant the text '{raw}', "
                                 "put it in quotes")


def _lookup_number(raw: str) -> Any:
    try:
        return int(raw) if raw.lstrip("+-").isdigit() else float(raw)
    except ValueError:
        return None


class _Expander:
    """Turns one schema-valid suite mapping into Tests, checking meaning on the way."""

    def __init__(self, data: dict[str, Any], report: Report, suite_dir: Path) -> None:
        self.data = data
        self.report = report
        self.suite_dir = suite_dir
        self.suite_id = data.get("suite", "")
        self.defaults: Mapping[str, Any] = data.get("defaults") or {}
        self.tools: Mapping[str, Any] = data.get("tools") or {}
        self.resolver = EvaluatorResolver(data.get("evaluators") or {}, report, suite_dir)
        self._named_vars: dict[str, frozenset[str]] = {}

    def expand(self, skip: set[int]) -> list[Test]:
        self._check_tools()
        self.resolver.check_definitions()
        default_eval = None
        if "eval" in self.defaults:
            default_eval = self.resolver.resolve(self.defaults["eval"], ("defaults", "eval"))
        self._check_tool_names(self.defaults.get("tools", ()), ("defaults", "tools"))
        tests: list[Test] = []
        first_line: dict[str, int] = {}
        for index, raw in enumerate(self.data.get("tests") or ()):
            if index in skip or not isinstance(raw, dict):
                continue
            for test in self._expand_test(raw, ("tests", index), default_eval):
                if test.id in first_line:
                    where = ("tests", index, "id") if test.case_index is None else ("tests", index, "cases",
                                                                                     test.case_index)
                    row = "" if test.case_index is None else f" from case row {test.case_index + 1}"
                    self.report.error(where, f"duplicate test id '{test.id}'{row} (first used on line "
                                      f"{first_line[test.id]}); test ids must be unique within a suite")
                    continue
                first_line[test.id] = test.line
                tests.append(test)
        return tests

    # -- suite-level --------------------------------------------------------------------------------------
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

    def _check_tool_names(self, names: Any, path: tuple[Any, ...]) -> bool:
        ok = True
        for i, name in enumerate(names or ()):
            if name not in self.tools:
                guess = did_you_mean(name, self.tools)
                hint = f" — did you mean '{guess}'?" if guess else " — define it under `tools:` at the top"
                self.report.error(path + (i,), f"unknown tool '{name}'{hint}")
                ok = False
        return ok

    def _openai_tool(self, name: str) -> dict[str, Any]:
        tool = self.tools[name]
        return {"type": "function", "function": {"name": name, "description": tool.get("description", ""),
                                                 "parameters": tool.get("parameters") or {}}}

    # -- one test -----------------------------------------------------------------------------------------
    def _setting(self, raw: Mapping[str, Any], key: str, default: Any = None) -> Any:
        return raw[key] if key in raw else self.defaults.get(key, default)

    def _expand_test(self, raw: dict[str, Any], path: tuple[Any, ...], default_eval: Any) -> list[Test]:
        report = self.report
        errors_before = len(report.diagnostics)
        tool_names = list(self._setting(raw, "tools", ()) or ())
        tools_ok = self._check_tool_names(raw.get("tools", ()), path + ("tools",))
        if "eval" in raw:
            spec = self.resolver.resolve(raw["eval"], path + ("eval",))
            eval_path = path + ("eval",)
        else:
            spec, eval_path = default_eval, ("defaults", "eval")
        golden_given = "golden" in raw
        self._check_golden_shape(raw, path)
        system = self._setting(raw, "system")
        system_path = path + ("system",) if "system" in raw else ("defaults", "system")
        messages = raw.get("messages")
        if messages and any(m.get("role") == "system" for m in messages) and "system" in raw:
            report.error(path + ("system",), "this test sets `system:` and also has a system turn in `messages:`; "
                                             "keep one of them")
        cases = raw.get("cases") or [None]
        # Templates and the variables they use, checked once per test against every case row.
        templates: list[tuple[tuple[Any, ...], str, frozenset[str]]] = []
        sources: list[tuple[tuple[Any, ...], Any]] = [(path + ("id",), raw.get("id")),
                                                      (path + ("prompt",), raw.get("prompt")),
                                                      (system_path, system)]
        for i, message in enumerate(messages or ()):
            sources.append((path + ("messages", i, "content"), message.get("content")))
        from engine.suite.checks import walk_strings

        if golden_given:
            sources.extend(walk_strings(raw["golden"], path + ("golden",)))
        for src_path, text in sources:
            if isinstance(text, str):
                names = template_names(text)
                if isinstance(names, str):
                    report.error(src_path, f"this template does not compile: {names}")
                elif names:
                    templates.append((src_path, _describe(src_path), names))
        if "eval" in raw or default_eval is not None:
            templates.extend(self._eval_templates(raw.get("eval", self.defaults.get("eval")), eval_path))
        for row_index, row in enumerate(cases):
            available = set(row or ()) | {"test_id", "suite"}
            if golden_given or (row and "golden" in row):
                available.add("golden")
            missing: dict[str, list[tuple[tuple[Any, ...], str]]] = {}
            for src_path, what, names in templates:
                for name in sorted(names - available):
                    missing.setdefault(name, []).append((src_path, what))
            for name, uses in missing.items():
                self._undefined(name, uses, path, row_index if row is not None else None, available)
        if not tools_ok or any(d.severity == "error" for d in report.diagnostics[errors_before:]):
            return []
        tools = tuple(self._openai_tool(n) for n in tool_names)
        line = report.positions.of(path)[0]
        out: list[Test] = []
        for row_index, row in enumerate(cases):
            test = self._one(raw, path, row, row_index if row is not None else None, spec, tools, system, line)
            if test is not None:
                out.append(test)
        return out

    def _eval_templates(self, spec: Any, path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str, frozenset[str]]]:
        """(where, what, variables) for each template in an evaluator spec; named ones at their `use:`."""
        out: list[tuple[tuple[Any, ...], str, frozenset[str]]] = []
        if not isinstance(spec, Mapping):
            return out
        if "use" in spec and isinstance(spec["use"], str):
            names = self._named_variables(spec["use"])
            if names:
                out.append((path + ("use",), f"named evaluator '{spec['use']}'", names))
            return out
        from engine.suite.checks import COMMON_KEYS, walk_strings

        for key, value in spec.items():
            if key in ("all", "any") and isinstance(value, list):
                for i, child in enumerate(value):
                    out.extend(self._eval_templates(child, path + (key, i)))
            elif key == "not":
                out.extend(self._eval_templates(value, path + (key,)))
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
            for _, _, names in self._eval_templates(self.resolver.named.get(name), ("evaluators", name)):
                found |= names
            self._named_vars[name] = frozenset(found)
        return self._named_vars[name]

    def _undefined(self, name: str, uses: list[tuple[tuple[Any, ...], str]], test_path: tuple[Any, ...],
                   row_index: int | None, available: set[str]) -> None:
        src_path = uses[0][0]
        what = " and the ".join(dict.fromkeys(w for _, w in uses))
        if name == "golden":
            verb = "use" if " and " in what else "uses"
            self.report.error(src_path, f"the {what} {verb} {{{{ golden }}}}, but this test has no `golden:`"
                              + (f" (nor does case row {row_index + 1})" if row_index is not None else "")
                              + "; add the reference answer")
            return
        if row_index is not None:
            self.report.error(test_path + ("cases", row_index), f"case row {row_index + 1} has no value for "
                              f"'{name}', which the {what} {'use' if ' and ' in what else 'uses'}; add `{name}:` to the row")
            return
        guess = did_you_mean(name, available - RESERVED_VARIABLES)
        hint = f" — did you mean '{guess}'?" if guess else "; give it a value in `cases:` rows or remove it"
        verb = "use" if " and " in what else "uses"
        self.report.error(src_path, f"the {what} {verb} the variable '{name}', which is not defined{hint}")

    def _check_golden_shape(self, raw: Mapping[str, Any], path: tuple[Any, ...]) -> None:
        golden = raw.get("golden")
        if not isinstance(golden, dict):
            return
        if "eval" in golden and "eval" not in raw:
            self.report.error(path + ("golden", "eval"), "`eval:` is indented under `golden:`, so it became part "
                              "of the golden answer and this test has no evaluator; line `eval:` up with "
                              "`golden:`", key=True)
        if "tool_calls" in golden:
            calls = golden["tool_calls"]
            if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                                       for c in calls):
                self.report.error(path + ("golden", "tool_calls"), "a golden `tool_calls:` must be a list of "
                                  "{name: ..., arguments: {...}} mappings")
                return
            for i, call in enumerate(calls):
                extra = set(call) - {"name", "arguments"}
                if extra:
                    self.report.error(path + ("golden", "tool_calls", i), f"a golden tool call has only `name` and "
                                      f"`arguments`; remove {', '.join(sorted(extra))}")
                elif not isinstance(call.get("arguments", {}), dict):
                    self.report.error(path + ("golden", "tool_calls", i, "arguments"),
                                      "golden tool-call `arguments` must be a mapping of argument -> value")

    def _one(self, raw: Mapping[str, Any], path: tuple[Any, ...], row: Mapping[str, Any] | None,
             row_index: int | None, spec: Any, tools: tuple[Any, ...], system: Any, line: int) -> Test | None:
        variables: dict[str, Any] = dict(row or {})
        variables["suite"] = self.suite_id
        where = f" (case row {row_index + 1})" if row_index is not None else ""
        try:
            test_id = render(raw["id"], variables)
            if row_index is not None and test_id == raw["id"]:
                test_id = f"{test_id}[{row_index}]"  # a plain id with cases: one id per row
            variables["test_id"] = test_id
            golden = variables.get("golden", raw.get("golden"))
            if golden is not None:
                golden = render_value(golden, variables)
                variables["golden"] = golden
            system_text = render(system, variables) if isinstance(system, str) else None
            if "messages" in raw:
                messages = [{"role": m["role"], "content": render(m["content"], variables)} for m in raw["messages"]]
                if system_text and not any(m["role"] == "system" for m in messages):
                    messages.insert(0, {"role": "system", "content": system_text})
                prompt = "\n\n".join(m["content"] for m in messages)
            else:
                user = render(raw["prompt"], variables)
                messages = ([{"role": "system", "content": system_text}] if system_text else [])
                messages.append({"role": "user", "content": user})
                prompt = f"{system_text}\n\n{user}" if system_text else user
        except Exception as exc:  # noqa: BLE001  sandbox refusals, undefined attributes, type errors in expressions
            self.report.error(path, f"cannot fill in this test's templates{where}: {exc}")
            return None
        settings = {k: self._setting(raw, k) for k in ("max_tokens", "temperature")}
        threshold = float(self._setting(raw, "threshold", 1.0))
        tags = _unique([*self.data.get("tags", ()), *self.defaults.get("tags", ()), *raw.get("tags", ())])
        hashed_vars = {k: v for k, v in variables.items() if k not in ("test_id", "suite")}
        digest = test_hash(messages=messages, prompt=prompt, tools=tools, eval_spec=spec, variables=hashed_vars,
                           max_tokens=settings["max_tokens"], temperature=settings["temperature"], threshold=threshold)
        return Test(suite=self.suite_id, id=test_id, file=self.report.file, line=line, messages=tuple(messages),
                    prompt=prompt, eval=spec, golden=golden, variables=variables, tools=tools, tags=tuple(tags),
                    max_tokens=settings["max_tokens"], temperature=settings["temperature"], threshold=threshold,
                    repeat=int(self._setting(raw, "repeat", 1)), case_index=row_index, hash=digest,
                    suite_dir=str(self.suite_dir))


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


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
