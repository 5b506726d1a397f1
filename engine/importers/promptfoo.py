"""A promptfoo config -> YAML suites and a models file.

promptfoo runs every prompt against every test (a test is `vars` + `assert`s) on every provider. Here each
prompt becomes one suite whose tests are the config's tests with their vars rendered into the prompt, each
provider an OpenAI-compatible models file entry, and each assert one of our evaluators chosen so that the
verdict is promptfoo's (its exact-match and prefix asserts become anchored regexes, as ours trim the
answer). Whatever has no equivalent is listed as a `Note` with its file and line and what to do instead:
nothing is dropped without a word. A literal `apiKey` is never copied.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2.sandbox import SandboxedEnvironment

from engine.errors import ConfigError
from engine.evaluators.text import check_pattern

__all__ = ["Imported", "Note", "import_promptfoo", "map_assert"]

# Nunjucks leaves an unknown variable empty; so does Jinja's default Undefined.
_NUNJUCKS = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True)
_MODEL_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_TEST_ID = re.compile(r"[^a-z0-9_.]+")
_PARAMS = ("temperature", "max_tokens", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty")
_NOT_MAPPED = {
    "javascript": "rewrite it as one of our evaluators (docs/evaluators.md) or a `regex`",
    "python": "our Python scorer does not exist yet; rewrite it as one of our evaluators or a `regex`",
    "latency": "our budget evaluators do not exist yet; read the `latency_s` column in the results instead",
    "cost": "our budget evaluators do not exist yet; read the `cost` column, or cap a run with `--max-cost`",
    "levenshtein": "no edit-distance evaluator here; use `equals`, `similar` with a threshold, or a `regex`",
}


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
    """What `import_promptfoo` wrote, and what it could not map."""

    suites: list[Path] = field(default_factory=list)
    models: Path | None = None
    tests: int = 0
    notes: list[Note] = field(default_factory=list)


@dataclass(frozen=True)
class _At:
    """A test as read, with its file and the line it starts on."""

    test: Mapping[str, Any]
    file: Path
    line: int | None


@dataclass
class _Source:
    """A mapping or list read from a promptfoo file, with the file for notes."""

    value: Any
    file: Path

    def line(self, key: Any = None) -> int | None:
        """The 1-based line of `key` in this value (of the value itself without one), when known."""
        lc = getattr(self.value, "lc", None)
        if lc is None:
            return None
        try:
            if key is None:
                return int(lc.line) + 1
            spot = lc.key(key) if isinstance(self.value, Mapping) else lc.item(key)
            return int(spot[0]) + 1
        except (KeyError, IndexError, TypeError, AttributeError):
            return int(lc.line) + 1


def _load_yaml(path: Path) -> Any:
    from ruamel.yaml import YAML, YAMLError

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    try:
        return YAML(typ="rt").load(text)
    except YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def _js_str(value: Any) -> str:
    """`String(value)` as JavaScript writes it (2.0 is "2", true is "true")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _render(value: Any, variables: Mapping[str, Any]) -> Any:
    """A promptfoo (Nunjucks) template rendered with the test's vars; lists and mappings recursively."""
    if isinstance(value, str):
        return _NUNJUCKS.from_string(value).render(**variables) if ("{{" in value or "{%" in value) else value
    if isinstance(value, list):
        return [_render(v, variables) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _render(v, variables) for k, v in value.items()}
    return value


def _literal(text: str) -> str:
    """Text that our loader must not read as a template, kept verbatim with a raw block."""
    if "{{" in text or "{%" in text or "{#" in text:
        return "{% raw %}" + text + "{% endraw %}"
    return text


def _plain(value: Any) -> Any:
    """ruamel's round-trip containers as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _values(value: Any) -> list[str]:
    """A contains-any/all value: a list, or one comma-separated text (quotes group, as promptfoo reads it)."""
    if isinstance(value, list):
        return [_js_str(v) for v in value]
    row = next(csv.reader([str(value)], skipinitialspace=True), [])
    return [cell.strip() for cell in row]


def _js_regex(pattern: str) -> str:
    """A JavaScript pattern in Python's syntax: named groups and their back-references."""
    return re.sub(r"\\k<([A-Za-z_]\w*)>", r"(?P=\1)", re.sub(r"\(\?<([A-Za-z_]\w*)>", r"(?P<\1>", pattern))


