"""promptfoo's tests as read: inline, from files and globs, from scenarios, with vars files and defaultTest.

A test is promptfoo's mapping of `vars`, `assert`, `options`, `threshold`, `description`; each is kept with
its place so every note and placeholder names the file and line it came from. Tests come from the config's
`tests:` (a list, a file, a glob, `path:` entries), from YAML, JSON, JSON Lines and CSV files (a CSV row read
as promptfoo's testCaseFromCsvRow reads it, its `__expected` cells as assertionFromString reads them), and
from `scenarios:`; a script that makes tests is not run, only noted. Every file is read through the config's
`Files` (inside its folder unless allowed, capped).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.base.yaml import load_yaml_text
from engine.errors import ConfigError
from engine.importers.promptfoo.config import Config
from engine.importers.promptfoo.files import CONFIG, SCRIPTS, Loaded, Where, file_ref
from engine.importers.promptfoo.js import js_string

__all__ = ["ReadTest", "default_test", "read_tests", "var_combinations", "with_defaults"]

_TEST_FILES = (".csv", ".json", ".jsonl", ".yaml", ".yml")


@dataclass(frozen=True)
class ReadTest:
    """A test as read: its mapping (defaults merged later), where it starts, the folder of its file, and the
    file it was read from with its path there (for the places of its asserts; None for a CSV row)."""

    test: Mapping[str, Any]
    where: Where
    base: Path
    source: Loaded | None = None
    path: tuple[Any, ...] = ()

    def assert_at(self, index: int) -> Where:
        """The place of the test's `index`-th assert."""
        return self.source.at(*self.path, "assert", index) if self.source is not None else self.where


def read_tests(config: Config) -> list[ReadTest]:
    """Every test of the config with its place, file references expanded, in order (scenarios after the tests)."""
    return _Reader(config).tests()


def default_test(config: Config) -> Mapping[str, Any]:
    """The config's defaultTest (its own mapping or a file's), vars files merged; {} when there is none."""
    return _Reader(config).default_test()


def with_defaults(test: Mapping[str, Any], default: Mapping[str, Any]) -> dict[str, Any]:
    """A test with defaultTest merged in as promptfoo merges it (prepareTestCaseForEval)."""
    options = {**(default.get("options") or {}), **(test.get("options") or {})}
    asserts = [*([] if options.get("disableDefaultAsserts") else
                 [(a, (False, i)) for i, a in enumerate(default.get("assert") or [])]),
               *[(a, (True, i)) for i, a in enumerate(test.get("assert") or [])]]
    merged = {**test, "vars": {**(default.get("vars") or {}), **(test.get("vars") or {})}, "options": options,
              "_asserts": asserts}
    merged["threshold"] = test.get("threshold", default.get("threshold"))
    if "prompts" not in test and "prompts" in default:
        merged["prompts"] = default["prompts"]
    return merged


def var_combinations(config: Config, variables: Mapping[str, Any], where: Where) -> list[dict[str, Any]]:
    """promptfoo's generateVarCombinations: a var holding a list of texts makes one test per item (every
    combination), and a `file://` glob one per file it matches."""
    combos: list[dict[str, Any]] = [{}]
    for key, value in variables.items():
        if isinstance(value, str) and value.startswith("file://") and any(c in value for c in "*?["):
            values: list[Any] = _glob_var(config, value, where)
        elif isinstance(value, list) and value and isinstance(value[0], str):
            values = value
        else:
            values = [value]
        combos = [{**combo, key: item} for combo in combos for item in values]
    return combos


def _glob_var(config: Config, value: str, where: Where) -> list[str]:
    """The `file://` vars a var's glob stands for, one per file it matches (none: noted)."""
    ref = value[len("file://"):]
    paths = config.files.glob(ref, config.folder, where)
    if not paths:
        config.note(where, f"{value} matches no file, so promptfoo stops; the test is left out")
    return [f"file://{p.relative_to(config.folder).as_posix()}" for p in paths]


