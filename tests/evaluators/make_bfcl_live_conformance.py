"""Build tests/fixtures/bfcl/live_checker_conformance.jsonl.gz: BFCL's own verdicts on the live categories.

The shared checker_conformance.jsonl.gz covers the five non-live categories only. This script derives model
outputs for every live entry the way that file's legend describes (gold answers, perturbed types, missing and
extra parameters, wrong names, reordered, dropped and duplicated calls, prose, irrelevance calls) and asks
BFCL's *own* checker for each verdict: `ast_checker.py`, `is_function_calling_format_output` and
`is_empty_output`, read from a gorilla checkout at the commit the shared data names (6ea5797), with the
eval runner's order of checks (decoder failed -> wrong output format -> ast_checker; irrelevance: a decoded,
non-empty call list fails). Only BFCL's code decides `expected_valid`; nothing of ours is consulted, so the
replay (test_bfcl_conformance.py) compares two independent implementations.

    python tests/evaluators/make_bfcl_live_conformance.py --gorilla PATH/TO/gorilla \\
        --data ../shared/data/bfcl --out tests/fixtures/bfcl/live_checker_conformance.jsonl.gz

BFCL's checker imports model and type tables it does not need for Python-syntax categories; those imports
are replaced by stand-ins (the Language enum, and a model table whose only use is `underscore_to_dot`).
"""

from __future__ import annotations

import argparse
import ast
import copy
import enum
import gzip
import json
import sys
import types
from pathlib import Path
from typing import Any

CATEGORIES = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance")
CHECKER = "berkeley-function-call-leaderboard/bfcl_eval/eval_checker/ast_eval/ast_checker.py"
UTILS = "berkeley-function-call-leaderboard/bfcl_eval/utils.py"
MODES = {"prompting": False, "fc_underscore_to_dot": True}  # model_mode -> BFCL's underscore_to_dot
PROSE = "I cannot help with that."
IRRELEVANT_PROSE = "None of the provided functions can answer this question."


def load_bfcl(gorilla: Path) -> types.SimpleNamespace:
    """BFCL's checker functions, executed from its own source with stand-ins for unrelated imports."""

    class Language(enum.Enum):
        PYTHON = "python"
        JAVA = "java"
        JAVASCRIPT = "javascript"

    stand_ins = {
        "bfcl_eval.constants.enums": {"Language": Language},
        "bfcl_eval.constants.model_config": {"MODEL_CONFIG_MAPPING": {
            mode.replace("_", "/"): types.SimpleNamespace(underscore_to_dot=flag) for mode, flag in MODES.items()}},
        "bfcl_eval.constants.type_mappings": {"JAVA_TYPE_CONVERSION": {}, "JS_TYPE_CONVERSION": {}},
        "bfcl_eval.eval_checker.ast_eval.type_convertor.java_type_converter": {"java_type_converter": None},
        "bfcl_eval.eval_checker.ast_eval.type_convertor.js_type_converter": {"js_type_converter": None},
    }
    for name, attrs in stand_ins.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module
    checker: dict[str, Any] = {}
    exec(compile((gorilla / CHECKER).read_text(encoding="utf-8"), CHECKER, "exec"), checker)
    utils_tree = ast.parse((gorilla / UTILS).read_text(encoding="utf-8"))
    wanted = [node for node in utils_tree.body if isinstance(node, ast.FunctionDef)
              and node.name in ("is_function_calling_format_output", "is_empty_output")]
    utils: dict[str, Any] = {}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), UTILS, "exec"), utils)
    return types.SimpleNamespace(ast_checker=checker["ast_checker"], Language=Language, **utils)


def verdict(bfcl: types.SimpleNamespace, entry: dict[str, Any], answer: list[Any] | None, category: str,
            mode: str, decoded: list[Any] | None) -> tuple[bool, str | None]:
    """BFCL's verdict, in the eval runner's order of checks."""
    if "irrelevance" in category:
        called = decoded is not None and not bfcl.is_empty_output(decoded)
        return (not called, "irrelevance_error:decoder_success" if called else None)
    if decoded is None:
        return False, "ast_decoder:decoder_failed"
    if not bfcl.is_function_calling_format_output(decoded):
        return False, "ast_decoder:decoder_wrong_output_format"
    result = bfcl.ast_checker(entry["function"], copy.deepcopy(decoded), answer, bfcl.Language.PYTHON,
                              category, mode)
    return bool(result["valid"]), result.get("error_type") if not result["valid"] else None