def map_assert(assertion: Mapping[str, Any], variables: Mapping[str, Any],
               judge: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """One promptfoo assert as our evaluator, or (None, why and what to do).

    Args:
        assertion: The assert (`type`, `value`, optional `threshold`, `weight`, `metric`).
        variables: The test's vars, for the value's templates.
        judge: The models file entry a `judge` should use (promptfoo's grading provider), if known.
    """
    kind = str(assertion.get("type", ""))
    negate = kind.startswith("not-")
    base = kind[4:] if negate else kind
    value = _render(_plain(assertion.get("value")), variables)
    threshold = assertion.get("threshold")
    spec: dict[str, Any]
    if base in _NOT_MAPPED:
        return None, f"`{kind}` assert not imported: {_NOT_MAPPED[base]}"
    if base in ("contains", "icontains") and negate:
        spec = {"not_contains": _literal(_js_str(value))}
        if base == "contains":
            spec["case_sensitive"] = True
        negate = False
    elif base in ("contains", "icontains"):
        spec = {"contains": _literal(_js_str(value))}
        if base == "contains":
            spec["case_sensitive"] = True
    elif base in ("contains-any", "icontains-any"):
        spec = {"contains": [_literal(v) for v in _values(value)], "mode": "any"}
        if base == "contains-any":
            spec["case_sensitive"] = True
    elif base in ("contains-all", "icontains-all"):
        # promptfoo scores it 0 or 1; our `contains` list gives partial credit, which a test threshold would see.
        # "not any value is missing" is 0 or 1 too: `any` takes the best child, `not` its complement.
        missing = [{"not_contains": _literal(v), **({"case_sensitive": True} if base == "contains-all" else {})}
                   for v in _values(value)]
        spec = {"not": {"any": missing}, "name": kind}
    elif base == "equals" and isinstance(value, (Mapping, list)):
        spec = {"json_schema": {"const": value}, "name": kind}
    elif base == "equals":
        spec = {"regex": _literal(r"\A" + re.escape(_js_str(value)) + r"\Z"), "name": kind}
    elif base == "starts-with":
        spec = {"regex": _literal(r"\A" + re.escape(_js_str(value))), "name": kind}
    elif base == "regex":
        pattern = _js_regex(_js_str(value))
        problem, _ = check_pattern(pattern)
        if problem is not None:
            return None, f"`{kind}` assert not imported: {problem}"
        spec = {"regex": _literal(pattern)}
    elif base in ("is-json", "contains-json"):
        spec = {"json_schema": value, "name": kind} if isinstance(value, Mapping) else {"is_json": True}
        if value is not None and not isinstance(value, Mapping):
            return None, f"`{kind}` with a schema that is not inline (a file or text) is not imported; inline it"
    elif base == "similar":
        spec = {"similar": {"reference": _literal(_js_str(value))}, "threshold": 0.75 if threshold is None
                else float(threshold)}
        threshold = None
    elif base in ("llm-rubric", "model-graded-closedqa"):
        spec = {"judge": {"rubric": _literal(_js_str(value))}}
        if judge:
            spec["judge"]["model"] = judge
    else:
        return None, (f"`{kind}` assert not imported: no evaluator here matches it; pick one from docs/evaluators.md"
                      if kind else "an assert without a `type` is not imported")
    if threshold is not None and base in ("llm-rubric", "model-graded-closedqa"):
        spec["threshold"] = float(threshold)
    if negate:
        spec.pop("name", None)
        spec = {"not": spec, "name": kind}
    if assertion.get("weight") is not None:
        spec["weight"] = assertion["weight"]
    if assertion.get("metric"):
        spec["name"] = str(assertion["metric"])
    return spec, None


def _slug(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub("-", text.strip().lower()).strip("-.")


def _file_ref(value: Any) -> str | None:
    return value[len("file://"):] if isinstance(value, str) and value.startswith("file://") else None


class _Importer:
    def __init__(self, config: Path) -> None:
        self.config = config
        self.folder = config.parent
        self.notes: list[Note] = []

    def note(self, source: _Source, key: Any, message: str) -> None:
        self.notes.append(Note(source.file, source.line(key), message))

    # ---------------------------------------------------------------- prompts

    def prompts(self, root: _Source) -> list[tuple[str, Any]]:
        """(label, text or chat messages) per prompt."""
        raw = root.value.get("prompts")
        if raw is None:
            raise ConfigError(f"{self.config}: no `prompts:`; a promptfoo config lists its prompts there")
        items = raw if isinstance(raw, list) else [raw]
        source = _Source(items, root.file) if isinstance(raw, list) else root
        out: list[tuple[str, Any]] = []
        for index, item in enumerate(items):
            key = index if isinstance(raw, list) else "prompts"
            label = None
            if isinstance(item, Mapping):
                label = item.get("label")
                item = item.get("raw", item.get("id"))
            ref = _file_ref(item)
            if ref is not None:
                path = self.folder / ref
                if path.suffix not in (".txt", ".md", ".j2", ".json", ".yaml", ".yml") or "*" in ref:
                    self.note(source, key, f"prompt {item} not imported: only text, JSON and YAML prompt files "
                                           "are read; write the prompt in the suite's `prompt:`")
                    continue
                try:
                    text = path.read_text(encoding="utf-8")
                except OSError as exc:
                    raise ConfigError(f"{source.file}:{source.line(key)}: cannot read prompt file {path}: {exc}") \
                        from None
                if path.suffix in (".yaml", ".yml"):
                    out.append((label or path.stem, _plain(_load_yaml(path))))
                    continue
                parts = text.split("\n---\n") if path.suffix != ".json" else [text]
                for n, part in enumerate(parts, start=1):
                    out.append((label or (path.stem if len(parts) == 1 else f"{path.stem}-{n}"), self._chat(part)))
            elif isinstance(item, str):
                out.append((label or f"prompt-{len(out) + 1}", self._chat(item)))
            else:
                self.note(source, key, "prompt not imported: a prompt is text or a file:// reference")
        return out

    @staticmethod
    def _chat(text: str) -> Any:
        """A prompt that is a JSON list of {role, content} messages is a chat; anything else is text."""
        stripped = text.strip()
        if stripped.startswith("["):
            try:
                parsed = json.loads(stripped)
            except ValueError:
                return text
            if isinstance(parsed, list) and all(isinstance(m, dict) and "role" in m for m in parsed):
                return parsed
        return text

    # ---------------------------------------------------------------- providers

    def providers(self, root: _Source) -> dict[str, dict[str, Any]]:
        raw = root.value.get("providers", root.value.get("targets"))
        items = raw if isinstance(raw, list) else ([] if raw is None else [raw])
        source = _Source(items, root.file) if isinstance(raw, list) else root
        models: dict[str, dict[str, Any]] = {}
        for index, item in enumerate(items):
            key = index if isinstance(raw, list) else "providers"
            entry: Mapping[str, Any] = item if isinstance(item, Mapping) else {"id": item}
            ident = str(entry.get("id", ""))
            config = entry.get("config") or {}
            parts = ident.split(":")
            if parts[0] == "openai" and len(parts) >= 2 and parts[1] not in ("responses", "assistant", "realtime",
                                                                              "embedding", "embeddings", "image"):
                api = "completions" if parts[1] == "completion" else "chat"
                model_id = ":".join(parts[2:] if parts[1] in ("chat", "completion") else parts[1:])
                default_url = "https://api.openai.com/v1"
            elif parts[0] == "ollama" and len(parts) >= 3 and parts[1] == "chat":
                api, model_id, default_url = "chat", ":".join(parts[2:]), "http://127.0.0.1:11434/v1"
            else:
                self.note(source, key, f"provider {ident or item!r} not imported: only OpenAI-compatible providers "
                                       "(openai:chat:MODEL with config.apiBaseUrl, ollama:chat:MODEL) map; add it to "
                                       "models.yaml by hand with its OpenAI-compatible base_url")
                continue
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
                    self.note(source, key, f"provider {name}: its literal apiKey was not copied; models.yaml reads "
                                           f"the key from ${env_name}: export {env_name}=... before `engine run`")
            params = {p: _plain(config[p]) for p in _PARAMS if p in config}
            if params:
                model["params"] = params
            left = sorted(str(k) for k in config if k not in (*_PARAMS, "apiBaseUrl", "apiHost", "apiKey",
                                                               "apiKeyEnvar"))
            if left:
                where, spot = (_Source(entry, source.file), "config") if "config" in entry else (source, key)
                self.note(where, spot, f"provider {name}: config {', '.join(left)} not imported; set the "
                                       "equivalent under `params:` in models.yaml if the server takes it")
            models[name] = model
        return models

    # ---------------------------------------------------------------- tests

    def tests(self, root: _Source) -> list[_At]:
        """Every test with its file and line, file references expanded, in order."""
        raw = root.value.get("tests")
        items = raw if isinstance(raw, list) else ([] if raw is None else [raw])
        source = _Source(items, root.file) if isinstance(raw, list) else root
        out: list[_At] = []
        for index, item in enumerate(items):
            key = index if isinstance(raw, list) else "tests"
            ref = _file_ref(item)
            if ref is not None:
                out.extend(self._test_file(self.folder / ref, source, key))
            elif isinstance(item, Mapping):
                out.append(_At(item, source.file, source.line(key)))
            else:
                self.note(source, key, "test not imported: a test is a mapping or a file:// reference")
        return out

    def _test_file(self, path: Path, source: _Source, key: Any) -> list[_At]:
        if "*" in str(path) or path.suffix not in (".csv", ".json", ".jsonl", ".yaml", ".yml"):
            self.note(source, key, f"tests file {path.name} not imported: CSV, JSON, JSON Lines and YAML files are "
                                   "read (no globs, no scripts); list the files one by one")
            return []
        if not path.exists():
            raise ConfigError(f"{source.file}:{source.line(key)}: no such tests file: {path}")
        if path.suffix == ".csv":
            return self._csv(path)
        if path.suffix in (".yaml", ".yml"):
            data = _load_yaml(path)
        else:
            try:
                text = path.read_text(encoding="utf-8")
                data = ([json.loads(line) for line in text.splitlines() if line.strip()] if path.suffix == ".jsonl"
                        else json.loads(text))
            except (OSError, ValueError) as exc:
                raise ConfigError(f"{path}: cannot read the tests: {exc}") from None
        rows = data if isinstance(data, list) else [data]
        inner = _Source(rows, path)
        out = []
        for index, row in enumerate(rows):
            if isinstance(row, Mapping):
                out.append(_At(row, path, inner.line(index)))
            else:
                self.note(inner, index, "test not imported: not a mapping")
        return out

    def _csv(self, path: Path) -> list[_At]:
        """promptfoo's CSV tests: columns are vars; `__expected*`, `__description`, `__threshold` are special."""
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from None
        reader = csv.DictReader(io.StringIO(text))
        out = []
        start = 2
        for row in reader:
            test: dict[str, Any] = {"vars": {}, "assert": []}
            metric = None
            for column, cell in row.items():
                column, cell = (column or "").strip(), cell or ""
                if column.startswith("__expected"):
                    if cell.strip():
                        test["assert"].append(_assert_from_text(cell.strip()))
                elif column == "__description":
                    test["description"] = cell
                elif column == "__threshold" and cell.strip():
                    try:
                        test["threshold"] = float(cell)
                    except ValueError:
                        self.notes.append(Note(path, start, f"__threshold {cell!r} is not a number; ignored"))
                elif column == "__metric":
                    metric = cell or None
                elif column.startswith("__"):
                    self.notes.append(Note(path, start, f"column {column} not imported; nothing here reads it"))
                else:
                    test["vars"][column] = cell
            if metric:
                for assertion in test["assert"]:
                    assertion["metric"] = metric
            out.append(_At(test, path, start))
            start = reader.line_num + 1
        return out


def _assert_from_text(text: str) -> dict[str, Any]:
    """promptfoo's `__expected` cell: `type:value`, `not-type:value`, `type(threshold):value`, else equals."""
    for prefix, kind in (("javascript:", "javascript"), ("fn:", "javascript"), ("eval:", "javascript"),
                         ("python:", "python"), ("grade:", "llm-rubric"), ("llm-rubric:", "llm-rubric")):
        if text.startswith(prefix):
            return {"type": kind, "value": text[len(prefix):].strip()}
    match = re.match(r"^(not-)?([a-z][a-z-]*)(?:\((\d+(?:\.\d+)?)\))?(?::([\s\S]*))?$", text)
    known = ("contains", "icontains", "contains-any", "contains-all", "icontains-any", "icontains-all", "equals",
             "starts-with", "regex", "is-json", "contains-json", "similar", "levenshtein", "latency", "cost",
             "model-graded-closedqa", "llm-rubric")
    if match and match.group(2) in known:
        assertion: dict[str, Any] = {"type": (match.group(1) or "") + match.group(2)}
        if match.group(4) is not None:
            assertion["value"] = match.group(4).strip()
        if match.group(3) is not None:
            assertion["threshold"] = float(match.group(3))
        elif match.group(2) == "similar":
            assertion["threshold"] = 0.8
        return assertion
    return {"type": "equals", "value": text}


def _described(assertion: Mapping[str, Any]) -> str:
    """An assert in a line: `javascript: output.length < 100`."""
    value = assertion.get("value")
    text = " ".join(str(value).split()) if value is not None else ""
    if len(text) > 120:
        text = text[:117] + "..."
    return f"{assertion.get('type') or '(no type)'}" + (f": {text}" if text else "")


def _expand(variables: Mapping[str, Any]) -> list[dict[str, Any]]:
    """promptfoo's var expansion: a var holding a list makes one test per value (every combination)."""
    keys = list(variables)
    choices = [v if isinstance(v, list) else [v] for v in variables.values()]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*choices)]


