"""promptfoo asserts as the engine's evaluators, each chosen so that its verdict is promptfoo's.

`map_assert` returns the evaluator for one assert, or why it is not carried (the importer then writes a
`not_carried` placeholder, so the test never passes on the checks that were left). The assert's value is
rendered as promptfoo renders it (a string or the strings of a list, with the test's vars; a `file://` value
read as JSON, YAML or trimmed text). A per-assert `transform:` (and a test's `options.transform`) is carried
where it is a chain of `output.trim()`, `.toLowerCase()`, `.toUpperCase()` on a text check the engine can say
the same way; any other transform leaves its assert not carried. `python` asserts become `python` scorers
(engine.importers.promptfoo.python).

A test's asserts make its eval as promptfoo decides a test (`combined_eval`), and every evaluator written must
pass the engine's own load-time checks (`engine_problem`), else it too is not carried.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.base.yaml import Positions, load_yaml_text
from engine.evaluators import compile_spec
from engine.evaluators.text import check_pattern
from engine.importers.promptfoo.files import CONFIG, Files, Where
from engine.importers.promptfoo.js import NotCarried, js_json, js_number, js_string, js_trim
from engine.importers.promptfoo.python import Scorers
from engine.importers.promptfoo.render import render_template
from engine.suite.checks import EvaluatorResolver, Report

__all__ = ["AssertSite", "combined_eval", "describe", "engine_problem", "kinds", "literal", "map_assert", "share",
           "string_transform"]

_MODEL_GRADED = ("llm-rubric", "model-graded-closedqa", "factuality", "model-graded-factuality")
_NOT_CARRIED_KINDS = {
    "javascript": "JavaScript does not run here; rewrite it as one of the engine's evaluators (docs/evaluators.md) "
                  "or a `python` scorer",
    "ruby": "Ruby does not run here; rewrite it as one of the engine's evaluators or a `python` scorer",
    "levenshtein": "no edit-distance evaluator here; use `equals`, `similar` with a threshold, or a `regex`",
    "webhook": "the engine calls no webhook; rewrite the check as an evaluator or a `python` scorer",
}
_TEXT_CHECKS = frozenset({"contains", "icontains", "contains-any", "icontains-any", "contains-all",
                          "icontains-all", "equals", "starts-with"})
_TRANSFORM = re.compile(r"\A\s*output((?:\s*\.\s*(?:trim|toLowerCase|toUpperCase|toLocaleLowerCase|"
                        r"toLocaleUpperCase)\s*\(\s*\))*)\s*;?\s*\Z")
_TRANSFORM_STEP = re.compile(r"(trim|toLowerCase|toUpperCase|toLocaleLowerCase|toLocaleUpperCase)")


def literal(text: str) -> str:
    """Text the engine's loader must not read as a template, kept verbatim inside raw blocks."""
    if "{{" not in text and "{%" not in text and "{#" not in text:
        return text
    # An `{% endraw %}` inside the text would close the block: it is written as an expression instead.
    inner = re.sub(r"\{%-?\s*endraw\s*-?%\}", lambda m: "{% endraw %}{{ " + json.dumps(m.group(0)) + " }}{% raw %}",
                   text)
    return "{% raw %}" + inner + "{% endraw %}"


def _literal_tree(value: Any) -> Any:
    """Every string inside a value kept verbatim (a JSON Schema or an object to compare is rendered by the
    engine's loader like any evaluator value)."""
    if isinstance(value, str):
        return literal(value)
    if isinstance(value, Mapping):
        return {str(k): _literal_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal_tree(v) for v in value]
    return value


def share(value: Any, what: str) -> float:
    """A threshold a score in [0, 1] is held to: below 0 every score meets it (0 says the same); above 1 none
    does, which no engine threshold says: NotCarried."""
    number = js_number(value, what)
    if number > 1:
        raise NotCarried(f"its {what} {number:g} is above 1, which no score meets")
    return max(0.0, number)


def string_transform(expression: Any) -> tuple[str, ...] | None:
    """A transform that is a chain of `trim()`, `toLowerCase()`, `toUpperCase()` on `output`, as its steps
    ("trim", "lower", "upper"); None for any other transform."""
    if not isinstance(expression, str):
        return None
    body = expression.strip()
    body = body[len("return "):] if body.startswith("return ") else body
    match = _TRANSFORM.match(body)
    if match is None:
        return None
    names = {"trim": "trim", "toLowerCase": "lower", "toLocaleLowerCase": "lower", "toUpperCase": "upper",
             "toLocaleUpperCase": "upper"}
    return tuple(names[step] for step in _TRANSFORM_STEP.findall(match.group(1)))


