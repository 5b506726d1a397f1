"""A promptfoo config as read: its prompts, its providers as models file entries, and the notes of the import.

`Config` reads the config file (through `engine.importers.promptfoo.files`), follows its local `$ref`s, and
gathers every `Note` the import makes, at its file and line. Its prompts are read as promptfoo's processPrompts
reads them (inline text, files, globs, a `.txt` file's `---` sections, a `.jsonl` file's lines), and its
OpenAI-compatible providers become models file entries (a literal `apiKey` never copied). Its tests are read
by `engine.importers.promptfoo.testcases`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.importers.promptfoo.files import SCRIPTS, Files, Where, file_ref
from engine.importers.promptfoo.js import js_json, js_string
from engine.importers.promptfoo.mcp import mcp_servers

__all__ = ["MODEL_NAME", "Config", "Note", "Prompt", "one_line", "slug"]

#: What a models file name may hold (other characters become `-`).
MODEL_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_PARAMS = ("temperature", "max_tokens", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty")
_PROMPT_TEXT = (".txt", ".md", ".j2", ".json", ".jsonl", ".yaml", ".yml")
# Top-level keys that change no question and no verdict (promptfoo's output, sharing and UI settings).
_QUIET = frozenset({"description", "prompts", "providers", "targets", "tests", "defaultTest", "scenarios", "env",
                    "outputPath", "sharing", "commandLineOptions", "evaluateOptions", "writeLatestResults",
                    "metadata", "tags", "tracing", "$schema", "nunjucksFilters", "extensions", "derivedMetrics",
                    "redteam", "assertionTemplates"})
_MAX_REFS = 10_000   # `$ref`s followed in one config: honest configs use a handful
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


@dataclass(frozen=True)
class Prompt:
    """One prompt: its label (the suite's name), its raw template, where it was written."""

    label: str
    raw: str
    where: Where


def slug(text: str, pattern: re.Pattern[str]) -> str:
    """Text as a name: lower case, each run of what `pattern` matches one `-`, no `-` or `.` at either end."""
    return pattern.sub("-", text.strip().lower()).strip("-.")


def _looks_like_path(text: str) -> bool:
    """promptfoo's maybeFilePath: a one-line text that names a file (by a known extension, `*`, or `/`)."""
    if "\n" in text or ("://" in text and not text.startswith("file://")):
        return False
    return (text.startswith("file://") or text.endswith((*_PROMPT_TEXT, *SCRIPTS, ".csv"))
            or "*" in text or "/" in text or "\\" in text)


class Config:
    """One promptfoo config, read: its file and folder, its data with local `$ref`s followed, and the notes
    the import gathers.

    Args:
        path: promptfoo's YAML config.
        allow_outside: Read files the config names outside its own folder.
    """

    def __init__(self, path: Path, allow_outside: bool) -> None:
        self.path = path
        self.folder = path.parent
        self.files = Files(self.folder, allow_outside)
        self.root = self.files.yaml(path, Where(path))
        if not isinstance(self.root.data, Mapping):
            raise ConfigError(f"{path}: a promptfoo config is a mapping with `prompts:`, `providers:` and "
                              "`tests:`")
        self.data: Mapping[str, Any] = _dereferenced(self.root.data, self.root.data, path)
        self.notes: list[Note] = []
        self._noted: set[tuple[Path, int | None, str]] = set()
        self.mcp_models: list[str] = []   # the imported models whose provider carries MCP servers

    def note(self, where: Where, message: str) -> None:
        message = one_line(message)
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

    def note_unread_keys(self) -> None:
        """A note for every top-level key nothing here reads."""
        for key in self.data:
            if key not in _QUIET:
                self.note(self.root.at(key, key=True), f"`{key}` not imported: nothing here matches it")
        for key, why in (("nunjucksFilters", "custom filters are JavaScript; a prompt that uses one is left out"),
                         ("extensions", "extension hooks run code"), ("derivedMetrics", "no derived metrics here"),
                         ("redteam", "red-team generation is not part of an import")):
            if key in self.data:
                self.note(self.root.at(key, key=True), f"`{key}` not imported: {why}")

    # ---------------------------------------------------------------- prompts

    def prompts(self) -> list[Prompt]:
        raw = self.data.get("prompts")
        if raw is None or raw == [] or raw == "":
            raise ConfigError(f"{self.path}: no `prompts:`; a promptfoo config lists its prompts there")
        if isinstance(raw, Mapping):   # {file_or_text: label}
            items: list[tuple[Any, Where]] = [({"raw": k, "label": v}, self.root.at("prompts", k))
                                              for k, v in raw.items()]
        else:
            listed = raw if isinstance(raw, list) else [raw]
            items = [(item, self.root.at("prompts", i) if isinstance(raw, list) else self.root.at("prompts"))
                     for i, item in enumerate(listed)]
        out: list[Prompt] = []
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
        out = [p if p.label else Prompt(f"prompt-{n}", p.raw, p.where) for n, p in enumerate(out, start=1)]
        if not out:
            raise ConfigError(f"{self.path}: no prompt could be imported (the reasons are above)")
        return out

    def _prompt(self, text: str, label: str | None, where: Where) -> list[Prompt]:
        if text.startswith("exec:") or not _looks_like_path(text):
            return [Prompt(label or "", text, where)]
        ref = file_ref(text) or text
        if any(c in ref for c in "*?["):
            paths = self.files.glob(ref, self.folder, where)
            if not paths:
                return [Prompt(label or "", text, where)]   # promptfoo sends the text itself then
            return [p for path in paths for p in self._prompt_file(path, ref, label, where)]
        if re.search(r"\.\w+:\w+$", ref):
            self.note(where, f"prompt {text} not imported: a prompt made by a function runs code; write the "
                             "prompt it returns into the config")
            return []
        if not text.startswith("file://") and not self.files.is_file(self.folder / ref):
            return [Prompt(label or "", text, where)]   # text that only looks like a path
        return self._prompt_file(self.files.path(ref, self.folder, where), ref, label, where)

    def _prompt_file(self, path: Path, ref: str, label: str | None, where: Where) -> list[Prompt]:
        suffix = path.suffix.lower()
        name = label or path.stem
        if suffix not in _PROMPT_TEXT:
            self.note(where, f"prompt {ref} not imported: only text, Markdown, Jinja, JSON, JSON Lines and YAML "
                             "prompt files are read (a script's prompt runs code); write the prompt it makes")
            return []
        text = self.files.read_text(path, where)
        if suffix in (".yaml", ".yml"):
            return [Prompt(name, js_json(self.files.yaml(path, where).data), where)]
        if suffix == ".jsonl":
            lines = [line for line in re.split(r"\r?\n", text) if line]
            return [Prompt(name if len(lines) == 1 else f"{name}-{n}", line, where)
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
            return [Prompt(name if len(parts) == 1 else f"{name}-{n}", part, where)
                    for n, part in enumerate(parts, start=1)]
        return [Prompt(name, text, where)]
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
        name = slug(str(entry.get("label") or ident), MODEL_NAME) or "model"
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
        if "mcp" in config:   # its MCP servers: the model's `mcp:` (the suites' tests then run as conversations)
            servers = mcp_servers(config["mcp"], name, lambda message: self.note(where, message))
            if servers:
                model["mcp"] = servers
                self.mcp_models.append(name)
                self.note(where, f"provider {name}: its MCP servers are offered in conversations, so every imported "
                                 "test runs as one (`defaults: {agent: {max_turns: 8}}`) until the model answers")
        left = sorted(str(k) for k in config if k not in (*_PARAMS, "apiBaseUrl", "apiHost", "apiKey",
                                                           "apiKeyEnvar", "mcp"))
        if left:
            self.note(where, f"provider {name}: config {', '.join(left)} not imported; set the equivalent under "
                             "`params:` in models.yaml if the server takes it")
        for key in ("prompts", "transform", "delay"):
            if key in entry:
                self.note(where, f"provider {name}: `{key}` not imported; every model answers every prompt as asked")
        models[name] = model


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


def one_line(text: str) -> str:
    """Text for a comment or a warning line: line breaks and other unprintable characters escaped (\\n)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
