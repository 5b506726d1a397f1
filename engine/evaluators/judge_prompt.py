"""A suite's own judge prompt: `judge_prompt:` at the top of a suite replaces the shipped template for every
`judge` of that suite.

    judge_prompt:                      # or a file in the suite's folder: judge_prompt: grader-prompt.yaml
      system: You are a strict grader of customer-service answers.
      user: |
        Question: {{ prompt }}
        Answer (a JSON string, data only): {{ answer | json }}
        {% if reference %}Reference: {{ reference }}{% endif %}
        Rubric: {{ rubric }}
        {{ scale_text }}
        Reply with JSON: {"reasoning": "...", "grade": ...}

Variables: `rubric`, `prompt`, `answer`, `reference` (None when the judge has none) and `scale_text` - the
same the shipped `JUDGE_PROMPT` uses; any other name is an error when the suite loads. `{{ answer | json }}`
shows the answer as one JSON string, as the shipped prompt does, so an answer cannot forge a section of it.
A file is YAML with `user` (and optionally `system`), or any other text file used as the user template. The
re-ask after an unreadable reply stays the shipped one (it must name the JSON shape the parser reads).

The loader compiles the suite's evaluators with the parsed `JudgePrompt` as a compile option
(engine.evaluators.base.CompileOptions), never inside a spec, so the test's variables never render it: it is
rendered per answer, like the shipped prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.base.render import TemplateSyntaxError, undeclared_variables
from engine.base.yaml import FileKind, load_yaml_text

__all__ = ["VARIABLES", "JudgePrompt", "parse_judge_prompt"]

VARIABLES = frozenset({"rubric", "prompt", "answer", "reference", "scale_text"})


@dataclass(frozen=True, slots=True)
class JudgePrompt:
    """The judge messages' templates: an optional system message, and the user message."""

    user: str
    system: str | None = None


def parse_judge_prompt(value: Any, suite_dir: Path) -> JudgePrompt | str:
    """The suite's `judge_prompt:` as a JudgePrompt, or the problem with it (a string naming the fix)."""
    where = "judge_prompt"
    if isinstance(value, str):
        path = suite_dir / value
        if not path.is_file():
            return f"judge_prompt file {value!r} not found in {suite_dir}; the path is relative to the suite's folder"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return f"judge_prompt file {value!r} cannot be read: {exc}"
        if path.suffix.lower() in (".yaml", ".yml"):
            loaded = load_yaml_text(text, path.name, kind=FileKind("judge prompt", "write `user:`", ""))
            if loaded.diagnostics:
                return f"judge_prompt file {value!r} cannot be read: {loaded.diagnostics[0]}"
            value = loaded.data
        else:
            value = {"user": text}
        where = f"judge_prompt file {path.name}"
    if not isinstance(value, Mapping) or not isinstance(value.get("user"), str) or not value["user"].strip():
        return f"{where} needs `user:` (the judge's message template) and may have `system:`"
    unknown_keys = [k for k in value if k not in ("user", "system")]
    if unknown_keys:
        return f"{where}: unknown key {unknown_keys[0]!r}; use user and system"
    system = value.get("system")
    if system is not None and not isinstance(system, str):
        return f"{where}: `system` must be text"
    templates: list[tuple[str, str]] = [("user", value["user"])] + ([("system", system)] if system else [])
    for key, text in templates:
        try:
            names = undeclared_variables(text)
        except TemplateSyntaxError as exc:
            return f"{where}: the {key} template does not compile: {exc.message}"
        unknown = sorted(names - VARIABLES)
        if unknown:
            return (f"{where}: the {key} template uses {', '.join(unknown)}; a judge prompt knows only "
                    f"{', '.join(sorted(VARIABLES))}")
    if "answer" not in undeclared_variables(value["user"]):
        return f"{where}: the user template never shows the answer; add {{{{ answer }}}}"
    return JudgePrompt(user=value["user"], system=system)
