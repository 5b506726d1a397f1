"""promptfoo's python asserts as the engine's `python` scorers (engine.evaluators.python_scorer).

`Scorers` writes modules beside the suites holding the assert's code (its file's source, or the inline
expression as promptfoo's own wrapper makes it a function) and an adapter that calls it as promptfoo does,
`get_assert(output, context)`, and reads its result as promptfoo's normalizeScriptResult does
(src/assertions/scriptResultNormalization.ts).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from engine.importers.promptfoo.files import Files, Where
from engine.importers.promptfoo.js import NotCarried, js_number
from engine.importers.promptfoo.render import render_template

__all__ = ["Scorers"]

# The adapter every scorer module ends with: promptfoo's context dict and its reading of a script's result.
_ADAPTER = '''

# ---- written by `engine import promptfoo`: each function below runs one promptfoo python assert as the engine's
# python scorer calls it, with promptfoo's arguments (the output, a context dict) and its reading of the result.
import asyncio as _promptfoo_asyncio
import inspect as _promptfoo_inspect
import json as _promptfoo_json


def _promptfoo_context(answer, transcript, case, config, description):
    messages = transcript["messages"][:-1]
    if len(messages) == 1 and isinstance(messages[0].get("content"), str):
        prompt = messages[0]["content"]
    else:
        prompt = _promptfoo_json.dumps([{"role": m.get("role"), "content": m.get("content")} for m in messages],
                                       indent=2, ensure_ascii=False)
    context = {"prompt": prompt, "vars": dict(case), "test": {"vars": dict(case), "description": description},
               "logProbs": None, "provider": {"id": None}, "providerResponse": {"output": answer}}
    if config is not None:
        context["config"] = config
    return context


def _promptfoo_output(answer, steps):
    for step in steps:
        answer = answer.strip(_PROMPTFOO_SPACE) if step == "trim" else answer.lower() if step == "lower" \\
            else answer.upper()
    return answer


_PROMPTFOO_SPACE = ("\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000\\u2001\\u2002\\u2003\\u2004\\u2005\\u2006\\u2007"
                    "\\u2008\\u2009\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff")


def _promptfoo_verdict(result, threshold, inverse):
    """promptfoo's normalizeScriptResult: bool, "true"/"false", a JSON object text, {pass, score, reason}, or a
    number (a pass above 0, or at the threshold); `not-python` inverts the pass."""
    if _promptfoo_inspect.iscoroutine(result):
        result = _promptfoo_asyncio.run(result)
    if isinstance(result, str) and result.lower() in ("true", "false"):
        result = result.lower() == "true"
    elif isinstance(result, str) and result.startswith("{"):
        result = _promptfoo_json.loads(result)
    if isinstance(result, bool):
        passed = result != inverse
        return {"score": 1.0 if passed else 0.0, "passed": passed,
                "reason": "Assertion passed" if passed else f"Python code returned {str(result).lower()}"}
    if isinstance(result, dict):
        graded = dict(result)
        if "pass_" in graded and "pass" not in graded:
            graded["pass"] = graded["pass_"]
        if not (isinstance(graded.get("pass"), bool) and isinstance(graded.get("score"), (int, float))
                and not isinstance(graded.get("score"), bool) and isinstance(graded.get("reason"), str)):
            raise ValueError("Python assertion must return a boolean, number, or {pass, score, reason} object. "
                             f"Got instead: {result!r}"[:500])
        raw_pass, score, reason = graded["pass"], float(graded["score"]), graded["reason"]
        if threshold is not None and score < threshold:
            raw_pass = False
            reason = f"Python score {score:g} is less than threshold {threshold:g}: {reason}"
        passed = raw_pass != inverse
        if passed != raw_pass:
            reason = "Assertion passed" if passed else f"Python code returned {str(raw_pass).lower()}"
        return _promptfoo_scored(score, passed, reason)
    score = float(str(result)) if not isinstance(result, (int, float)) else float(result)
    raw_pass = score > 0 if threshold is None else score >= threshold
    passed = raw_pass != inverse
    return _promptfoo_scored(score, passed, "Assertion passed" if passed
                             else f"Python code returned {str(raw_pass).lower()}")


def _promptfoo_scored(score, passed, reason):
    kept = min(1.0, max(0.0, score))
    if kept != score:
        reason += f" (promptfoo score {score:g}, kept in [0, 1])"
    return {"score": kept, "passed": passed, "reason": reason}
'''

_CALL = '''

def @@NAME@@(answer, transcript, golden, case):
    output = _promptfoo_output(answer, {steps!r})
    context = _promptfoo_context(answer, transcript, case, {config}, {description})
    return _promptfoo_verdict({function}(output, context), {threshold!r}, {inverse!r})
'''


def _functions(source: str, name: str) -> list[str]:
    """The functions a module's source defines at its top level; NotCarried when it does not compile."""
    try:
        tree = ast.parse(source, filename=name)
    except (SyntaxError, ValueError, RecursionError) as exc:
        raise NotCarried(f"its python does not compile ({name}: {exc})") from None
    return [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


@dataclass
class _Module:
    """One scorer module being written: its source and the functions added to it."""

    source: str
    calls: dict[str, str] = field(default_factory=dict)   # the call's text -> its function's name


class Scorers:
    """The python scorer modules an import writes beside its suites: one per promptfoo python file, and one
    for the inline python asserts (`promptfoo_inline.py`)."""

    def __init__(self, files: Files, base: Path) -> None:
        self.files = files
        self.base = base
        self.modules: dict[str, _Module] = {}
        self._inline: dict[str, str] = {}   # inline code -> its function's name

    def python(self, assertion: Mapping[str, Any], variables: Mapping[str, Any], inverse: bool,
               steps: tuple[str, ...], where: Where) -> dict[str, Any]:
        """The `python` evaluator for a promptfoo python assert (its module written when `write` is called)."""
        value = assertion.get("value")
        if not isinstance(value, str) or not value.strip():
            raise NotCarried("a python assert needs its code or a file:// reference as its value")
        if value.startswith("file://"):
            module, target = self._file(value, where)
        else:
            module, target = self._inline_code(render_template(value, variables))
        threshold = assertion.get("threshold")
        config = assertion.get("config")
        call = _CALL.format(steps=steps, config=repr(config) if config is not None else "None", description="None",
                            function=target, threshold=None if threshold is None else js_number(threshold, "threshold"),
                            inverse=inverse)
        entry = self.modules[module]
        name = entry.calls.get(call)
        if name is None:
            name = f"promptfoo_assert_{len(entry.calls) + 1}"
            entry.calls[call] = name
            entry.source += call.replace("@@NAME@@", name)
        return {"python": {"file": module, "function": name}}

    def _file(self, value: str, where: Where) -> tuple[str, str]:
        """`file://x.py` or `file://x.py:fn`: the module holding x.py's source, and the function to call."""
        ref = value[len("file://"):]
        ref, _, function = ref.rpartition(":") if re.search(r"\.py:\w+$", ref) else (ref, "", "")
        function = function or "get_assert"
        if not ref.endswith(".py"):
            raise NotCarried(f"{value} is not a .py file")
        path = self.files.path(ref, self.base, where)
        source = self.files.read_text(path, where, 1024 * 1024).rstrip() + "\n"
        defined = _functions(source, str(path))
        if function not in defined:
            raise NotCarried(f"{ref} defines no function {function} (it defines: {', '.join(defined) or 'none'})")
        module = "promptfoo_" + re.sub(r"\W+", "_", PurePosixPath(ref).stem) + ".py"
        if module not in self.modules:
            self.modules[module] = _Module(source + _ADAPTER)
        elif not self.modules[module].source.startswith(source):
            raise NotCarried(f"two python files are named {PurePosixPath(ref).name}; rename one")
        return module, function

    def _inline_code(self, code: str) -> tuple[str, str]:
        """Inline code as promptfoo's buildPythonScript makes it a function: one line is `return <it>`, several
        are the function's body (indented as their first indented line is)."""
        module = "promptfoo_inline.py"
        code = code.rstrip()
        target = self._inline.get(code)
        if target is not None:
            return module, target
        if "\n" in code:
            indent = next((m.group(0) for m in re.finditer(r"^(?!\s*$)\s+", code, re.MULTILINE)), "    ")
            body = "\n".join(indent + line for line in code.split("\n"))
        else:
            body = f"    return {code}"
        target = f"_promptfoo_inline_{len(self._inline) + 1}"
        function = f"\n\ndef {target}(output, context):\n{body}\n"
        _functions("import json\n" + function, "the inline python assert")   # it compiles, or is not carried
        if module not in self.modules:
            self.modules[module] = _Module("import json\n" + _ADAPTER)
        self._inline[code] = target
        self.modules[module].source += function
        return module, target

    def write(self, folder: Path) -> list[Path]:
        """Write every module into `folder` (the suites' folder); the paths written."""
        written = []
        for name, module in self.modules.items():
            path = folder / name
            path.write_text(module.source, encoding="utf-8")
            written.append(path)
        return written