class _Reader:
    """Reads the tests of one config, noting what it cannot read."""

    def __init__(self, config: Config) -> None:
        self.data = config.data
        self.files = config.files
        self.folder = config.folder
        self.root = config.root
        self.note = config.note

    def tests(self) -> list[ReadTest]:
        """Every test with its place, file references expanded, in order (scenarios after the tests)."""
        raw = self.data.get("tests")
        out: list[ReadTest] = []
        if isinstance(raw, str):   # promptfoo's readTests: a YAML glob, else a standalone file
            ref = file_ref(raw) or raw
            out.extend(self._test_source(raw, self.folder, self.root.at("tests")) if ref.endswith(("yaml", "yml"))
                       else self._standalone(raw, self.folder, self.root.at("tests")))
        elif isinstance(raw, Mapping) and isinstance(raw.get("path"), str):
            out.extend(self._standalone(raw["path"], self.folder, self.root.at("tests")))
        elif isinstance(raw, list):
            for index, item in enumerate(raw):
                where = self.root.at("tests", index)
                if isinstance(item, str):
                    out.extend(self._test_source(item, self.folder, where))
                elif isinstance(item, Mapping) and isinstance(item.get("path"), str):
                    out.extend(self._standalone(item["path"], self.folder, where))
                elif isinstance(item, Mapping):
                    out.append(self._with_vars(ReadTest(item, where, self.folder, self.root, ("tests", index))))
                else:
                    self.note(where, "test not imported: a test is a mapping or a file:// reference")
        elif raw is not None:
            self.note(self.root.at("tests"), "`tests:` not imported: it is a list, a file or a glob")
        scenarios = self.data.get("scenarios")
        if scenarios is not None:
            out.extend(self._scenarios(scenarios))
        if raw is None and scenarios is None:
            out.append(ReadTest({}, self.root.at(), self.folder))   # promptfoo runs each prompt once then
        return out

    def _test_source(self, ref_text: str, base: Path, where: Where) -> list[ReadTest]:
        """A `tests:` list entry that is text: a glob of YAML, JSON or JSON Lines test files (promptfoo's
        loadTestsFromGlob), or a standalone file (a CSV, a script)."""
        ref = file_ref(ref_text) or ref_text
        if ref.startswith(("huggingface://", "https://", "http://", "az://")):
            self.note(where, f"tests from {ref_text} not imported: the import reads local files only; save the "
                             "tests to a CSV, JSON or YAML file beside the config")
            return []
        if re.search(r"\.\w+:\w+$", ref) or ref.endswith((*SCRIPTS, ".xlsx", ".xls", ".csv")):
            return self._standalone(ref_text, base, where)
        paths = self.files.glob(ref, base, where) if any(c in ref for c in "*?[") else \
            [self.files.path(ref, base, where)]
        out: list[ReadTest] = []
        for path in paths:
            if path.suffix.lower() == ".csv":
                out.extend(self._csv(path, where))
            elif path.suffix.lower() in (".yaml", ".yml", ".json", ".jsonl"):
                out.extend(self._test_file(path, where, standalone=False))
            elif not path.exists():
                raise ConfigError(f"{where}: no such tests file: {path}")
            else:
                self.note(where, f"tests file {path.name} not imported: CSV, JSON, JSON Lines and YAML files are read")
        if not paths:
            self.note(where, f"tests {ref_text} not imported: no file matches it")
        return out

    def _standalone(self, ref_text: str, base: Path, where: Where) -> list[ReadTest]:
        """promptfoo's readStandaloneTestsFile: CSV, JSON, JSON Lines or YAML rows; a script that makes tests is
        not run."""
        ref = file_ref(ref_text) or ref_text
        function = re.search(r"\.\w+(:\w+)$", ref)
        path_text = ref[:function.start(1)] if function else ref
        suffix = Path(path_text).suffix.lower()
        if suffix in SCRIPTS:
            self.note(where, f"tests made by running {ref} not imported: the import runs no code; run it once, "
                             "save its tests to a YAML file and name that file in `tests:`")
            return []
        if suffix not in _TEST_FILES:
            self.note(where, f"tests file {Path(path_text).name} not imported: CSV, JSON, JSON Lines and YAML files "
                             "are read; save the tests to one of those")
            return []
        path = self.files.path(path_text, base, where)
        if not path.exists():
            raise ConfigError(f"{where}: no such tests file: {path}; fix the path")
        if suffix == ".csv":
            return self._csv(path, where)
        return self._test_file(path, where, standalone=True)

    def _test_file(self, path: Path, where: Where, *, standalone: bool) -> list[ReadTest]:
        """A YAML, JSON or JSON Lines file of tests (standalone: rows described `Row #N` when they have no
        description, and a YAML file's rows read as CSV rows are, as promptfoo does)."""
        if path.suffix.lower() == ".jsonl":
            text = self.files.read_text(path, where)
            rows: list[tuple[Any, Where]] = []
            for number, line in enumerate(text.split("\n"), start=1):
                if line.strip():
                    loaded = self._json_line(line, path, number)
                    rows.append((loaded, Where(path, number)))
        else:
            loaded = self.files.yaml(path, where)
            listed = isinstance(loaded.data, list)
            data = loaded.data if listed else [loaded.data]
            rows = [(row, loaded.at(i) if listed else loaded.at()) for i, row in enumerate(data)]
        out = []
        for index, (row, at) in enumerate(rows, start=1):
            if not isinstance(row, Mapping):
                self.note(at, "test not imported: not a mapping")
                continue
            source = (loaded, (index - 1,) if listed else ()) if path.suffix.lower() != ".jsonl" else (None, ())
            if standalone and path.suffix.lower() in (".yaml", ".yml"):
                row = _csv_test(row, lambda message, at=at: self.note(at, message))
                source = (None, ())
            if standalone and not row.get("description"):
                row = {**row, "description": f"Row #{index}"}
            out.append(self._with_vars(ReadTest(row, at, path.parent, *source)))
        return out

    def _json_line(self, line: str, path: Path, number: int) -> Any:
        loaded = load_yaml_text(line, str(path), kind=CONFIG)
        if loaded.diagnostics:
            raise ConfigError(f"{path}:{number}: not a JSON line: {loaded.diagnostics[0].message}")
        return loaded.data

    def _csv(self, path: Path, where: Where) -> list[ReadTest]:
        """promptfoo's CSV tests: columns are vars; `__expected*`, `__description`, `__threshold`, `__metric`,
        `__prefix`, `__suffix` are its own."""
        text = self.files.read_text(path, where)
        reader = csv.DictReader(io.StringIO(text))
        out = []
        start = 2
        try:
            for index, row in enumerate(reader, start=1):
                at = Where(path, start)
                test = _csv_test({(k or "").strip(): v or "" for k, v in row.items()},
                                 lambda message, at=at: self.note(at, message))
                test.setdefault("description", f"Row #{index}")
                out.append(ReadTest(test, at, path.parent))
                start = reader.line_num + 1
        except csv.Error as exc:
            raise ConfigError(f"{path}:{reader.line_num}: not valid CSV: {exc}; fix the file") from None
        return out

    def _with_vars(self, test: ReadTest) -> ReadTest:
        """A test whose `vars:` names YAML files: their mappings merged, as promptfoo's readTestFiles does."""
        refs = test.test.get("vars")
        if not isinstance(refs, (str, list)):
            return test
        merged: dict[str, Any] = {}
        for ref in ([refs] if isinstance(refs, str) else refs):
            if not isinstance(ref, str):
                continue
            ref = file_ref(ref) or ref
            paths = self.files.glob(ref, test.base, test.where) if any(c in ref for c in "*?[") else \
                [self.files.path(ref, test.base, test.where)]
            for path in paths:
                data = self.files.yaml(path, test.where).data
                if not isinstance(data, Mapping):
                    raise ConfigError(f"{test.where}: vars file {path} does not hold a mapping of var -> value; "
                                      "write `name: value` lines")
                merged.update(data)
        return ReadTest({**test.test, "vars": merged}, test.where, test.base, test.source, test.path)

    def _scenarios(self, scenarios: Any) -> list[ReadTest]:
        """promptfoo's scenarios: each `config` entry with each of the scenario's tests."""
        out: list[ReadTest] = []
        items = scenarios if isinstance(scenarios, list) else []
        for index, scenario in enumerate(items):
            where = self.root.at("scenarios", index)
            if not isinstance(scenario, Mapping):
                self.note(where, "scenario not imported: a scenario is a mapping of `config:` and `tests:`")
                continue
            datas = scenario.get("config") or [{}]
            tests = scenario.get("tests") or [{}]
            for data in datas if isinstance(datas, list) else [datas]:
                for test in tests if isinstance(tests, list) else [tests]:
                    if not isinstance(data, Mapping) or not isinstance(test, Mapping):
                        continue
                    merged = {**data, **test, "vars": {**(data.get("vars") or {}), **(test.get("vars") or {})},
                              "options": {**(data.get("options") or {}), **(test.get("options") or {})},
                              "assert": [*(data.get("assert") or []), *(test.get("assert") or [])]}
                    out.append(self._with_vars(ReadTest(merged, where, self.folder)))
        return out

    def default_test(self) -> Mapping[str, Any]:
        default = self.data.get("defaultTest") or {}
        if isinstance(default, str):
            ref = file_ref(default)
            if ref is None:
                self.note(self.root.at("defaultTest"), "defaultTest is neither a mapping nor a file://; ignored")
                return {}
            loaded = self.files.yaml(self.files.path(ref, self.folder, self.root.at("defaultTest")),
                                     self.root.at("defaultTest"))
            default = loaded.data
        if not isinstance(default, Mapping):
            self.note(self.root.at("defaultTest"), "defaultTest is not a mapping; ignored")
            return {}
        return self._with_vars(ReadTest(default, self.root.at("defaultTest"), self.folder)).test


