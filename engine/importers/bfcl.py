"""BFCL (Berkeley Function Calling Leaderboard) questions + possible answers -> YAML suites.

Each BFCL entry becomes one test: its first turn as `messages`, its functions as suite `tools`
(BFCL's types translated to JSON Schema: dict -> object, float -> number, tuple -> array,
any -> string), and a `tool_call` evaluator with `match: bfcl` built from the possible answer
(`calls:` for the parallel categories). Irrelevance entries get `no_tool_call: true`. Every test
carries a golden answer (the first accepted value of each argument) so `engine validate` can
self-check the import, except the few live entries whose possible answer no call can meet
(`unmeetable`: e.g. an empty accepted list); those say why in their `description`.

BFCL reuses a function name with different definitions across entries; a suite names each tool
once, so entries whose tools clash are written to extra files (`..._part2.yaml`).

The data is Apache-2.0 (ShishirPatil/gorilla); the converter is our own code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.importers.jsonl import read_jsonl
from engine.suite.conversation import API_NAME

__all__ = [
    "CATEGORIES",
    "build_suites",
    "convert_entry",
    "convert_schema",
    "decode_prompting_calls",
    "golden_calls",
    "ground_truth_to_spec",
    "import_bfcl",
    "load_jsonl",
    "to_tool",
    "unmeetable",
]

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance",
              "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance")

# BFCL's own type names -> JSON Schema (the translation BFCL applies for function-calling models).
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string", "list": "array",
          "bool": "boolean", "double": "number", "long": "integer", "int": "integer"}
_DROP = {"optional"}  # BFCL-only markers that are not JSON Schema


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a BFCL data file (one JSON object a line, though the files end in .json)."""
    return [entry for _, entry in read_jsonl(path, "give a BFCL_v4_<category>.json data file")]


