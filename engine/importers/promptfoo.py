"""A promptfoo config -> YAML suites, a models file, and the python scorers its python asserts need.

promptfoo runs every prompt against every test (a test is `vars` + `assert`s) on every provider. Here each
prompt becomes one suite whose tests are the config's tests, each asking what promptfoo would send for it
(engine.importers.promptfoo_render: Nunjucks as promptfoo renders it, chat JSON as messages, images as image
parts), each provider an OpenAI-compatible models file entry, and each assert the evaluator whose verdict is
promptfoo's (engine.importers.promptfoo_asserts).

Nothing passes by omission: an assert that is not carried over leaves a `not_carried` placeholder in its test
(an error verdict until the user replaces it), a test without asserts is written `eval: {none: true}`
(recorded, unscored), and a test whose prompt cannot be rendered as promptfoo would is left out. Each is a
`Note` at its file and line, printed by the CLI and listed at the top of the suite. The config and every file
it names are read by `engine.importers.promptfoo_files` (inside the config's folder unless allowed, capped,
YAML bounded); every failure is a `ConfigError` naming the place and the fix. A literal `apiKey` is never
copied.
"""

from __future__ import annotations

import copy
import csv
import glob
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.base.yaml import Positions, load_yaml_text
from engine.errors import ConfigError
from engine.evaluators import compile_spec
from engine.importers.promptfoo_asserts import (
    AssertSite,
    Scorers,
    describe,
    literal,
    map_assert,
    share,
    string_transform,
)
from engine.importers.promptfoo_files import CONFIG, Files, Loaded, Where
from engine.importers.promptfoo_render import (
    Images,
    NotCarried,
    chat_messages,
    engine_messages,
    js_json,
    js_string,
    load_file_vars,
    prepare_vars,
    render_prompt,
)
from engine.suite.checks import EvaluatorResolver, Report

__all__ = ["Imported", "Note", "import_promptfoo"]