# ------------------------------------------------------------------ outputs derived from the ground truth


def _non_empty(values: Any) -> list[Any]:
    return [v for v in (values if isinstance(values, list) else [values]) if not (isinstance(v, str) and v == "")]


def _resolve(value: Any, last: bool) -> Any:
    """A GT value with nested accepted-value dicts (and lists of them) resolved to one value."""
    if isinstance(value, dict):
        out = {}
        for key, options in value.items():
            chosen = _non_empty(options)
            if chosen:
                out[key] = _resolve(chosen[-1] if last else chosen[0], last)
        return out
    if isinstance(value, list):
        return [_resolve(v, last) if isinstance(v, dict) else v for v in value]
    return value


def gold(entry: dict[str, Any], answer: list[Any], how: str) -> list[dict[str, Any]]:
    """The gold calls: first / last non-empty accepted value, or `min` (optional `""` params left out)."""
    functions = {f["name"]: f.get("parameters") or {} for f in entry["function"]}
    calls = []
    for item in answer:
        (name, accepted), = item.items()
        params = functions.get(name, {})
        declared, required = params.get("properties") or {}, params.get("required") or []
        args: dict[str, Any] = {}
        for param, values in accepted.items():
            if param not in declared:
                continue
            chosen = _non_empty(values)
            if how == "min" and param not in required and "" in values:
                continue
            if chosen:
                args[param] = _resolve(chosen[-1] if how == "last" else chosen[0], how == "last")
            elif param in required:
                args[param] = ""
        for param in required:  # required params always included
            args.setdefault(param, "")
        calls.append({name: args})
    return calls


def _first_params(calls: list[dict[str, Any]], kind: type) -> list[tuple[int, str]]:
    found = []
    for i, call in enumerate(calls):
        (_, args), = call.items()
        for param, value in args.items():
            if type(value) is kind:
                found.append((i, param))
    return found


def _with(calls: list[dict[str, Any]], index: int, change: Any) -> list[dict[str, Any]]:
    out = copy.deepcopy(calls)
    (name, args), = out[index].items()
    out[index] = change(name, args)
    return out


def _dummy(spec: dict[str, Any]) -> Any:
    return {"integer": 1, "float": 1.0, "boolean": True, "array": [], "tuple": [], "dict": {}}.get(
        spec.get("type", ""), "x")