@dataclass
class AssertSite:
    """What mapping one assert needs besides the assert: where it is, the files, the judge, the scorers.

    Args:
        where: The assert's place (named in a placeholder and in notes).
        files: Reads `file://` values.
        base: The folder `file://` values are relative to (the config's).
        judge: The models file entry a model-graded assert should use, if the config names one.
        scorers: Collects the python scorer modules.
        transform: The test's own `options.transform` steps (applied before the assert's), or None when the
            test has a transform that is not carried.
    """

    where: Where
    files: Files
    base: Path
    judge: str | None
    scorers: Scorers
    transform: tuple[str, ...] | None = ()


def _file_value(ref: str, site: AssertSite) -> Any:
    """promptfoo's processFileReference: JSON and YAML parsed, text trimmed."""
    path = site.files.path(ref, site.base, site.where)
    suffix = path.suffix.lower()
    if suffix in (".json", ".yaml", ".yml"):
        return site.files.yaml(path, site.where).data
    if suffix == ".txt":
        return js_trim(site.files.read_text(path, site.where))
    raise NotCarried(f"its value is read from {ref}, a file promptfoo does not read for an assert value "
                     "(only .json, .yaml, .yml, .txt)")


def _rendered(value: Any, variables: Mapping[str, Any], site: AssertSite) -> Any:
    """The assert's value as promptfoo's runAssertion renders it."""
    if isinstance(value, str):
        if value.startswith("file://"):
            return _file_value(value[len("file://"):], site)
        return render_template(value, variables)
    if isinstance(value, list):
        return [(_file_value(v[len("file://"):], site) if v.startswith("file://") else render_template(v, variables))
                if isinstance(v, str) else v for v in value]
    return value


def _values(value: Any) -> list[str]:
    """A contains-any/all value: a list, or one comma-separated text (quotes group, as promptfoo reads it)."""
    if isinstance(value, list):
        return [js_string(v) for v in value]
    row = next(csv.reader([str(value)], skipinitialspace=True), [])
    return [cell.strip() for cell in row if cell.strip()]


def _js_regex(pattern: str) -> str:
    """A JavaScript pattern in Python's syntax: named groups and their back-references."""
    return re.sub(r"\\k<([A-Za-z_]\w*)>", r"(?P=\1)", re.sub(r"\(\?<([A-Za-z_]\w*)>", r"(?P<\1>", pattern))


def _contains(value: str, *, case: bool, negate: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"not_contains" if negate else "contains": literal(value)}
    if case:
        spec["case_sensitive"] = True
    return spec


def _text_check(base: str, value: Any, steps: tuple[str, ...], kind: str) -> dict[str, Any] | str:
    """A text check (contains family, equals, starts-with) on the output after `steps`, or why it cannot be."""
    trimmed = "trim" in steps
    case_steps = [s for s in steps if s in ("lower", "upper")]
    folded = case_steps[-1] if case_steps else None
    case_sensitive = not base.startswith("i") and folded is None
    values = _values(value) if "-any" in base or "-all" in base else [js_string(value)]

    def fits(text: str) -> bool:
        # After lower/upper (or trim), a value with other case (or spaces at an end) can never be found: such a
        # check is not one the engine's options say, so it is not carried.
        if folded == "lower" and not base.startswith("i") and text != text.lower():
            return False
        if folded == "upper" and not base.startswith("i") and text != text.upper():
            return False
        return not trimmed or text == js_trim(text)

    if value is None or value == "" or value == []:
        return f"`{kind}` needs a value (promptfoo fails the test without one)"
    if steps and not all(fits(v) for v in values):
        return f"its transform ({', '.join(steps)}) makes it a check the engine cannot say the same way"
    if base in ("contains", "icontains"):
        if not isinstance(value, (str, int, float)) or isinstance(value, bool) or value == "":
            return f"`{kind}` needs a text or number value (promptfoo fails the test without one)"
        return _contains(values[0], case=case_sensitive)
    if base in ("contains-any", "icontains-any"):
        spec: dict[str, Any] = {"contains": [literal(v) for v in values], "mode": "any"}
        if case_sensitive:
            spec["case_sensitive"] = True
        return spec
    if base in ("contains-all", "icontains-all"):
        # promptfoo scores it 0 or 1; a `contains` list gives partial credit, which a threshold would see.
        # "not any value is missing" is 0 or 1 too: `any` takes the best child, `not` its complement.
        missing = [{"not_contains": literal(v), **({"case_sensitive": True} if case_sensitive else {})}
                   for v in values]
        return {"not": {"any": missing}, "name": kind}
    space = r"\s*" if trimmed else ""
    flags = {"flags": "i"} if folded else {}
    body = re.escape(values[0])
    if base == "equals":
        return {"regex": literal(r"\A" + space + body + space + r"\Z"), "name": kind, **flags}
    return {"regex": literal(r"\A" + space + body), "name": kind, **flags}   # starts-with


