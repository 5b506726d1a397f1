"""The one Jinja2 environment, for suites and harness files alike: sandboxed, StrictUndefined, on a size and time
budget.

Suite strings are templates (`What is {{ a }} + {{ b }}?`). A string that is exactly one expression
(`"{{ golden }}"`) renders to the expression's native value, so `equals: "{{ golden }}"` compares
against the number 5, not the text "5", and `json_field: {equals: "{{ golden.age }}"}` gets an int.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, UndefinedError

from engine.base.template_budget import BudgetedEnvironment, budget, render_bounded

__all__ = [
    "ENV",
    "TemplateSyntaxError",
    "UndefinedError",
    "is_template",
    "render",
    "render_value",
    "undeclared_variables",
]

# Sandboxed, and refusing huge powers, repetitions, paddings, loops and outputs (engine/base/template_budget.py).
ENV = BudgetedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
# Filters that turn YAML values into code, for harness files (docs/harnesses.md): `{{ x | py }}` is a Python
# literal (repr of str/int/float/bool/None/list/dict is valid Python), `{{ x | json }}` JSON text.
ENV.filters["py"] = repr
ENV.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False)

_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.DOTALL)


def is_template(text: str) -> bool:
    """True when the string contains Jinja syntax worth rendering."""
    return "{{" in text or "{%" in text


@lru_cache(maxsize=4096)
def _template(text: str) -> Any:
    return ENV.from_string(text)


@lru_cache(maxsize=4096)
def _expression(expr: str) -> Any:
    return ENV.compile_expression(expr, undefined_to_none=False)


# `{{ name }}` and nothing else Jinja would read: rendered by substitution, which gives the same text
# as Jinja (str() of the value; StrictUndefined's error when missing) without compiling a template.
# A 10,000-test table-driven suite has thousands of distinct prompts like "What is {{ a }} + {{ b }}?".
_SIMPLE_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_SIMPLE_NAMES = frozenset({"true", "false", "none", "True", "False", "None"}) | frozenset(ENV.globals)


@lru_cache(maxsize=16384)
def simple_names(text: str) -> tuple[str, ...] | None:
    """The variables of a template made only of `{{ name }}` placeholders, else None (use Jinja)."""
    rest = _SIMPLE_VAR.sub("", text)
    # "{{{" is Jinja's to read: `{{{a}}` is a syntax error there (and `{{{'k': 1}['k']}}` a dict), where the
    # substitution would have matched `{{a}}` and kept the brace.
    if "{{" in rest or "{%" in rest or "{#" in rest or "{{{" in text:
        return None
    names = tuple(dict.fromkeys(_SIMPLE_VAR.findall(text)))
    if any(name in _NOT_SIMPLE_NAMES for name in names):
        return None
    return names


@lru_cache(maxsize=16384)
def _simple_parts(text: str) -> tuple[str, ...] | None:
    """A `simple_names` template split once into text, name, text, name, ..., text; None when not simple."""
    if simple_names(text) is None:
        return None
    return tuple(_SIMPLE_VAR.split(text))


def _substitute(parts: tuple[str, ...], variables: Mapping[str, Any]) -> str:
    """The text with each name replaced by `str()` of its value, left to right (the first undefined one raises).

    The parts are split once per text (`_simple_parts`); tests/base/test_render_fast_paths.py compares it with Jinja.
    """
    out = [parts[0]]
    for i in range(1, len(parts), 2):
        name = parts[i]
        if name not in variables:
            raise UndefinedError(f"'{name}' is undefined")
        out.append(str(variables[name]))
        out.append(parts[i + 1])
    return "".join(out)


def render(text: str, variables: Mapping[str, Any]) -> str:
    """Render a template string to text. Raises UndefinedError / TemplateSyntaxError."""
    if not is_template(text):
        return text
    parts = _simple_parts(text)
    if parts is not None:
        return _substitute(parts, variables)
    return render_bounded(_template(text), variables)


# What YAML gives besides text, dicts and lists: returned as they are without the three isinstance checks
# (`Mapping` is an ABC, so `isinstance(5, Mapping)` is the slow one). Evaluator options are mostly these
# (tests/base/test_render_fast_paths.py proves the same results).
_PLAIN_SCALARS = frozenset({int, float, bool, type(None)})


def render_value(value: Any, variables: Mapping[str, Any]) -> Any:
    """Render every template string inside a YAML value (dicts and lists walked).

    A string that is exactly `{{ expr }}` becomes the expression's native value.
    """
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return value
    if kind is str and not ("{{" in value or "{%" in value):
        return value   # `is_template`, inline: most strings in a suite are plain text
    if kind is dict:
        return {k: render_value(v, variables) for k, v in value.items()}
    if kind is list:
        return [render_value(v, variables) for v in value]
    if isinstance(value, str):
        if not is_template(value):
            return value
        single = _SINGLE_EXPR.match(value)
        if single and "{{" not in single.group("expr"):
            name = single_name(value)
            if name is not None and name in variables:
                return variables[name]   # `{{ golden }}`: the value itself, as Jinja returns it, without a context
            expr = single.group("expr").strip()
            with budget():
                result = _expression(expr)(**variables)
            if isinstance(result, StrictUndefined):
                str(result)  # raises UndefinedError with Jinja's own message
            return result
        return render(value, variables)
    if isinstance(value, Mapping):
        return {k: render_value(v, variables) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [render_value(v, variables) for v in value]
    return value


@lru_cache(maxsize=4096)
def single_name(text: str) -> str | None:
    """The variable's name when `render_value(text, variables)` returns that variable's value itself (`text` is
    exactly `{{ name }}` and `name` is in the variables), else None."""
    single = _SINGLE_EXPR.match(text)
    if not single or "{{" in single.group("expr"):
        return None
    expr = single.group("expr").strip()
    return expr if _PLAIN_NAME.fullmatch(expr) and expr not in _NOT_SIMPLE_NAMES else None


def undeclared_variables(text: str) -> set[str]:
    """The top-level variable names a template uses (for 'case row is missing a variable' checks)."""
    from jinja2 import meta

    return set(meta.find_undeclared_variables(ENV.parse(text)))