_MODEL_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_TEST_ID = re.compile(r"[^a-z0-9_.]+")
_PARAMS = ("temperature", "max_tokens", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty")
_PROMPT_TEXT = (".txt", ".md", ".j2", ".json", ".jsonl", ".yaml", ".yml")
_SCRIPTS = (".js", ".cjs", ".mjs", ".ts", ".cts", ".mts", ".py", ".rb", ".go", ".sh", ".bash", ".exe", ".bat")
_TEST_FILES = (".csv", ".json", ".jsonl", ".yaml", ".yml")
# Top-level keys that change no question and no verdict (promptfoo's output, sharing and UI settings).
_QUIET = frozenset({"description", "prompts", "providers", "targets", "tests", "defaultTest", "scenarios", "env",
                    "outputPath", "sharing", "commandLineOptions", "evaluateOptions", "writeLatestResults",
                    "metadata", "tags", "tracing", "$schema", "nunjucksFilters", "extensions", "derivedMetrics",
                    "redteam", "assertionTemplates"})
_MAX_REFS = 10_000   # `$ref`s followed in one config: honest configs use a handful
_SKIPPED_OPTIONS = {
    "storeOutputAs": "a later test reads this test's answer: each imported test asks on its own",
    "transformVars": "its vars are computed by JavaScript: write them out",
    "rubricPrompt": "the engine's judge uses its own prompt (a suite's `judge_prompt:` can replace it)",
}
_REASONING = re.compile(r"(^|/)(o1|o3|o4|gpt-5)")


@dataclass(frozen=True)
class Note:
    """One thing the import could not carry over (or changed), at its place in the promptfoo files."""

    file: Path
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else str(self.file)
        return f"{where}: {self.message}"


@dataclass
class Imported:
    """What `import_promptfoo` wrote, and what it could not carry over.

    Args:
        suites: The suite files written (one per prompt that kept a test).
        models: The models file, or None when no provider could be imported.
        scorers: The python scorer modules written.
        tests: The tests imported (each var combination one).
        notes: Everything not carried over, at its place.
        test_ids: Every test's id in promptfoo's order of tests (its `testIdx`), left-out ones included.
        prompt_suites: Per prompt, in promptfoo's order (its `promptIdx`), the suite name, or None when none
            was written.
    """

    suites: list[Path] = field(default_factory=list)
    models: Path | None = None
    scorers: list[Path] = field(default_factory=list)
    tests: int = 0
    notes: list[Note] = field(default_factory=list)
    test_ids: list[str] = field(default_factory=list)
    prompt_suites: list[str | None] = field(default_factory=list)


@dataclass(frozen=True)
class _Prompt:
    """One prompt: its label (the suite's name), its raw template, where it was written."""

    label: str
    raw: str
    where: Where


@dataclass(frozen=True)
class _Test:
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


def _slug(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub("-", text.strip().lower()).strip("-.")


def _file_ref(value: Any) -> str | None:
    return value[len("file://"):] if isinstance(value, str) and value.startswith("file://") else None


def _looks_like_path(text: str) -> bool:
    """promptfoo's maybeFilePath: a one-line text that names a file (by a known extension, `*`, or `/`)."""
    if "\n" in text or ("://" in text and not text.startswith("file://")):
        return False
    return (text.startswith("file://") or text.endswith((*_PROMPT_TEXT, *_SCRIPTS, ".csv"))
            or "*" in text or "/" in text or "\\" in text)


def _expand(variables: Mapping[str, Any], glob: Any) -> list[dict[str, Any]]:
    """promptfoo's generateVarCombinations: a var holding a list of texts makes one test per item (every
    combination), and a `file://` glob one per file it matches."""
    combos: list[dict[str, Any]] = [{}]
    for key, value in variables.items():
        if isinstance(value, str) and value.startswith("file://") and any(c in value for c in "*?["):
            values: list[Any] = glob(value)
        elif isinstance(value, list) and value and isinstance(value[0], str):
            values = value
        else:
            values = [value]
        combos = [{**combo, key: item} for combo in combos for item in values]
    return combos


class _Importer:
    """Reads one config and everything it names; `build` maps it."""

    def __init__(self, config: Path, allow_outside: bool) -> None:
        self.config = config
        self.folder = config.parent
        self.files = Files(self.folder, allow_outside)
        self.root = self.files.yaml(config, Where(config))
        if not isinstance(self.root.data, Mapping):
            raise ConfigError(f"{config}: a promptfoo config is a mapping with `prompts:`, `providers:` and "
                              "`tests:`")
        self.data: Mapping[str, Any] = _dereferenced(self.root.data, self.root.data, config)
        self.notes: list[Note] = []
        self._noted: set[tuple[Path, int | None, str]] = set()
        self.scorers = Scorers(self.files, self.folder)
        self.images = Images()

    def note(self, where: Where, message: str) -> None:
        message = _one_line(message)
        key = (where.file, where.line, message)
        if key not in self._noted:
            self._noted.add(key)
            self.notes.append(Note(where.file, where.line, message))

    def short(self, where: Where) -> str:
        """A place as the suites name it: the file relative to the config's folder, and the line."""
        try:
            name = where.file.resolve().relative_to(self.files.root).as_posix()
        except ValueError:
            name = str(where.file)
        return f"{name}:{where.line}" if where.line is not None else name

    # ---------------------------------------------------------------- prompts

    def prompts(self) -> list[_Prompt]:
        raw = self.data.get("prompts")
        if raw is None or raw == [] or raw == "":
            raise ConfigError(f"{self.config}: no `prompts:`; a promptfoo config lists its prompts there")
        if isinstance(raw, Mapping):   # {file_or_text: label}
            items: list[tuple[Any, Where]] = [({"raw": k, "label": v}, self.root.at("prompts", k))
                                              for k, v in raw.items()]
        else:
            listed = raw if isinstance(raw, list) else [raw]
            items = [(item, self.root.at("prompts", i) if isinstance(raw, list) else self.root.at("prompts"))
                     for i, item in enumerate(listed)]
        out: list[_Prompt] = []
        for item, where in items:
            label = None
            if isinstance(item, Mapping):
                label = item.get("label")
                for key in ("config", "function"):
                    if key in item:
                        self.note(where, f"a prompt's `{key}` is not carried: set what it changes in models.yaml")
                item = item.get("raw", item.get("id"))
            if not isinstance(item, str):
                self.note(where, "prompt not imported: a prompt is text or a file:// reference")
                continue
            out.extend(self._prompt(item, None if label is None else js_string(label), where))
        # A prompt written inline without a label is named by its place in the list.
        out = [p if p.label else _Prompt(f"prompt-{n}", p.raw, p.where) for n, p in enumerate(out, start=1)]
        if not out:
            raise ConfigError(f"{self.config}: no prompt could be imported (the reasons are above)")
        return out

    def _prompt(self, text: str, label: str | None, where: Where) -> list[_Prompt]:
        if text.startswith("exec:") or not _looks_like_path(text):
            return [_Prompt(label or "", text, where)]
        ref = _file_ref(text) or text
        if any(c in ref for c in "*?["):
            paths = self._glob(ref, self.folder, where)
            if not paths:
                return [_Prompt(label or "", text, where)]   # promptfoo sends the text itself then
            return [p for path in paths for p in self._prompt_file(path, ref, label, where)]
        if re.search(r"\.\w+:\w+$", ref):
            self.note(where, f"prompt {text} not imported: a prompt made by a function runs code; write the "
                             "prompt it returns into the config")
            return []
        if not text.startswith("file://") and not self.files.is_file(self.folder / ref):
            return [_Prompt(label or "", text, where)]   # text that only looks like a path
        return self._prompt_file(self.files.path(ref, self.folder, where), ref, label, where)

    def _prompt_file(self, path: Path, ref: str, label: str | None, where: Where) -> list[_Prompt]:
        suffix = path.suffix.lower()
        name = label or path.stem
        if suffix not in _PROMPT_TEXT:
            self.note(where, f"prompt {ref} not imported: only text, Markdown, Jinja, JSON, JSON Lines and YAML "
                             "prompt files are read (a script's prompt runs code); write the prompt it makes")
            return []
        text = self.files.read_text(path, where)
        if suffix in (".yaml", ".yml"):
            return [_Prompt(name, js_json(self.files.yaml(path, where).data), where)]
        if suffix == ".jsonl":
            lines = [line for line in re.split(r"\r?\n", text) if line]
            return [_Prompt(name if len(lines) == 1 else f"{name}-{n}", line, where)
                    for n, line in enumerate(lines, start=1)]
        if suffix == ".txt":
            parts: list[str] = []
            buffer: list[str] = []
            for line in re.split(r"\r?\n", text):
                if line.strip() == "---":
                    parts.append("\n".join(buffer).strip())
                    buffer = []
                else:
                    buffer.append(line)
            parts.append("\n".join(buffer).strip())
            parts = [p for p in parts if p]
            return [_Prompt(name if len(parts) == 1 else f"{name}-{n}", part, where)
                    for n, part in enumerate(parts, start=1)]
        return [_Prompt(name, text, where)]

    def _glob(self, pattern: str, base: Path, where: Where) -> list[Path]:
        """The files a glob matches, in name order, each checked to be inside the config's folder."""
        try:
            found = glob.glob(str(base / pattern), recursive=True)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{where}: the pattern {pattern!r} cannot be read ({exc}); fix it") from None
        matched = sorted(Path(p) for p in found if self.files.is_file(Path(p)))
        return [self.files.path(str(p), base, where) for p in matched]

    # ---------------------------------------------------------------- providers

    def providers(self) -> dict[str, dict[str, Any]]:
        key = "providers" if "providers" in self.data else "targets"
        raw = self.data.get(key)
        items = raw if isinstance(raw, list) else ([] if raw is None else [raw])
        models: dict[str, dict[str, Any]] = {}
        for index, item in enumerate(items):
            where = self.root.at(key, index) if isinstance(raw, list) else self.root.at(key)
            entry: Mapping[str, Any]
            if isinstance(item, Mapping) and "id" not in item and len(item) == 1:   # {openai:gpt-4: {config: ..}}
                ident, options = next(iter(item.items()))
                entry = {"id": ident, **(options if isinstance(options, Mapping) else {})}
            else:
                entry = item if isinstance(item, Mapping) else {"id": item}
            self._provider(entry, where, models)
        return models

    def _provider(self, entry: Mapping[str, Any], where: Where, models: dict[str, dict[str, Any]]) -> None:
        ident = str(entry.get("id", ""))
        config = entry.get("config") or {}
        if not isinstance(config, Mapping):
            config = {}
        parts = ident.split(":")
        if parts[0] == "openai" and len(parts) >= 2 and parts[1] not in ("responses", "assistant", "realtime",
                                                                          "embedding", "embeddings", "image"):
            api = "completions" if parts[1] == "completion" else "chat"
            model_id = ":".join(parts[2:] if parts[1] in ("chat", "completion") else parts[1:])
            default_url = "https://api.openai.com/v1"
        elif parts[0] == "ollama" and len(parts) >= 3 and parts[1] == "chat":
            api, model_id, default_url = "chat", ":".join(parts[2:]), "http://127.0.0.1:11434/v1"
        else:
            self.note(where, f"provider {ident or entry!r} not imported: only OpenAI-compatible providers "
                             "(openai:chat:MODEL with config.apiBaseUrl, ollama:chat:MODEL) map; add it to "
                             "models.yaml by hand with its OpenAI-compatible base_url")
            return
        if not model_id:
            self.note(where, f"provider {ident}: no model named; write the model after the last `:`")
            return
        base_url = config.get("apiBaseUrl") or (f"https://{config['apiHost']}/v1" if config.get("apiHost")
                                                else default_url)
        name = _slug(str(entry.get("label") or ident), _MODEL_NAME) or "model"
        if not re.match(r"[A-Za-z_]", name):
            name = "_" + name
        while name in models:
            name += "-2"
        model: dict[str, Any] = {"base_url": str(base_url), "model": model_id}
        if api == "completions":
            model["api"] = "completions"
        if parts[0] == "openai":
            env_name = str(config.get("apiKeyEnvar") or "OPENAI_API_KEY")
            model["api_key_env"] = env_name
            if config.get("apiKey"):
                self.note(where, f"provider {name}: its literal apiKey was not copied; models.yaml reads the key "
                                 f"from ${env_name}: export {env_name}=... before `engine run`")
        params = {p: copy.deepcopy(config[p]) for p in _PARAMS if p in config}
        if parts[0] == "openai" and api == "chat" and not _REASONING.search(model_id):
            # promptfoo's OpenAI defaults, so the same request is sent (src/providers/openai/chat.ts).
            params.setdefault("temperature", 0)
            params.setdefault("max_tokens", 1024)
        if params:
            model["params"] = params
        left = sorted(str(k) for k in config if k not in (*_PARAMS, "apiBaseUrl", "apiHost", "apiKey",
                                                           "apiKeyEnvar"))
        if left:
            self.note(where, f"provider {name}: config {', '.join(left)} not imported; set the equivalent under "
                             "`params:` in models.yaml if the server takes it")
        for key in ("prompts", "transform", "delay"):
            if key in entry:
                self.note(where, f"provider {name}: `{key}` not imported; every model answers every prompt as asked")
        models[name] = model

    # ---------------------------------------------------------------- tests

    def tests(self) -> list[_Test]:
        """Every test with its place, file references expanded, in order (scenarios after the tests)."""
        raw = self.data.get("tests")
        out: list[_Test] = []
        if isinstance(raw, str):   # promptfoo's readTests: a YAML glob, else a standalone file
            ref = _file_ref(raw) or raw
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
                    out.append(self._with_vars(_Test(item, where, self.folder, self.root, ("tests", index))))
                else:
                    self.note(where, "test not imported: a test is a mapping or a file:// reference")
        elif raw is not None:
            self.note(self.root.at("tests"), "`tests:` not imported: it is a list, a file or a glob")
        scenarios = self.data.get("scenarios")
        if scenarios is not None:
            out.extend(self._scenarios(scenarios))
        if raw is None and scenarios is None:
            out.append(_Test({}, self.root.at(), self.folder))   # promptfoo runs each prompt once then
        return out

    def _test_source(self, ref_text: str, base: Path, where: Where) -> list[_Test]:
        """A `tests:` list entry that is text: a glob of YAML, JSON or JSON Lines test files (promptfoo's
        loadTestsFromGlob), or a standalone file (a CSV, a script)."""
        ref = _file_ref(ref_text) or ref_text
        if ref.startswith(("huggingface://", "https://", "http://", "az://")):
            self.note(where, f"tests from {ref_text} not imported: the import reads local files only; save the "
                             "tests to a CSV, JSON or YAML file beside the config")
            return []
        if re.search(r"\.\w+:\w+$", ref) or ref.endswith((*_SCRIPTS, ".xlsx", ".xls", ".csv")):
            return self._standalone(ref_text, base, where)
        paths = self._glob(ref, base, where) if any(c in ref for c in "*?[") else \
            [self.files.path(ref, base, where)]
        out: list[_Test] = []
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

    def _standalone(self, ref_text: str, base: Path, where: Where) -> list[_Test]:
        """promptfoo's readStandaloneTestsFile: CSV, JSON, JSON Lines or YAML rows; a script that makes tests is
        not run."""
        ref = _file_ref(ref_text) or ref_text
        function = re.search(r"\.\w+(:\w+)$", ref)
        path_text = ref[:function.start(1)] if function else ref
        suffix = Path(path_text).suffix.lower()
        if suffix in _SCRIPTS:
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

    def _test_file(self, path: Path, where: Where, *, standalone: bool) -> list[_Test]:
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
            out.append(self._with_vars(_Test(row, at, path.parent, *source)))
        return out

    def _json_line(self, line: str, path: Path, number: int) -> Any:
        loaded = load_yaml_text(line, str(path), kind=CONFIG)
        if loaded.diagnostics:
            raise ConfigError(f"{path}:{number}: not a JSON line: {loaded.diagnostics[0].message}")
        return loaded.data

    def _csv(self, path: Path, where: Where) -> list[_Test]:
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
                out.append(_Test(test, at, path.parent))
                start = reader.line_num + 1
        except csv.Error as exc:
            raise ConfigError(f"{path}:{reader.line_num}: not valid CSV: {exc}; fix the file") from None
        return out

    def _with_vars(self, test: _Test) -> _Test:
        """A test whose `vars:` names YAML files: their mappings merged, as promptfoo's readTestFiles does."""
        refs = test.test.get("vars")
        if not isinstance(refs, (str, list)):
            return test
        merged: dict[str, Any] = {}
        for ref in ([refs] if isinstance(refs, str) else refs):
            if not isinstance(ref, str):
                continue
            ref = _file_ref(ref) or ref
            paths = self._glob(ref, test.base, test.where) if any(c in ref for c in "*?[") else \
                [self.files.path(ref, test.base, test.where)]
            for path in paths:
                data = self.files.yaml(path, test.where).data
                if not isinstance(data, Mapping):
                    raise ConfigError(f"{test.where}: vars file {path} does not hold a mapping of var -> value; "
                                      "write `name: value` lines")
                merged.update(data)
        return _Test({**test.test, "vars": merged}, test.where, test.base, test.source, test.path)

    def _scenarios(self, scenarios: Any) -> list[_Test]:
        """promptfoo's scenarios: each `config` entry with each of the scenario's tests."""
        out: list[_Test] = []
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
                    out.append(self._with_vars(_Test(merged, where, self.folder)))
        return out

    def default_test(self) -> Mapping[str, Any]:
        default = self.data.get("defaultTest") or {}
        if isinstance(default, str):
            ref = _file_ref(default)
            if ref is None:
                self.note(self.root.at("defaultTest"), "defaultTest is neither a mapping nor a file://; ignored")
                return {}
            loaded = self.files.yaml(self.files.path(ref, self.folder, self.root.at("defaultTest")),
                                     self.root.at("defaultTest"))
            default = loaded.data
        if not isinstance(default, Mapping):
            self.note(self.root.at("defaultTest"), "defaultTest is not a mapping; ignored")
            return {}
        return self._with_vars(_Test(default, self.root.at("defaultTest"), self.folder)).test

    # ---------------------------------------------------------------- building

    def build(self, out: Path) -> Imported:
        for key in self.data:
            if key not in _QUIET:
                self.note(self.root.at(key, key=True), f"`{key}` not imported: nothing here matches it")
        for key, why in (("nunjucksFilters", "custom filters are JavaScript; a prompt that uses one is left out"),
                         ("extensions", "extension hooks run code"), ("derivedMetrics", "no derived metrics here"),
                         ("redteam", "red-team generation is not part of an import")):
            if key in self.data:
                self.note(self.root.at(key, key=True), f"`{key}` not imported: {why}")
        prompts = self.prompts()
        models = self.providers()
        default = self.default_test()
        judge = self._judge(default, models)
        name = _slug(str(self.data.get("description") or self.config.stem), _TEST_ID)[:40].strip("-.") or "promptfoo"
        suites: list[list[dict[str, Any]]] = [[] for _ in prompts]
        left_out: list[str] = []
        carried_notes: list[str] = []
        used: set[str] = set()
        order: list[str] = []
        count = 0
        for number, at in enumerate(self.tests(), start=1):
            test = self._merged(at.test, default)
            stem = _slug(str(test["description"]), _TEST_ID) if test.get("description") else ""
            options = test.get("options") or {}
            place = at.where
            combos = ([dict(test.get("vars") or {})] if options.get("disableVarExpansion")
                      else _expand(test.get("vars") or {}, lambda value, place=place: self._glob_var(value, place)))
            for variant, variables in enumerate(combos, start=1):
                wanted = (stem or f"test-{number}") + (f"-{variant}" if len(combos) > 1 else "")
                test_id, n = wanted, 2
                while test_id in used:
                    test_id, n = f"{wanted}-{n}", n + 1
                used.add(test_id)
                order.append(test_id)
                try:
                    variables = prepare_vars(load_file_vars(copy.deepcopy(variables), self.files, self.folder,
                                                            at.where))
                except NotCarried as exc:
                    self.note(at.where, f"test {test_id} left out: {exc}")
                    left_out.append(f"{self.short(at.where)} test {test_id}: {exc}")
                    continue
                evaluation, python = self._evaluation(test, at, test_id, variables, judge, carried_notes,
                                                      first=variant == 1)
                count += 1
                for tests_of_prompt, prompt in zip(suites, prompts, strict=True):
                    entry = self._entry(test, test_id, prompt, variables, at, evaluation, python, left_out)
                    if entry is not None:
                        tests_of_prompt.append(entry)
        try:
            result = self._write(out, name, prompts, suites, models, count, left_out, carried_notes)
        except OSError as exc:
            raise ConfigError(f"cannot write the suites to {out}: {exc.strerror or exc}; choose another --out "
                              "folder") from None
        result.test_ids = order
        return result

    def _merged(self, test: Mapping[str, Any], default: Mapping[str, Any]) -> dict[str, Any]:
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

    def _judge(self, default: Mapping[str, Any], models: Mapping[str, Any]) -> str | None:
        grading = (default.get("options") or {}).get("provider")
        if grading is None:
            return None
        ident = grading.get("id") if isinstance(grading, Mapping) else grading
        judge = _slug(str(ident), _MODEL_NAME) if isinstance(ident, str) else None
        if judge not in models:
            self.note(self.root.at("defaultTest"), "defaultTest.options.provider (the grader) is not one of the "
                                                   "imported providers; name the judge in models.yaml "
                                                   "(`defaults: {judge: NAME}`)")
            return None
        return judge

    def _glob_var(self, value: str, where: Where) -> list[str]:
        ref = value[len("file://"):]
        paths = self._glob(ref, self.folder, where)
        if not paths:
            self.note(where, f"{value} matches no file, so promptfoo stops; the test is left out")
        return [f"file://{p.relative_to(self.folder).as_posix()}" for p in paths]

    def _evaluation(self, test: dict[str, Any], at: _Test, test_id: str, variables: Mapping[str, Any],
                    judge: str | None, carried_notes: list[str], first: bool) -> tuple[dict[str, Any], bool]:
        """The test's eval (every assert carried or a placeholder), and whether a python scorer needs the vars."""
        options = test.get("options") or {}
        for option, reason in _SKIPPED_OPTIONS.items():
            if option in options and first:
                self.note(at.where, f"test {test_id}: option `{option}` not imported: {reason}")
        test_transform = options.get("transform", options.get("postprocess"))
        steps: tuple[str, ...] | None = () if test_transform is None else string_transform(test_transform)
        evals: list[dict[str, Any]] = []
        for assertion, (own, index) in test["_asserts"]:
            if not isinstance(assertion, Mapping):
                continue
            where = at.assert_at(index) if own else self.root.at("defaultTest", "assert", index)
            site = AssertSite(where=where, files=self.files, base=self.folder, judge=judge, scorers=self.scorers,
                              transform=steps)
            spec, why = map_assert(assertion, variables, site)
            refused = _engine_problem(spec, self.folder) if spec is not None else None
            if refused is not None:
                spec, why = None, f"`{assertion.get('type')}` is not carried: the engine would refuse it as written "\
                                  f"({refused})"
            if spec is None:
                text = f"{describe(assertion)} (promptfoo assert at {self.short(where)})"
                spec = {"not_carried": literal(text)}
                if first:
                    self.note(where, f"test {test_id}: {why}; the test keeps a `not_carried` placeholder, an error "
                                     "until you replace it")
                    carried_notes.append(f"{self.short(where)} test {test_id}: {describe(assertion)}: {why}")
            elif first and "judge" in spec and not judge:
                self.note(where, f"test {test_id}: name the judge: `defaults: {{judge: NAME}}` in models.yaml")
            elif first and _kinds(spec) & {"cost"}:
                self.note(where, f"test {test_id}: the cost check reads the run's cost: give the model its price in "
                                 "models.yaml (`price: {input: ..., output: ...}` per million tokens), as promptfoo "
                                 "knows OpenAI's prices")
            elif first and "similar" in spec:
                self.note(where, f"test {test_id}: name the embedding model: `defaults: {{embedding: NAME}}` in "
                                 "models.yaml")
            evals.append(spec)
        threshold = test.get("threshold")
        if threshold is not None:
            # promptfoo holds the weighted mean to a number threshold and ignores any other value.
            try:
                test["threshold"] = share(threshold, "threshold")
            except NotCarried as exc:
                test["threshold"] = None
                if isinstance(threshold, (int, float)) and not isinstance(threshold, bool):
                    evals.append({"not_carried": literal(f"threshold {threshold} (promptfoo test at "
                                                         f"{self.short(at.where)}): no score meets it")})
                if first:
                    self.note(at.where, f"test {test_id}: {exc}" + ("" if evals and "not_carried" in evals[-1]
                                                                    else "; promptfoo ignores it, and so does the "
                                                                         "import"))
        python = any("python" in _kinds(spec) for spec in evals)
        return _combined(evals, test.get("threshold")), python

    def _entry(self, test: Mapping[str, Any], test_id: str, prompt: _Prompt, variables: Mapping[str, Any],
               at: _Test, evaluation: dict[str, Any], python: bool, left_out: list[str]) -> dict[str, Any] | None:
        """One suite's test: what the prompt asks with these vars, and the eval; None when it is left out."""
        wanted = test.get("prompts")
        if wanted is not None and not _prompt_allowed(prompt.label, wanted):
            return None
        options = test.get("options") or {}
        raw = js_string(options.get("prefix") or "") + prompt.raw + js_string(options.get("suffix") or "")
        try:
            if "_conversation" in raw:
                raise NotCarried("the prompt reads `_conversation`, the answers of earlier tests: each imported "
                                 "test asks on its own")
            messages = engine_messages(chat_messages(render_prompt(raw, variables)), self.images)
        except NotCarried as exc:
            self.note(at.where, f"test {test_id} left out of the suite for prompt {prompt.label!r} "
                                f"({self.short(prompt.where)}): {exc}")
            left_out.append(f"{self.short(at.where)} test {test_id} (prompt {prompt.label}): {exc}")
            return None
        entry: dict[str, Any] = {"id": test_id}
        if test.get("description"):
            entry["description"] = literal(js_string(test["description"]))
        if len(messages) == 1 and messages[0]["role"] == "user" and isinstance(messages[0]["content"], str):
            entry["prompt"] = literal(messages[0]["content"])
        else:
            entry["messages"] = [{"role": m["role"], "content": _literal_content(m["content"])} for m in messages]
        entry["eval"] = evaluation
        if isinstance(test.get("threshold"), float):
            entry["threshold"] = test["threshold"]
        if python:
            entry["cases"] = [_case_row(variables)]   # promptfoo's python asserts read the vars
        return entry

    def _write(self, out: Path, name: str, prompts: list[_Prompt], suites: list[list[dict[str, Any]]],
               models: dict[str, Any], count: int, left_out: list[str], carried_notes: list[str]) -> Imported:
        from ruamel.yaml import YAML

        result = Imported(tests=count, notes=self.notes)
        out.mkdir(parents=True, exist_ok=True)
        yaml = YAML(typ="rt")
        yaml.width = 4096
        yaml.allow_unicode = True
        header = [f"# Imported from {self.config.name} by `engine import promptfoo`; check it with `engine validate`."]
        if carried_notes:
            header.append("# Not carried over: each is a `not_carried` check in its test, an error until you replace "
                          "it with an evaluator that does its job:")
            header += [f"#   {_one_line(line)}" for line in carried_notes]
        if left_out:
            header.append("# Left out (promptfoo's prompt could not be made the same way):")
            header += [f"#   {_one_line(line)}" for line in left_out]
        labels = [_slug(p.label, _TEST_ID) for p in prompts]
        for number, prompt in enumerate(prompts, start=1):
            label = labels[number - 1]
            suite_name = name if len(prompts) == 1 else \
                f"{name}-{label[:40].strip('-.') if label and labels.count(label) == 1 else number}"
            suite = {"suite": suite_name,
                     "description": f"Imported from {self.config.name} by `engine import promptfoo`"
                                    + (f" (prompt {prompt.label[:60]})" if len(prompts) > 1 else "") + ".",
                     "tests": suites[number - 1]}
            if not suite["tests"]:
                self.note(prompt.where, f"prompt {prompt.label!r}: no test could be imported for it; no suite written")
                result.prompt_suites.append(None)
                continue
            result.prompt_suites.append(suite_name)
            path = out / f"{suite_name}.yaml"
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("\n".join(header) + "\n")
                yaml.dump(suite, handle)
            result.suites.append(path)
        result.scorers = self.scorers.write(out)
        for image, data in self.images.files.items():
            (out / image).parent.mkdir(parents=True, exist_ok=True)
            (out / image).write_bytes(data)
        if models:
            result.models = out / "models.yaml"
            with open(result.models, "w", encoding="utf-8") as handle:
                handle.write(f"# Imported from {self.config.name} by `engine import promptfoo`. Keys are read from "
                             "the environment variable each api_key_env names, never written here.\n")
                yaml.dump({"models": models}, handle)
        return result


def _dereferenced(value: Any, root: Any, config: Path) -> Any:
    """The config with its local JSON references (`{$ref: '#/assertionTemplates/x'}`) replaced by what they
    point at, as promptfoo's $RefParser does; a reference elsewhere, a loop or too many are a ConfigError."""
    followed = 0

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        nonlocal followed
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and len(node) == 1:
                followed += 1
                if not ref.startswith("#/") or ref in seen or followed > _MAX_REFS:
                    why = ("a reference loop" if ref in seen else "too many references" if followed > _MAX_REFS
                           else "only references inside the config (#/...) are read")
                    raise ConfigError(f"{config}: $ref {ref!r} is not read: {why}; write the value out")
                target: Any = root
                for part in ref[2:].split("/"):
                    part = part.replace("~1", "/").replace("~0", "~")
                    if isinstance(target, Mapping) and part in target:
                        target = target[part]
                    elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                        target = target[int(part)]
                    else:
                        raise ConfigError(f"{config}: $ref {ref!r} points at nothing; fix the path")
                return resolve(target, (*seen, ref))
            return {key: resolve(item, seen) for key, item in node.items()}
        if isinstance(node, list):
            return [resolve(item, seen) for item in node]
        return node

    return resolve(value, ())


def _one_line(text: str) -> str:
    """Text for a comment or a warning line: line breaks and other unprintable characters escaped (\\n)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _prompt_allowed(label: str, wanted: Any) -> bool:
    """A test's `prompts:` filter (labels, `Group:*` wildcards, a `Group` prefix)."""
    for ref in wanted if isinstance(wanted, list) else [wanted]:
        ref = js_string(ref)
        if ref == label or (ref.endswith("*") and label.startswith(ref[:-1])) or label.startswith(ref + ":"):
            return True
    return False


def _engine_problem(spec: dict[str, Any], folder: Path) -> str | None:
    """Why `engine validate` would refuse an evaluator the import made (an invalid inner JSON Schema, a pattern RE2
    cannot run), or None: each kind's own load-time checks and the compile, as the loader runs them. A python
    scorer's file is written after the mapping, so its check waits for `engine validate`."""
    report = Report("promptfoo", Positions())
    if "python" not in _kinds(spec):
        EvaluatorResolver({}, report, folder).resolve(spec, ())
    problem = next((d.message for d in report.diagnostics if d.severity == "error"), None)
    if problem is None:
        problem = next((n.problem for _, n in compile_spec(spec, {}).walk() if n.problem), None)
    return problem


def _kinds(spec: Any) -> set[str]:
    """Every evaluator kind in a spec tree."""
    if isinstance(spec, Mapping):
        return set(spec) | {k for v in spec.values() for k in _kinds(v)}
    if isinstance(spec, list):
        return {k for v in spec for k in _kinds(v)}
    return set()


def _combined(evals: list[dict[str, Any]], threshold: Any) -> dict[str, Any]:
    """The test's eval: promptfoo passes a test when every counted assert passes (or, with a threshold, when
    the weighted mean score reaches it); a test with no assert is recorded unscored."""
    if not evals:
        return {"none": True}   # promptfoo shows the answer for a person to read; here it is recorded unscored
    if threshold is not None:
        return {"all": evals}   # the test's threshold on the weighted mean, whatever each assert says
    partial = any(_kinds(spec) & {"similar", "judge", "python"} for spec in evals)
    if not partial:
        return evals[0] if len(evals) == 1 else {"all": evals}
    # Checks that pass below a full score (a similarity at its threshold, a judge's scale, promptfoo's
    # {pass, score}): each is a gate, and the test passes when every gate does, whatever the mean.
    gated = [{**spec, "must": True} if spec.get("weight", 1) != 0 else spec for spec in evals]
    return {"all": gated, "threshold": 0.0}


def _literal_content(content: Any) -> Any:
    if isinstance(content, str):
        return literal(content)
    return [{**part, "text": literal(part["text"])} if "text" in part else part for part in content]


def _case_row(variables: Mapping[str, Any]) -> dict[str, Any]:
    """The vars as a case row (for the python scorers' `case`), as plain YAML values."""
    def plain(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value if isinstance(value, (str, int, float, bool)) or value is None else js_string(value)

    return {str(k): plain(v) for k, v in variables.items()}


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


def import_promptfoo(config: Path, out: Path, *, allow_outside: bool = False) -> Imported:
    """Write `out/<name>.yaml` (one suite per prompt), `out/models.yaml` and the python scorers from a config.

    Args:
        config: promptfoo's YAML config (`promptfooconfig.yaml`).
        out: The folder to write to (created if needed).
        allow_outside: Read files the config names outside its own folder (refused otherwise).

    Returns:
        The files written, the number of tests, and a note for everything not carried over.

    Raises:
        ConfigError: The config or a file it names cannot be read, or is refused (outside its folder, too big,
            an alias bomb); the message names the place and the fix.
    """
    importer = _Importer(Path(config), allow_outside)
    return importer.build(Path(out))