def derived_outputs(entry: dict[str, Any], answer: list[Any] | None,
                    category: str) -> list[tuple[str, str, list[Any] | None]]:
    """(case kind, model_mode, decoded calls or None) for one entry, as the shared legend describes them."""
    if "irrelevance" in category:
        out: list[tuple[str, str, list[Any] | None]] = [("prose", "prompting", None), ("empty_list", "prompting", [])]
        if entry["function"]:  # a few entries offer no function at all
            first = entry["function"][0]
            params = first.get("parameters") or {}
            args = {p: _dummy((params.get("properties") or {}).get(p, {})) for p in params.get("required") or []}
            out.append(("call", "prompting", [{first["name"]: args}]))
        return out
    assert answer is not None
    base = gold(entry, answer, "first")
    out = [
        ("gold_first", "prompting", base), ("gold_last", "prompting", gold(entry, answer, "last")),
        ("gold_min", "prompting", gold(entry, answer, "min"))]
    strings = _first_params(base, str)
    if strings:
        shouted = copy.deepcopy(base)
        for i, param in strings:
            (_, args), = shouted[i].items()
            args[param] = args[param].upper().replace(" ", "  ") + "."
        out.append(("string_case_space_period", "prompting", shouted))
    for i, param in _first_params(base, float):
        if float(dict(*base[i].values())[param]).is_integer():
            out.append((f"int_for_float:{param}", "prompting",
                        _with(base, i, lambda n, a, p=param: {n: {**a, p: int(a[p])}})))
    for i, param in _first_params(base, int):
        for kind, cast in (("float_for_int", float), ("str_for_int", str)):
            out.append((f"{kind}:{param}", "prompting",
                        _with(base, i, lambda n, a, p=param, c=cast: {n: {**a, p: c(a[p])}})))
    functions = {f["name"]: f for f in entry["function"]}
    (first_name, _), = base[0].items()
    required = (functions.get(first_name, {}).get("parameters") or {}).get("required") or []
    if required:
        out.append(("missing_required", "prompting",
                    _with(base, 0, lambda n, a: {n: {k: v for k, v in a.items() if k != required[0]}})))
    out.append(("extra_param", "prompting", _with(base, 0, lambda n, a: {n: {**a, "zz_unexpected": 1}})))
    out.append(("wrong_name", "prompting", _with(base, 0, lambda n, a: {n + "_x": a})))
    if any("." in name for call in base for name in call):
        out.append(("fc_underscore_name", "fc_underscore_to_dot",
                    [{name.replace(".", "_"): args for name, args in call.items()} for call in base]))
        out.append(("fc_dotted_name", "fc_underscore_to_dot", copy.deepcopy(base)))
    if "parallel" in category and len(base) > 1:
        out.append(("reversed_order", "prompting", list(reversed(copy.deepcopy(base)))))
        out.append(("drop_last_call", "prompting", copy.deepcopy(base[:-1])))
    out.append(("duplicated_call", "prompting", copy.deepcopy(base) + copy.deepcopy(base[:1])))
    if "multiple" in category and "parallel" not in category:
        others = [f["name"] for f in entry["function"] if f["name"] != first_name]
        if others:
            out.append(("other_offered_function", "prompting", [{others[0]: dict(*base[0].values())}]))
    out.append(("prose", "prompting", None))
    return out


def _text(decoded: list[Any] | None, category: str) -> str:
    if decoded is None:
        return IRRELEVANT_PROSE if "irrelevance" in category else PROSE
    calls = (f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
             for call in decoded for name, args in call.items())
    return f"[{', '.join(calls)}]"


def build(bfcl: types.SimpleNamespace, data: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every derived case with BFCL's verdict, and the case ids BFCL's checker raised on (left out)."""
    rows, raised = [], []
    for category in CATEGORIES:
        answer_file = data / "possible_answer" / f"BFCL_v4_{category}.json"
        answers = ({a["id"]: a["ground_truth"] for a in map(json.loads, answer_file.read_text().splitlines())
                    if a} if answer_file.exists() else {})
        for line in (data / f"BFCL_v4_{category}.json").read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            answer = answers.get(entry["id"])
            for kind, mode, decoded in derived_outputs(entry, answer, category):
                decoded = json.loads(json.dumps(decoded))  # as replayed: JSON values (tuples are lists)
                case_id = f"{entry['id']}:{kind}"
                try:
                    valid, error_type = verdict(bfcl, entry, answer, category, mode, decoded)
                except Exception as exc:  # noqa: BLE001 - BFCL's own checker crashing: no verdict to compare
                    raised.append(f"{case_id}: {type(exc).__name__}: {exc}")
                    continue
                rows.append({"case_id": case_id, "test_id": entry["id"], "category": category, "model_mode": mode,
                             "model_output_text": _text(decoded, category), "decoded_calls": decoded,
                             "expected_valid": valid, "expected_error_type": error_type})
    return rows, raised


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gorilla", type=Path, required=True, help="a ShishirPatil/gorilla checkout (6ea5797)")
    parser.add_argument("--data", type=Path, required=True, help="the folder holding BFCL_v4_live_*.json")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows, raised = build(load_bfcl(args.gorilla), args.data)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(args.out, "wb", mtime=0) as handle:  # mtime 0: the same input gives the same bytes
        handle.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))
    valid = sum(r["expected_valid"] for r in rows)
    print(f"{len(rows)} cases ({valid} valid) -> {args.out}; BFCL's checker raised on {len(raised)}")
    for line in raised[:20]:
        print("  " + line)


if __name__ == "__main__":
    main()