def map_assert(assertion: Mapping[str, Any], variables: Mapping[str, Any],
               site: AssertSite) -> tuple[dict[str, Any] | None, str | None]:
    """One promptfoo assert as an evaluator, or (None, why it is not carried and what to do).

    Args:
        assertion: The assert (`type`, `value`, optional `threshold`, `weight`, `metric`, `transform`, `config`).
        variables: The test's vars as promptfoo's asserts see them (after the prompt was rendered).
        site: The assert's place, the files, the judge and the scorers.
    """
    kind = str(assertion.get("type", ""))
    negate = kind.startswith("not-")
    base = kind[4:] if negate else kind
    if not kind:
        return None, "an assert without a `type`"
    if base in _NOT_CARRIED_KINDS:
        return None, f"`{kind}` is not carried: {_NOT_CARRIED_KINDS[base]}"
    if site.transform is None:
        return None, "the test's `options.transform` is not a chain of trim/toLowerCase/toUpperCase on `output`"
    own = assertion.get("transform")
    steps = string_transform(own) if own is not None else ()
    if steps is None:
        return None, (f"its `transform: {js_string(own)[:80]}` is not carried (only a chain of trim(), "
                      "toLowerCase(), toUpperCase() on `output` is)")
    steps = site.transform + steps
    threshold = assertion.get("threshold")
    try:
        if base == "python":
            spec = site.scorers.python(assertion, variables, negate, steps, site.where)
            negate = False   # promptfoo's not-python inverts the pass inside the adapter, as it does
        elif base == "assert-set":
            spec = _assert_set(assertion, variables, site)
        else:
            value = _rendered(assertion.get("value"), variables, site)
            mapped = _map_value(base, kind, value, threshold, steps, site)
            if isinstance(mapped, str):
                return None, f"`{kind}` is not carried: {mapped}"
            spec = mapped
    except NotCarried as exc:
        return None, f"`{kind}` is not carried: {exc}"
    if negate and isinstance(spec.get("contains"), str):
        spec["not_contains"] = spec.pop("contains")   # the same verdict, said plainly
    elif negate:
        spec.pop("name", None)
        spec = {"not": spec, "name": kind}
    if assertion.get("weight") is not None:
        try:
            weight = js_number(assertion["weight"], "weight")
        except NotCarried as exc:
            return None, f"`{kind}` is not carried: {exc}"
        if weight < 0:
            return None, f"`{kind}` is not carried: its weight {weight:g} is below 0"
        spec["weight"] = weight
    if assertion.get("metric"):
        spec["name"] = literal(str(assertion["metric"]))
    return spec, None


def _map_value(base: str, kind: str, value: Any, threshold: Any, steps: tuple[str, ...],
               site: AssertSite) -> dict[str, Any] | str:
    """The evaluator for a rendered value, or why there is none."""
    if base in _TEXT_CHECKS:
        if base == "equals" and isinstance(value, (Mapping, list)):
            if steps:
                return "its transform makes it a check the engine cannot say the same way"
            # promptfoo deep-compares JSON.parse(output), the whole answer, with the value.
            return {"json_schema": {"const": _literal_tree(value)}, "strict": True, "fences": False, "name": kind}
        return _text_check(base, value, steps, kind)
    if steps:
        return f"its transform ({', '.join(steps)}) is carried only on text checks (contains, equals, starts-with)"
    if base == "regex":
        pattern = _js_regex(js_string(value))
        problem, _ = check_pattern(pattern)
        if problem is not None:
            return problem
        return {"regex": literal(pattern)}
    if base in ("is-json", "contains-json"):
        schema = value
        if isinstance(value, str):
            loaded = load_yaml_text(value, "the is-json schema", kind=CONFIG)
            if loaded.diagnostics:
                return f"its schema is not valid YAML or JSON ({loaded.diagnostics[0].message})"
            schema = loaded.data
        if schema is not None and not isinstance(schema, Mapping):
            return "its schema is not a mapping"
        if base == "is-json":
            # promptfoo: JSON.parse(output), the whole answer, no fence (src/assertions/json.ts).
            return ({"json_schema": _literal_tree(schema), "strict": True, "fences": False, "name": kind} if schema
                    else {"is_json": True, "strict": True, "fences": False, "name": kind})
        # promptfoo finds JSON objects anywhere in the text; never an array.
        found = {"type": "object"} if not schema else {"allOf": [{"type": "object"}, _literal_tree(schema)]}
        return {"json_schema": found, "name": kind}
    if base in ("similar", *_MODEL_GRADED) and (not isinstance(value, (str, int, float)) or js_string(value) == ""):
        return f"`{kind}` needs a text value (promptfoo fails the test without one)"
    if base == "similar":
        return {"similar": {"reference": literal(js_string(value))},
                "threshold": 0.75 if threshold is None else share(threshold, "threshold")}
    if base in _MODEL_GRADED:
        spec: dict[str, Any] = {"judge": {"rubric": literal(js_string(value))}}
        if site.judge:
            spec["judge"]["model"] = site.judge
        if threshold is not None:
            spec["threshold"] = share(threshold, "threshold")
        return spec
    if base in ("latency", "cost"):
        if threshold is None:
            return f"`{base}` needs a threshold (promptfoo fails the test without one)"
        limit = max(0.0, js_number(threshold, "threshold")) / (1000 if base == "latency" else 1)
        return {"latency_s" if base == "latency" else "cost": {"max": limit}, "name": kind}
    return "no evaluator here matches it; pick one from docs/evaluators.md"