def _csv_test(row: Mapping[str, Any], note: Any) -> dict[str, Any]:
    """promptfoo's testCaseFromCsvRow: columns are vars; `__expected*`, `__description`, `__threshold`,
    `__metric`, `__prefix`, `__suffix` are its own; other `__` columns are noted."""
    test: dict[str, Any] = {"vars": {}, "assert": [], "options": {}}
    metric = None
    for column, cell in row.items():
        column = str(column).strip()
        text = cell if isinstance(cell, str) else js_string(cell)
        if column.startswith("__expected"):
            if text.strip():
                test["assert"].append(_assert_from_text(text.strip()))
        elif column == "__description":
            test["description"] = text
        elif column == "__threshold":
            try:
                test["threshold"] = float(text) if text.strip() else None
            except ValueError:
                note(f"__threshold {text!r} is not a number; ignored")
            if test.get("threshold") is None:
                test.pop("threshold", None)
        elif column == "__metric":
            metric = text or None
        elif column in ("__prefix", "__suffix"):
            test["options"][column[2:]] = text
        elif column.startswith("__"):
            note(f"column {column} not imported; nothing here reads it")
        else:
            test["vars"][column] = cell
    if metric:
        for assertion in test["assert"]:
            assertion["metric"] = metric
    return test


def _assert_from_text(text: str) -> dict[str, Any]:
    """promptfoo's assertionFromString (a CSV `__expected` cell): `type:value`, `not-type:value`,
    `type(threshold):value`, else equals."""
    for prefix, kind in (("javascript:", "javascript"), ("fn:", "javascript"), ("eval:", "javascript"),
                         ("python:", "python"), ("grade:", "llm-rubric"), ("llm-rubric:", "llm-rubric")):
        if text.startswith(prefix):
            value = text[len(prefix):]
            return {"type": kind, "value": value.strip() if kind != "llm-rubric" else value}
    if text.startswith("file://") and (text.endswith(".py") or ".py:" in text):
        return {"type": "python", "value": text}
    match = re.match(r"^(not-)?([a-z][a-z-]*)(?:\((\d+(?:\.\d+)?)\))?(?::([\s\S]*))?$", text)
    known = ("contains", "icontains", "contains-any", "contains-all", "icontains-any", "icontains-all", "equals",
             "starts-with", "regex", "is-json", "contains-json", "similar", "levenshtein", "latency", "cost",
             "model-graded-closedqa", "llm-rubric", "factuality", "webhook", "rouge-n", "perplexity")
    if match and match.group(2) in known:
        kind, value = match.group(2), match.group(4)
        assertion: dict[str, Any] = {"type": (match.group(1) or "") + kind}
        if kind in ("contains-any", "contains-all", "icontains-any", "icontains-all") and value is not None:
            assertion["value"] = next(csv.reader([value], skipinitialspace=True), [])
        elif kind in ("contains-json", "is-json"):
            if value is not None:
                assertion["value"] = value
        elif value is not None:
            assertion["value"] = value.strip()
        threshold = match.group(3)
        if kind in ("similar", "starts-with", "levenshtein", "latency", "cost", "rouge-n", "perplexity"):
            assertion["threshold"] = float(threshold) if threshold else (0.8 if kind == "similar" else 0.75)
        elif threshold:
            assertion["threshold"] = float(threshold)
        return assertion
    return {"type": "equals", "value": text}
