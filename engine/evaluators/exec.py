"""The `exec` evaluator: run the model's code through a harness template in the sandbox and score it.

    eval: {exec: {harness: python-function, cases: [{call: "add(2, 3)", expect: 5}]}}

Options (docs/architecture.md): `harness` (required), `cases`, `expect_stdout`, `expect_exit_code`,
`timeout_s`, `memory_mb`, `language`, `vars`. A failing, crashing or hanging program is a *fail* with the
reason; a harness that cannot be prepared (unknown name, missing program such as node) is an *error*.
The scorer blocks (it waits for the program): the registry entry says `blocking=True`, so the runner scores
such trees in a worker thread and bounds how many run at once. The harness a node names is resolved and
loaded when the suite loads (`engine validate` reports an unknown name or a broken harness file).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

from engine.base.render import is_template
from engine.errors import EngineError, EvaluatorConfigError, SuiteError
from engine.evaluators.base import CheckSite, Kind, error
from engine.harness import oneshot, templates
from engine.harness.extract import extract_code
from engine.harness.isolation import Limits
from engine.model.answer import Answer
from engine.model.scoring import Scorer, ScoringContext
from engine.model.verdict import Verdict

KIND = "exec"
_OPTIONS = frozenset({"harness", "cases", "expect_stdout", "expect_exit_code", "timeout_s", "memory_mb",
                      "language", "vars"})


def exec_(value: Any, options: Mapping[str, Any]) -> Scorer:
    """Bind the `exec:` mapping (harness, cases, ...) once; the scorer runs the answer's code and scores it.

    Args:
        value: The `exec:` mapping, rendered.
        options: Other keys of the node (none for exec).
    """
    if not isinstance(value, Mapping) or not isinstance(value.get("harness"), str):
        raise EvaluatorConfigError("exec needs a mapping with `harness:` (e.g. {exec: {harness: python-function}})",
                                   kind=KIND, option="harness")
    unknown = sorted(set(value) - _OPTIONS)
    if unknown:
        raise EvaluatorConfigError(f"exec: unknown option(s) {', '.join(unknown)}; allowed: "
                                   f"{', '.join(sorted(_OPTIONS))}", kind=KIND, option=unknown[0])
    cases = _plain(value.get("cases") or [])
    bad = [i for i, c in enumerate(cases) if not _valid_case(c)]
    if bad:
        raise EvaluatorConfigError(f"exec: case {bad[0] + 1} must be {{call: ..., expect: ...}} or {{assert: ...}}",
                                   kind=KIND, option="cases")
    extra_vars = _plain(value.get("vars") or {})

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        return _run(value, cases, extra_vars, answer, ctx)

    return score


def _run(value: Mapping[str, Any], cases: list[Any], extra_vars: Mapping[str, Any], answer: Answer,
         ctx: ScoringContext) -> Verdict:
    try:
        harness = templates.load_harness(value["harness"], ctx.test.suite_dir)
        if harness.score == "cases" and not cases:
            return error(f"exec: harness {harness.name!r} scores cases; give `cases: [{{call, expect}}]`", KIND)
        extracted = extract_code(answer.text, str(value.get("language") or harness.language))
        marker = f"@@case-{secrets.token_hex(8)}@@"
        variables: dict[str, Any] = {
            "prompt": ctx.test.prompt, "answer": answer.text, "code": extracted.code, "cases": cases,
            "marker": marker, "expect_stdout": value.get("expect_stdout"),
            "expect_exit_code": value.get("expect_exit_code", 0), **extra_vars,
        }
        files, argv = templates.render_files(harness, variables)
        limits = Limits(
            timeout_s=float(value.get("timeout_s") or harness.timeout_s or Limits.timeout_s),
            memory_mb=int(value.get("memory_mb") or harness.memory_mb or Limits.memory_mb))
        result = oneshot.run(argv, files, limits)
    except EngineError as exc:
        return error(f"exec: {exc}", KIND)
    details = {"isolation": result.isolation, "exit_code": result.exit_code,
               "duration_s": round(result.duration_s, 4)}
    note = f" ({extracted.note})" if extracted.note else ""
    if harness.score == "cases":
        return _score_cases(cases, result, marker, note, details)
    return _score_exit(value, result, note, details)


def _plain(value: Any) -> Any:
    """YAML values (possibly ruamel types) as plain JSON values, so `repr` in templates is valid Python."""
    return json.loads(json.dumps(value, default=str))


def _valid_case(case: Any) -> bool:
    if not isinstance(case, dict):
        return False
    if "call" in case:
        return isinstance(case["call"], str) and "expect" in case and set(case) <= {"call", "expect", "name"}
    return isinstance(case.get("assert"), str) and set(case) <= {"assert", "name"}


def _tail(text: str, lines: int = 3, chars: int = 300) -> str:
    """The last lines of stderr (where the exception is), on one line; stack-frame lines skipped."""
    kept = [line.strip() for line in text.strip().splitlines()
            if line.strip() and not line.strip().startswith(("at ", "Node.js v"))][-lines:]
    joined = " | ".join(kept)
    return joined if len(joined) <= chars else "..." + joined[-chars:]


def _clip(text: str, chars: int = 120) -> str:
    return repr(text if len(text) <= chars else text[:chars] + "...")


def _normalise_output(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def _score_exit(value: Mapping[str, Any], result: oneshot.RunResult, note: str,
                details: dict[str, Any]) -> Verdict:
    expected_code = int(value.get("expect_exit_code", 0))
    expected_out = value.get("expect_stdout")
    if result.timed_out or result.output_exceeded or result.exit_code != expected_code:
        why = result.describe()
        if result.exit_code is not None and not result.timed_out:
            why = f"exit code {result.exit_code}, expected {expected_code}{result.memory_note()}"
        stderr = _tail(result.stderr)
        return _verdict(0.0, f"{why}{': ' + stderr if stderr else ''}{note}", details)
    if expected_out is not None and _normalise_output(result.stdout) != _normalise_output(str(expected_out)):
        return _verdict(0.0, f"stdout was {_clip(result.stdout)}, expected {_clip(str(expected_out))}{note}", details)
    return _verdict(1.0, f"exit code {result.exit_code}" + (" and stdout as expected" if expected_out is not None
                                                            else "") + note, details)


def _score_cases(cases: list[dict[str, Any]], result: oneshot.RunResult, marker: str, note: str,
                 details: dict[str, Any]) -> Verdict:
    outcome: dict[int, tuple[bool, str]] = {}
    for line in result.stdout.splitlines():
        if line.startswith(marker):
            try:
                row = json.loads(line[len(marker):])
                outcome[int(row["case"])] = (bool(row["ok"]), str(row.get("why", "")))
            except (ValueError, KeyError, TypeError):
                continue
    unfinished = f"did not finish: {result.describe()}"
    if result.stderr.strip() and not result.timed_out:
        unfinished += f": {_tail(result.stderr, lines=1)}"
    failures: list[str] = []
    passed = 0
    for i, case in enumerate(cases):
        ok, why = outcome.get(i, (False, unfinished))
        if ok:
            passed += 1
        else:
            label = case.get("name") or case.get("call") or case.get("assert")
            failures.append(f"case {i + 1} `{label}`: {why}")  # counted from 1, as people count
    score = passed / len(cases)
    reason = f"{passed}/{len(cases)} cases passed"
    if failures:
        shown = "; ".join(failures[:3]) + (f"; and {len(failures) - 3} more" if len(failures) > 3 else "")
        reason += f"; failed: {shown}"
    details = {**details, "cases_passed": passed, "cases_total": len(cases)}
    return _verdict(score, reason + note, details)


def _verdict(score: float, reason: str, details: dict[str, Any]) -> Verdict:
    return Verdict(score=score, passed=score >= 1.0, reason=reason, kind=KIND, details=details)


def _check(value: Any, spec: Mapping[str, Any], site: CheckSite) -> None:
    """Resolve and load the harness when the suite loads: an unknown name or a broken harness file is a
    FILE:LINE:COL error from `engine validate`, not an error row after the calls were paid for."""
    name = value.get("harness") if isinstance(value, Mapping) else None
    if not isinstance(name, str) or is_template(name):
        return
    try:
        templates.load_harness(name, site.suite_dir)
    except SuiteError as exc:
        first = exc.diagnostics[0] if exc.diagnostics else None
        where = f" ({first})" if first else ""
        site.error(("exec", "harness"), f"the harness '{name}' is not a valid harness file{where}")
    except EngineError as exc:
        site.error(("exec", "harness"), str(exc))


EXEC = Kind("Run the answer's code in a sandboxed harness and check what it does.", {
    "type": "object", "additionalProperties": False, "required": ["harness"], "properties": {
        "harness": {"type": "string", "description": "A harness name from harnesses/ or `./file.yaml` "
                    "inside this suite's folder.", "examples": ["python-function", "./my-harness.yaml"]},
        "cases": {"type": "array", "description": "Calls to make and what they must return.",
                  "items": {"type": "object", "additionalProperties": False, "title": "exec case",
                            "minProperties": 1, "properties": {
                                "call": {"type": "string", "description": "An expression to evaluate.",
                                         "examples": ["add(2, 3)"]},
                                "expect": {"description": "The value `call` must return."},
                                "assert": {"type": "string", "description": "A statement that must hold."}}}},
        "expect_stdout": {"type": "string", "description": "The exact output the program must print."},
        "expect_exit_code": {"type": "integer", "description": "The exit code the program must end with."},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "description": "Time limit per run, seconds."},
        "memory_mb": {"type": "integer", "minimum": 1, "description": "Memory limit, MB."},
        "language": {"type": "string", "description": "The language the code is in.", "examples": ["python"]},
        "vars": {"type": "object", "description": "Extra template variables for the harness."}}}, {},
    ({"exec": {"harness": "python-function", "cases": [{"call": "add(2, 3)", "expect": 5}]}},), build=exec_,
    check=_check, blocking=True)
