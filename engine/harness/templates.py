"""Harness templates: load and validate `harnesses/*.yaml` (or a suite's own), render the files to run.

A harness names a language, the files to write (Jinja2 templates rendered in a sandboxed environment
with StrictUndefined), the command to run and how to score. See docs/harnesses.md.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jsonschema import Draft202012Validator

from engine.base.render import ENV
from engine.errors import Diagnostic, HarnessError, SuiteError
from engine.paths import data_dir

__all__ = ["TEMPLATE_ENV", "Harness", "builtin_dir", "builtin_names", "load_harness", "render_files"]

_BUILTIN_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


# Harness files render in the one Jinja2 environment (engine.base.render), which has the `py` and `json`
# filters that turn YAML values into code.
TEMPLATE_ENV = ENV


@dataclass(frozen=True)
class Harness:
    """A loaded, validated harness template.

    Args:
        name: The harness name.
        file: The YAML file it came from.
        language: The fence tag code is extracted from.
        files: Relative path -> template text.
        run: The command (program name first), each item a template.
        score: "exit_code" or "cases".
        timeout_s: Default wall-clock limit, or None for the sandbox default.
        memory_mb: Default address-space limit, or None for the sandbox default.
        description: What it is for.
    """

    name: str
    file: str
    language: str
    files: Mapping[str, str]
    run: tuple[str, ...]
    score: str
    timeout_s: float | None = None
    memory_mb: int | None = None
    description: str = ""
    _compiled: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


def builtin_dir() -> Path:
    """The folder of built-in harnesses: `harnesses/` next to `engine/`, or the installed data copy."""
    folder = data_dir("harnesses")
    if not folder.is_dir():
        raise HarnessError(f"the built-in harness folder was not found ({folder}); reinstall the engine")
    return folder


def builtin_names() -> list[str]:
    """Names of the built-in harnesses."""
    return sorted(p.stem for p in builtin_dir().glob("*.yaml"))


@cache
def _validator() -> Draft202012Validator:
    """The compiled validator of schemas/harness.schema.json (the harness layer reads it itself: the suite
    layer sits above this one)."""
    try:
        schema = json.loads((data_dir("schemas") / "harness.schema.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HarnessError("schemas/harness.schema.json was not found; reinstall the engine") from None
    return Draft202012Validator(schema)


def resolve(name: str, suite_dir: str | Path) -> Path:
    """The file a `harness:` value names.

    Args:
        name: A built-in name (`python-function`) or a path starting with `./` inside the suite's folder.
        suite_dir: The folder of the suite file.

    Raises:
        HarnessError: Unknown name, or a path outside the suite's folder.
    """
    if name.startswith(("./", "../", "/")) or name.endswith((".yaml", ".yml")):
        base = Path(suite_dir).resolve()
        target = (base / name).resolve()
        if not target.is_relative_to(base):
            raise HarnessError(f"the harness file {name!r} is outside this suite's folder; harness files must sit "
                               "in the suite's folder or below it")
        if not target.is_file():
            raise HarnessError(f"the harness file {name!r} does not exist next to this suite")
        return target
    if not _BUILTIN_NAME.match(name):
        raise HarnessError(f"harness {name!r} is not a built-in name; use one of {', '.join(builtin_names())} "
                           "or a file next to the suite as ./name.yaml")
    target = builtin_dir() / f"{name}.yaml"
    if not target.is_file():
        raise HarnessError(f"unknown harness {name!r}; built-in harnesses: {', '.join(builtin_names())}, "
                           "or a file next to the suite as ./name.yaml")
    return target


def _line_of(node: Any, path: list[Any]) -> tuple[int, int]:
    """1-based line and column of a path in a ruamel round-trip tree, best effort."""
    line, col = 0, 0
    for key in path:
        try:
            if isinstance(key, int):
                line, col = node.lc.item(key)
            else:
                line, col = node.lc.key(key)
            line, col = line + 1, col + 1
            node = node[key]
        except (AttributeError, KeyError, IndexError, TypeError):
            break
    return line, col


def _parse(path: Path) -> Harness:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    shown = str(path)
    try:
        tree = YAML(typ="rt").load(path.read_text(encoding="utf-8"))
    except (OSError, YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        raise SuiteError([Diagnostic(shown, mark.line + 1 if mark else 0, mark.column + 1 if mark else 0,
                                     f"cannot read the harness: {str(exc).splitlines()[0]}")]) from None
    data = json.loads(json.dumps(tree))  # plain dicts for jsonschema
    problems: list[Diagnostic] = []
    for err in sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        where = "/".join(str(p) for p in err.absolute_path) or "the top level"
        path_to = list(err.absolute_path)
        message = err.message
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            if extra:
                path_to.append(extra[0])
                message = f"unknown key {extra[0]!r}; allowed: {', '.join(err.schema.get('properties', {}))}"
        line, col = _line_of(tree, path_to)
        problems.append(Diagnostic(shown, line, col, f"at {where}: {message} (see schemas/harness.schema.json)"))
    if problems:
        raise SuiteError(problems)
    compiled: dict[str, Any] = {}
    for key, text in [*(("files/" + k, v) for k, v in data["files"].items()),
                      *((f"run/{i}", v) for i, v in enumerate(data["run"]))]:
        try:
            compiled[key] = TEMPLATE_ENV.from_string(text)
        except TemplateError as exc:
            section, _, item = key.partition("/")
            line, col = _line_of(tree, [section, int(item) if section == "run" else item])
            problems.append(Diagnostic(shown, line, col, f"template {key} does not compile: {exc}"))
    if problems:
        raise SuiteError(problems)
    return Harness(name=data.get("name", path.stem), file=shown, language=data["language"],
                   files=dict(data["files"]), run=tuple(data["run"]), score=data["score"],
                   timeout_s=data.get("timeout_s"), memory_mb=data.get("memory_mb"),
                   description=data.get("description", ""), _compiled=compiled)


_cache_lock = threading.Lock()
_cache: dict[Path, tuple[float, Harness]] = {}


def load_harness(name: str, suite_dir: str | Path = ".") -> Harness:
    """Load and validate a harness by name (cached per file and modification time).

    Args:
        name: A built-in name or `./file.yaml` inside `suite_dir`.
        suite_dir: The folder of the suite using it.

    Raises:
        HarnessError: The name does not resolve.
        SuiteError: The file is not a valid harness (diagnostics with file:line:col).
    """
    path = resolve(name, suite_dir)
    mtime = path.stat().st_mtime
    with _cache_lock:
        hit = _cache.get(path)
        if hit and hit[0] == mtime:
            return hit[1]
    harness = _parse(path)
    with _cache_lock:
        _cache[path] = (mtime, harness)
    return harness


def render_files(harness: Harness, variables: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """Render the harness files and command with `variables`.

    Returns:
        (files, argv).

    Raises:
        HarnessError: A template used a variable that was not given, or failed to render.
    """
    rendered: dict[str, str] = {}
    argv: list[str] = []
    for key, template in harness._compiled.items():
        try:
            text = template.render(**variables)
        except TemplateError as exc:
            raise HarnessError(f"{harness.file}: template {key} failed: {exc}; "
                               "give the missing value under `exec: {vars: ...}`") from None
        if key.startswith("files/"):
            rendered[key[len("files/"):]] = text
        else:
            argv.append(text)
    return rendered, argv