def _assert_set(assertion: Mapping[str, Any], variables: Mapping[str, Any], site: AssertSite) -> dict[str, Any]:
    """promptfoo's assert-set: its asserts' weighted mean, passing when all pass or at its threshold."""
    children = []
    for child in assertion.get("assert") or []:
        if not isinstance(child, Mapping):
            continue
        mapped, why = map_assert(child, variables, site)
        children.append(mapped if mapped is not None else
                        {"not_carried": literal(f"{describe(child)} ({why}; promptfoo assert-set at {site.where})")})
    if not children:
        raise NotCarried("an assert-set without asserts")
    spec: dict[str, Any] = {"all": children}
    if assertion.get("threshold") is not None:
        spec["threshold"] = share(assertion["threshold"], "threshold")
    return spec


def describe(assertion: Mapping[str, Any]) -> str:
    """An assert in a line: `javascript: output.length < 100`."""
    value = assertion.get("value")
    text = " ".join(js_string(value).split()) if value is not None else ""
    if isinstance(value, (Mapping, list)):
        text = js_json(value)
    if len(text) > 120:
        text = text[:117] + "..."
    return f"{assertion.get('type') or '(no type)'}" + (f": {text}" if text else "")



def engine_problem(spec: dict[str, Any], folder: Path) -> str | None:
    """Why `engine validate` would refuse an evaluator the import made (an invalid inner JSON Schema, a pattern RE2
    cannot run), or None: each kind's own load-time checks and the compile, as the loader runs them. A python
    scorer's file is written after the mapping, so its check waits for `engine validate`."""
    report = Report("promptfoo", Positions())
    if "python" not in kinds(spec):
        EvaluatorResolver({}, report, folder).resolve(spec, ())
    problem = next((d.message for d in report.diagnostics if d.severity == "error"), None)
    if problem is None:
        problem = next((n.problem for _, n in compile_spec(spec, {}).walk() if n.problem), None)
    return problem


def kinds(spec: Any) -> set[str]:
    """Every evaluator kind in a spec tree."""
    if isinstance(spec, Mapping):
        return set(spec) | {k for v in spec.values() for k in kinds(v)}
    if isinstance(spec, list):
        return {k for v in spec for k in kinds(v)}
    return set()


def combined_eval(evals: list[dict[str, Any]], threshold: Any) -> dict[str, Any]:
    """The test's eval: promptfoo passes a test when every counted assert passes (or, with a threshold, when
    the weighted mean score reaches it); a test with no assert is recorded unscored."""
    if not evals:
        return {"none": True}   # promptfoo shows the answer for a person to read; here it is recorded unscored
    if threshold is not None:
        return {"all": evals}   # the test's threshold on the weighted mean, whatever each assert says
    partial = any(kinds(spec) & {"similar", "judge", "python"} for spec in evals)
    if not partial:
        return evals[0] if len(evals) == 1 else {"all": evals}
    # Checks that pass below a full score (a similarity at its threshold, a judge's scale, promptfoo's
    # {pass, score}): each is a gate, and the test passes when every gate does, whatever the mean.
    gated = [{**spec, "must": True} if spec.get("weight", 1) != 0 else spec for spec in evals]
    return {"all": gated, "threshold": 0.0}
