"""Harness templates: load and validate `harnesses/*.yaml` (or a suite's own), render the files to run.

A harness names a language, the files to write (Jinja2 templates rendered in a sandboxed environment
with StrictUndefined), the command to run and how to score. See docs/harnesses.md. The file is read by the
one YAML loader (`engine.base.yaml`: libyaml, positions, the safety rules suites get) and checked by
`engine.harness.schema`, so its problems read as FILE:LINE:COL: error: ... like a suite's.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import TemplateError

from engine.base.render import ENV
from engine.base.yaml import FileKind, load_yaml_file
from engine.errors import Diagnostic, HarnessError, SuiteError
from engine.harness.schema import validate
from engine.paths import data_dir

__all__ = ["HARNESS_FILE", "TEMPLATE_ENV", "Harness", "builtin_dir", "builtin_names", "load_harness", "render_files"]

_BUILTIN_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


# Harness files render in the one Jinja2 environment (engine.base.render), which has the `py` and `json`
# filters that turn YAML values into code.
TEMPLATE_ENV = ENV

# How the YAML loader's messages name a harness file.
HARNESS_FILE = FileKind("harness", "a harness needs at least `language:`, `files:`, `run:` and `score:` "
                                   "(see docs/harnesses.md)",
                        "a harness holds a few templates; keep large data in the suite (`vars:` or `cases:`)")


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


def _parse(path: Path) -> Harness:
    shown = str(path)
    loaded = load_yaml_file(path, shown, kind=HARNESS_FILE)
    problems = loaded.diagnostics or validate(loaded.data, loaded.positions, shown)
    if problems:
        raise SuiteError(problems)
    data = loaded.data
    compiled: dict[str, Any] = {}
    for key, where in [*((f"files/{k}", ("files", k)) for k in data["files"]),
                       *((f"run/{i}", ("run", i)) for i in range(len(data["run"])))]:
        try:
            compiled[key] = TEMPLATE_ENV.from_string(data[where[0]][where[1]])
        except TemplateError as exc:
            line, col = loaded.positions.of(where, key=where[0] == "files")
            problems.append(Diagnostic(shown, line, col, f"template {key} does not compile: {str(exc).rstrip('.')}; "
                                                         "check that "
                                                         "every {{ ... }} and {% ... %} is closed"))
    if problems:
        raise SuiteError(sorted(problems, key=lambda d: (d.line, d.col)))
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