def import_promptfoo(config: Path, out: Path) -> Imported:
    """Write `out/<name>.yaml` (one suite per prompt) and `out/models.yaml` from a promptfoo config.

    Args:
        config: promptfoo's YAML config (`promptfooconfig.yaml`).
        out: The folder to write to (created if needed).

    Returns:
        The files written, the number of tests, and a note for everything not imported.

    Raises:
        ConfigError: The config or a file it references cannot be read.
    """
    from ruamel.yaml import YAML

    config = Path(config)
    data = _load_yaml(config)
    if not isinstance(data, Mapping):
        raise ConfigError(f"{config}: a promptfoo config is a mapping with `prompts:`, `providers:` and `tests:`")
    importer = _Importer(config)
    root = _Source(data, config)
    result = Imported()
    for key in data:
        if key in ("scenarios", "extensions", "nunjucksFilters", "derivedMetrics", "redteam"):
            importer.note(root, key, f"`{key}` not imported: nothing here matches it")
    prompts = importer.prompts(root)
    models = importer.providers(root)
    default: Mapping[str, Any] = data.get("defaultTest") or {}
    if not isinstance(default, Mapping):
        importer.note(root, "defaultTest", "a defaultTest file is not read; write it inline")
        default = {}
    default_options = _plain(default.get("options") or {})
    grading = default_options.pop("provider", None)
    judge = _slug(str(grading), _MODEL_NAME) if isinstance(grading, str) else None
    if grading is not None and judge not in models:
        importer.note(root, "defaultTest", "defaultTest.options.provider (the grader) is not one of the imported "
                                           "providers; name the judge in models.yaml (`defaults: {judge: NAME}`)")
        judge = None
    for option in default_options:
        importer.note(root, "defaultTest", f"defaultTest option `{option}` not imported: the answer is scored as "
                                           "the model gave it; fold it into the prompt or the asserts")
    default_asserts = [a for a in _plain(default.get("assert") or []) if isinstance(a, Mapping)]
    base = _slug(str(data.get("description") or config.stem), _TEST_ID)[:40].strip("-.") or "promptfoo"

    tests: list[dict[str, Any]] = []
    used: set[str] = set()
    for number, at in enumerate(importer.tests(root), start=1):
        test = at.test
        for option in _plain(test.get("options") or {}):
            importer.notes.append(Note(at.file, at.line, f"test option `{option}` not imported: the answer is "
                                       "scored as the model gave it; fold it into the prompt or the asserts"))
        for name in ("provider", "providers", "providerOutput"):
            if name in test:
                importer.notes.append(Note(at.file, at.line, f"a test's `{name}` is not imported; every model in "
                                           "models.yaml answers every test"))
        variables = {**_plain(default.get("vars") or {}), **_plain(test.get("vars") or {})}
        for name, value in list(variables.items()):
            ref = _file_ref(value)
            if ref is not None:
                try:
                    variables[name] = (importer.folder / ref).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise ConfigError(f"{at.file}:{at.line}: cannot read var {name} from {ref}: {exc}") from None
        own = test.get("assert") or []
        placed = [(a, at.line) for a in default_asserts] + [
            (a, _Source(own, at.file).line(i) or at.line) for i, a in enumerate(own) if isinstance(a, Mapping)]
        threshold = test.get("threshold", default.get("threshold"))
        description = test.get("description")
        stem = _slug(str(description), _TEST_ID) if description else ""
        expanded = _expand(variables)
        for variant, row in enumerate(expanded, start=1):
            wanted = (stem or f"test-{number}") + (f"-{variant}" if len(expanded) > 1 else "")
            test_id, n = wanted, 2
            while test_id in used:
                test_id, n = f"{wanted}-{n}", n + 1
            used.add(test_id)
            evals: list[dict[str, Any]] = []
            for assertion, line in placed:
                spec, why = map_assert(_plain(assertion), row, judge)
                if spec is None:
                    if variant == 1:
                        importer.notes.append(Note(at.file, line, f"test {test_id}: {why}"))
                    # The test keeps a placeholder: an error verdict until replaced, never a pass on what is left.
                    evals.append({"not_carried": _literal(f"{_described(assertion)} (promptfoo assert at "
                                                          f"{at.file.name}:{line})")})
                    continue
                if variant == 1 and (("judge" in spec and not judge) or "similar" in spec):
                    what = ("judge: `defaults: {judge: NAME}`" if "judge" in spec
                            else "embedding model: `defaults: {embedding: NAME}`")
                    importer.notes.append(Note(at.file, line, f"test {test_id}: name the {what} in models.yaml"))
                evals.append(spec)
            entry: dict[str, Any] = {"id": test_id}
            if description:
                entry["description"] = str(description)
            entry["_vars"] = row
            # No assert at all: promptfoo shows the answer for a person to read; here it is recorded unscored.
            entry["eval"] = {"none": True} if not evals else evals[0] if len(evals) == 1 else {"all": evals}
            if threshold is not None:
                entry["threshold"] = float(threshold)
            tests.append(entry)

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    yaml = YAML(typ="rt")
    yaml.width = 4096
    yaml.allow_unicode = True
    for number, (label, prompt) in enumerate(prompts, start=1):
        name = base if len(prompts) == 1 else f"{base}-{_slug(label, _TEST_ID) or number}"
        suite_tests = []
        for entry in tests:
            row = entry["_vars"]
            body = {k: v for k, v in entry.items() if k != "_vars"}
            if isinstance(prompt, list):
                rendered = [{"role": str(m.get("role")), "content": _literal(str(_render(m.get("content", ""), row)))}
                            for m in prompt]
                body = {"id": body.pop("id"), **({"description": body.pop("description")} if "description" in body
                                                 else {}), "messages": rendered, **body}
            else:
                body = {"id": body.pop("id"), **({"description": body.pop("description")} if "description" in body
                                                 else {}), "prompt": _literal(str(_render(prompt, row))), **body}
            suite_tests.append(body)
        suite = {"suite": name, "description": f"Imported from {config.name} by `engine import promptfoo`"
                 + (f" (prompt {label})" if len(prompts) > 1 else "") + ".", "tests": suite_tests}
        path = out / f"{name}.yaml"
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(f"# Imported from {config.name} by `engine import promptfoo`; check it with "
                         "`engine validate`.\n")
            yaml.dump(suite, handle)
        result.suites.append(path)
    if models:
        result.models = out / "models.yaml"
        with open(result.models, "w", encoding="utf-8") as handle:
            handle.write(f"# Imported from {config.name} by `engine import promptfoo`. Keys are read from the "
                         "environment variable each api_key_env names, never written here.\n")
            yaml.dump({"models": models}, handle)
    result.tests = len(tests)
    result.notes = importer.notes
    return result