def convert_schema(schema: Any) -> Any:
    """Translate a BFCL parameter schema into JSON Schema, recursively.

    Args:
        schema: A BFCL schema node (`{"type": "dict", "properties": {...}}`).
    """
    if isinstance(schema, list):
        return [convert_schema(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROP:
            continue
        if key == "type" and isinstance(value, str):
            out[key] = _TYPES.get(value, value)
        elif key == "properties" and isinstance(value, Mapping):
            out[key] = {name: convert_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = convert_schema(value)
        else:
            out[key] = value
    return out


def to_tool(function: Mapping[str, Any]) -> dict[str, Any]:
    """One BFCL function as a suite tool body: {description, parameters}, and a `name:` for the API when it
    refuses BFCL's (`math.sum` goes out as `math_sum`, as BFCL sends it to OpenAI models)."""
    body = {"description": str(function.get("description", "")),
            "parameters": convert_schema(function.get("parameters") or {"type": "object", "properties": {}})}
    name = str(function.get("name", ""))
    if not API_NAME.fullmatch(name):
        body = {"name": re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64], **body}
    return body


def ground_truth_to_spec(category: str, ground_truth: list[Mapping[str, Any]] | None,
                         underscore_to_dot: bool = False) -> dict[str, Any]:
    """The evaluator for one entry: `tool_call` with `match: bfcl`, or `no_tool_call` for irrelevance.

    Args:
        category: The BFCL category (`parallel` in the name means several calls in any order).
        ground_truth: BFCL's possible answer: a list of {function: {param: [accepted values]}}.
        underscore_to_dot: Check as BFCL checks function-calling models (dots written as `_`).
    """
    if "irrelevance" in category or not ground_truth:
        return {"no_tool_call": True}
    calls = []
    for item in ground_truth:
        (name, args), = item.items()
        calls.append({"name": name, "args": {param: list(values) for param, values in args.items()}})
    body: dict[str, Any]
    if "parallel" in category:
        body = {"calls": calls, "order": "any"}
    else:
        body = dict(calls[0])
        if len(calls) > 1:
            body = {"calls": calls, "order": "any"}
    body["match"] = "bfcl"
    if underscore_to_dot:
        body["underscore_to_dot"] = True
    return {"tool_call": body}


def _first_accepted(values: Any) -> Any:
    """The first accepted value that is not `""`, with nested accepted-value dicts resolved."""
    for value in values if isinstance(values, list) else [values]:
        if isinstance(value, str) and value == "":
            continue
        return _resolve(value)
    return None


def _resolve(value: Any) -> Any:
    if isinstance(value, dict):  # BFCL dict answers map each key to a list of accepted values
        out = {}
        for key, options in value.items():
            chosen = _first_accepted(options)
            if chosen is not None or (isinstance(options, list) and None in options):
                out[key] = chosen
        return out
    if isinstance(value, list):
        return [_resolve(v) if isinstance(v, dict) else v for v in value]
    return value


def golden_calls(ground_truth: list[Mapping[str, Any]], functions: list[Mapping[str, Any]]) -> dict[str, Any]:
    """A golden tool-call envelope: each call with the first accepted value of every argument.

    Arguments that are only `""` (may be omitted) are left out unless the schema requires them, and
    so are the few that BFCL's answer lists but the function's schema does not declare.
    """
    required = {f["name"]: set((f.get("parameters") or {}).get("required") or []) for f in functions}
    declared = {f["name"]: set((f.get("parameters") or {}).get("properties") or {}) for f in functions}
    calls = []
    for item in ground_truth:
        (name, args), = item.items()
        arguments = {}
        for param, values in args.items():
            if name in declared and param not in declared[name]:
                continue  # BFCL's answers name a few parameters the schema lacks; a model could not send them
            non_empty = [v for v in values if not (isinstance(v, str) and v == "")]
            if non_empty or param in required.get(name, set()):
                arguments[param] = _first_accepted(values) if non_empty else ""
        calls.append({"name": name, "arguments": arguments})
    return {"tool_calls": calls}


def convert_entry(question: Mapping[str, Any], answer: Mapping[str, Any] | None, category: str,
                  underscore_to_dot: bool = False) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """One BFCL entry -> (the YAML test mapping, its tools by name).

    Args:
        question: The entry from `BFCL_v4_<category>.json`.
        answer: The matching entry from `possible_answer/`, or None (irrelevance has none).
        category: The BFCL category.
        underscore_to_dot: Check as BFCL checks function-calling models.
    """
    turn = question["question"][0]
    messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in turn]
    tools = {str(f["name"]): to_tool(f) for f in question["function"]}
    ground_truth = (answer or {}).get("ground_truth")
    test: dict[str, Any] = {"id": str(question["id"])}
    impossible = unmeetable(ground_truth or [], question["function"]) if "irrelevance" not in category else None
    if impossible:
        test["description"] = (f"No answer can pass: {impossible}. BFCL's checker fails every answer to this "
                               "entry too; it is kept so the category's count matches BFCL's, without a golden.")
    test.update({"messages": messages, "tools": list(tools)})
    test["eval"] = ground_truth_to_spec(category, ground_truth, underscore_to_dot)
    if "no_tool_call" in test["eval"]:
        test["golden"] = "None of the provided functions can answer this question."
    elif not impossible:
        test["golden"] = golden_calls(ground_truth or [], question["function"])
    return test, tools


def unmeetable(ground_truth: list[Mapping[str, Any]], functions: list[Mapping[str, Any]]) -> str | None:
    """Why no call can satisfy BFCL's possible answer, or None when one can.

    BFCL's checker (ast_checker.py) needs every parameter the schema requires, refuses a parameter that
    the possible answer does not list or the schema does not declare, accepts a value only when it is in
    the parameter's accepted list, and lets a parameter be left out only when that list holds `""`. So an
    empty accepted list (`[]`: no value is accepted and leaving it out is not allowed either), an answered
    parameter the schema lacks without `""`, or a required parameter the answer does not list, fails every
    answer. Our `tool_call` reads these the same way; the importer writes no golden for such an entry.
    """
    params = {str(f["name"]): f.get("parameters") or {} for f in functions}
    for item in ground_truth:
        (name, accepted), = item.items()
        schema = params.get(str(name), {})
        declared, required = schema.get("properties") or {}, schema.get("required") or []
        for param, values in accepted.items():
            if isinstance(values, list) and not values:
                return f"{name}: BFCL's answer accepts no value for {param!r} (an empty list)"
            if str(name) in params and param not in declared and "" not in values:
                return f"{name}: BFCL's answer needs {param!r}, which the function does not declare"
        for param in required:
            if param not in accepted:
                return f"{name}: the function requires {param!r}, which BFCL's answer does not allow"
    return None


def build_suites(category: str, questions: Iterable[Mapping[str, Any]], answers: Mapping[str, Mapping[str, Any]],
                 limit: int | None = None) -> list[dict[str, Any]]:
    """Group converted entries into suites; an entry whose tool definitions clash goes to the next part."""
    parts: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (suite mapping, tools by name)
    for count, question in enumerate(questions):
        if limit is not None and count >= limit:
            break
        test, tools = convert_entry(question, answers.get(str(question["id"])), category)
        for suite, known in parts:  # noqa: B007 - `suite` is used after the break
            if all(known.get(name, body) == body for name, body in tools.items()):
                break
        else:
            n = len(parts) + 1
            suite_id = f"bfcl_{category}" + (f"_part{n}" if n > 1 else "")
            suite = {"suite": suite_id,
                     "description": f"BFCL v4 {category} (Berkeley Function Calling Leaderboard, Apache-2.0), "
                                    "imported by `engine import bfcl`.",
                     "tags": ["bfcl", category], "tools": {}, "tests": []}
            parts.append((suite, suite["tools"]))
            known = suite["tools"]
        known.update(tools)
        suite["tests"].append(test)
    return [suite for suite, _ in parts]


def import_bfcl(category: str, data_dir: Path, out: Path, limit: int | None = None) -> Path:
    """Write BFCL `category` as YAML suite file(s) under `out` (a folder, created if needed).

    Args:
        category: One of CATEGORIES.
        data_dir: The folder holding `BFCL_v4_<category>.json` and `possible_answer/`.
        out: The output folder.
        limit: Import only the first `limit` entries.

    Returns:
        The first suite file written (`bfcl_<category>.yaml`); clashing tools go to `_partN` files
        beside it.

    Raises:
        FileNotFoundError: when the category's data file is missing (the message names it).
        ValueError: for an unknown category.
    """
    from ruamel.yaml import YAML

    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL category {category!r}; choose one of {', '.join(CATEGORIES)}")
    data_dir = Path(data_dir)
    question_file = data_dir / f"BFCL_v4_{category}.json"
    if not question_file.exists():
        raise FileNotFoundError(f"{question_file} not found; point --data at the folder holding BFCL_v4_*.json")
    answer_file = data_dir / "possible_answer" / f"BFCL_v4_{category}.json"
    answers = {str(a["id"]): a for a in load_jsonl(answer_file)} if answer_file.exists() else {}
    if "irrelevance" not in category and not answers:
        raise FileNotFoundError(f"{answer_file} not found; BFCL's possible answers are needed to score {category}")
    suites = build_suites(category, load_jsonl(question_file), answers, limit)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    yaml = YAML(typ="rt")  # keeps key order: suite, description, tags, tools, tests
    yaml.width = 4096
    yaml.allow_unicode = True
    written = []
    for suite in suites:
        path = out / f"{suite['suite']}.yaml"
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(f"# BFCL v4 {category}: ShishirPatil/gorilla, Apache-2.0. Generated; edit the importer, "
                         "not this file.\n")
            yaml.dump(_flow_lists(suite), handle)
        written.append(path)
    return written[0] if written else out / f"bfcl_{category}.yaml"


def _flow_lists(value: Any, key: str = "") -> Any:
    """Write accepted-value lists and short scalar lists on one line (`city: [Paris, ""]`)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(value, dict):
        out = CommentedMap()
        for k, v in value.items():
            out[k] = _flow_lists(v, str(k))
        return out
    if isinstance(value, list):
        seq = CommentedSeq(_flow_lists(v) for v in value)
        if key not in ("tests", "messages", "calls", "tool_calls") and not any(isinstance(v, dict) for v in value):
            seq.fa.set_flow_style()
        return seq
    return value


# ------------------------------------------------------------------ decoding prompting-style answers


def decode_prompting_calls(text: str) -> list[dict[str, dict[str, Any]]]:
    """Decode a prompting model's `[f(a=1), g(b='x')]` answer the way BFCL's default decoder does.

    Positional arguments are ignored (as BFCL ignores them), arithmetic is evaluated, a bare name
    becomes its text, other expressions become their source text, tuples become lists.

    Raises:
        ValueError: when the text is not a list of calls (BFCL: decoder failed).
    """
    body = text.strip("`\n ")
    if not body.startswith("["):
        body = "[" + body
    if not body.endswith("]"):
        body = body + "]"
    try:
        tree = ast.parse(body, mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not a list of calls: {exc}") from exc
    elements = [tree] if isinstance(tree, ast.Call) else getattr(tree, "elts", None)
    if elements is None:
        raise ValueError("not a list of calls")
    calls = []
    for element in elements:
        if not isinstance(element, ast.Call):
            raise ValueError(f"not a call: {ast.unparse(element)}")
        calls.append(_call(element))
    return calls


def _call(node: ast.Call) -> dict[str, dict[str, Any]]:
    parts = []
    func: ast.AST = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        raise ValueError(f"cannot read the function name of {ast.unparse(node)}")
    parts.append(func.id)
    name = ".".join(reversed(parts))
    return {name: {kw.arg: _value(kw.value) for kw in node.keywords if kw.arg is not None}}


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, ast.BinOp):
        # BFCL evaluates arithmetic; we do it without eval, for numbers only.
        return _arith(node)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call) and node.keywords:
        return _call(node)
    return ast.unparse(node)


def _arith(node: ast.AST) -> Any:
    import operator

    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
    if isinstance(node, ast.BinOp) and type(node.op) in ops:
        return ops[type(node.op)](_arith(node.left), _arith(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_arith(node.operand)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    raise ValueError(f"cannot evaluate {ast.unparse(node)}")
