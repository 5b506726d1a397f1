"""The `python` evaluator: a function of the suite author's, for what YAML cannot say, run in the exec sandbox.

    eval: {python: {file: scorers.py, function: score}}

    # scorers.py, beside the suite
    def score(answer, transcript, golden, case):
        return {"score": 1.0, "reason": "..."}      # or True / False, or a number in [0, 1]
                                                    # ({"passed": ...} beside a score decides the pass itself)

The function is called by keyword with the final answer's text, the whole transcript as plain JSON data
(messages with their tool calls and results, the ledger of model calls, tool events, outcome, state, and
the run's record), the golden and the case variables. It runs in the sandbox (`engine.harness.oneshot`) as
exec checks do (same limits, no network, a scrubbed environment: no secrets); a fixed runner script (`_RUNNER`) loads
the file, calls the function and prints its result on a line behind a fresh marker. Whatever goes wrong in
the scorer (an exception, a bad return, a timeout) is an *error* verdict with its stdout/stderr, never a
crashed run. The file is read when the answer is scored, so `engine rescore` runs the current file; it is opened
as input files are (a regular file only, without blocking: a FIFO in its place is refused, never waited on).
"""

from __future__ import annotations

import ast
import json
import secrets
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import Any

from engine.base.input_file import InputFileError, read_capped
from engine.errors import EngineError, EvaluatorConfigError
from engine.evaluators.base import CheckSite, Kind, error, short
from engine.harness import oneshot
from engine.harness.isolation import Limits
from engine.model.answer import Answer
from engine.model.scoring import Scorer, ScoringContext
from engine.model.verdict import Verdict

__all__ = ["PYTHON", "transcript_data"]

KIND = "python"
_OPTIONS = frozenset({"file", "function", "timeout_s", "memory_mb"})
_MAX_FILE = 1024 * 1024   # a scorer file larger than this is refused: it is read on every answer
_MAX_RESULT = 64 * 1024   # the result line the scorer prints is read up to this

# The program the sandbox runs: reads input.json, imports the scorer file, calls the function by keyword and
# prints the result as JSON behind the marker on the original stdout (the scorer's own prints go to stderr).
_RUNNER = r'''
import importlib.util, json, math, os, sys, traceback
data = json.load(open("input.json", encoding="utf-8"))
out = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
def emit(payload):
    out.write(data["marker"] + json.dumps(payload) + "\n")
    out.flush()
try:
    spec = importlib.util.spec_from_file_location("scorer", data["file"])
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.getcwd())
    spec.loader.exec_module(module)
    function = getattr(module, data["function"])
    result = function(**data["arguments"])
except BaseException:
    emit({"raised": traceback.format_exc(limit=-3)})
    sys.exit(1)
if isinstance(result, bool):
    emit({"score": 1.0 if result else 0.0, "reason": None})
elif isinstance(result, (int, float)):
    emit({"score": float(result), "reason": None})
elif isinstance(result, dict) and isinstance(result.get("score"), (int, float, bool)):
    emit({"score": float(result["score"]), "reason": None if result.get("reason") is None else str(result["reason"]),
          "passed": result["passed"] if isinstance(result.get("passed"), bool) else None})
else:
    emit({"bad": repr(result)[:300]})
'''


def python_(value: Any, options: Mapping[str, Any]) -> Scorer:
    """Bind `{file, function, timeout_s, memory_mb}` once; the scorer runs the function on each answer."""
    if not isinstance(value, Mapping) or not isinstance(value.get("file"), str):
        raise EvaluatorConfigError("python needs a mapping with `file:` (e.g. {python: {file: scorers.py, "
                                   "function: score}})", kind=KIND, option="file")
    unknown = sorted(set(value) - _OPTIONS)
    if unknown:
        raise EvaluatorConfigError(f"python: unknown option {unknown[0]!r}; allowed: {', '.join(sorted(_OPTIONS))}",
                                   kind=KIND, option=unknown[0])
    file = _relative(value["file"])
    function = str(value.get("function") or "score")
    if not function.isidentifier():
        raise EvaluatorConfigError(f"python: function must be a Python name, got {short(function)}", kind=KIND,
                                   option="function")
    limits = Limits(timeout_s=float(value.get("timeout_s") or Limits.timeout_s),
                    memory_mb=int(value.get("memory_mb") or Limits.memory_mb))

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        return _run(file, function, limits, answer, ctx)

    return score


def _relative(file: str) -> str:
    pure = PurePosixPath(file)
    if not file.strip() or pure.is_absolute() or ".." in pure.parts or pure.suffix != ".py":
        raise EvaluatorConfigError(f"python: file {file!r} must be a .py file beside the suite (a relative path, "
                                   "no leading / or ..)", kind=KIND, option="file")
    return pure.as_posix()


def transcript_data(answer: Answer, ctx: ScoringContext) -> dict[str, Any]:
    """The conversation as plain JSON data: messages (tool calls and results included), ledger, tool events,
    outcome and state for an agent test; the test's messages and the answer for a single-turn one; and the
    run's record (None where nothing ran)."""
    record = None if ctx.record is None else asdict(ctx.record)
    transcript = ctx.transcript
    if transcript is not None:
        return {"messages": transcript.records(), "ledger": transcript.ledger_records(),
                "tool_events": transcript.tool_event_records(), "outcome": transcript.outcome,
                "state": dict(transcript.state), "record": record}
    reply: dict[str, Any] = {"role": "assistant", "content": answer.text}
    if answer.tool_calls:
        reply["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name,
                                                                           "arguments": c.raw_arguments}}
                               for c in answer.tool_calls]
    return {"messages": [*ctx.test.messages, reply], "ledger": [], "tool_events": [], "outcome": None,
            "state": {}, "record": record}


def _run(file: str, function: str, limits: Limits, answer: Answer, ctx: ScoringContext) -> Verdict:
    path = Path(ctx.test.suite_dir, file)
    try:
        source = _source(path)
    except InputFileError as exc:
        return error(f"python: {exc}", KIND)
    marker = f"@@score-{secrets.token_hex(8)}@@"
    case = {k: v for k, v in ctx.variables.items() if k not in ("golden", "test_id", "suite")}
    arguments = {"answer": answer.text, "transcript": transcript_data(answer, ctx), "golden": ctx.test.golden,
                 "case": case}
    payload = {"marker": marker, "file": "scorer.py", "function": function, "arguments": arguments}
    files = {"scorer.py": source, "runner.py": _RUNNER,
             "input.json": json.dumps(payload, ensure_ascii=False, default=str)}
    try:
        result = oneshot.run(["python", "runner.py"], files, limits)
    except EngineError as exc:
        return error(f"python: the scorer could not run: {exc}", KIND)
    details = {"isolation": result.isolation, "exit_code": result.exit_code}
    line = next((ln[len(marker):] for ln in result.stdout.splitlines() if ln.startswith(marker)), None)
    said = _output(result)
    if line is None or len(line) > _MAX_RESULT:
        return _error(f"python: {file}:{function} gave no result ({result.describe()}){said}", details)
    try:
        data = json.loads(line)
    except ValueError:
        return _error(f"python: {file}:{function} gave an unreadable result{said}", details)
    if "raised" in data:
        raised = _last_line(str(data["raised"]))
        if raised == "MemoryError" or raised.startswith("MemoryError:"):
            return _error(f"python: {file}:{function} used more than {limits.memory_mb} MiB of memory (its "
                          f"`memory_mb` sets the limit){said}", details)
        return _error(f"python: {file}:{function} raised {raised}{said}", details)
    if "bad" in data:
        return _error(f"python: {file}:{function} returned {data['bad']}; return True/False, a score in [0, 1] "
                      "or {'score': s, 'reason': '...'}", details)
    value = data.get("score")
    if not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        return _error(f"python: {file}:{function} returned score {short(value)}; a score is between 0 and 1",
                      details)
    reason = data.get("reason") or f"{function} scored {float(value):g}"
    passed = data.get("passed")
    passed = float(value) >= 1.0 if not isinstance(passed, bool) else passed   # the scorer may decide the pass
    if not passed:
        reason += said
    return Verdict(score=float(value), passed=passed, reason=str(reason)[:1000], kind=KIND, details=details)


def _source(path: Path) -> str:
    """The scorer file's text: a regular file of at most `_MAX_FILE` bytes, in UTF-8.

    Raises:
        InputFileError: naming the file, what is wrong and the fix.
    """
    what = "the scorer file"
    try:
        data = read_capped(path, what, _MAX_FILE)
    except InputFileError as exc:
        if exc.problem == "no such file":
            raise InputFileError(what, path, "does not exist; put it beside the suite") from None
        if exc.problem.startswith("not a regular file"):   # its kind, then the scorer's own fix
            raise InputFileError(what, path, exc.problem.split(";")[0] + "; a scorer is a regular .py file beside "
                                 "the suite") from None
        raise
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(what, path, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _output(result: oneshot.RunResult) -> str:
    """The scorer's own prints (it writes both to stderr), for a reason that is not a pass."""
    text = result.stderr.strip()
    return f" [output: {text[-400:]}]" if text else ""


def _last_line(text: str) -> str:
    """The exception's own line (`KeyError: 'city'`), the traceback's last."""
    lines = text.strip().splitlines()
    return lines[-1].strip() if lines else "an exception"


def _error(reason: str, details: dict[str, Any]) -> Verdict:
    return Verdict(score=0.0, passed=False, reason=reason[:1500], kind=KIND, error=True, details=details)


def _check(value: Any, spec: Mapping[str, Any], site: CheckSite) -> None:
    """When the suite loads: the file exists beside the suite, parses, and defines the function."""
    if not isinstance(value, Mapping) or not isinstance(value.get("file"), str) or "{{" in value["file"]:
        return
    try:
        file = _relative(value["file"])
    except EvaluatorConfigError as exc:
        site.error((KIND, "file"), str(exc))
        return
    path = site.suite_dir / file
    function = str(value.get("function") or "score")
    try:
        tree = ast.parse(_source(path), filename=str(path))
    except InputFileError as exc:
        site.error((KIND, "file"), str(exc))
        return
    except SyntaxError as exc:
        site.error((KIND, "file"), f"{path}:{exc.lineno}: {exc.msg}; fix the scorer file")
        return
    defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if function not in defined:
        site.error((KIND, "function") if "function" in value else (KIND, "file"),
                   f"{path} defines no function {function!r} (it defines: {', '.join(defined) or 'none'}); "
                   "write `def " + function + "(answer, transcript, golden, case):` or name the function")


PYTHON = Kind(
    "A Python function beside the suite scores the answer, run in the sandbox: "
    "score(answer=, transcript=, golden=, case=) returns a bool, a score in [0, 1] or {score, reason, passed}.",
    {"type": "object", "additionalProperties": False, "required": ["file"], "properties": {
        "file": {"type": "string", "minLength": 1, "pattern": r"\.py$", "description": "A .py file beside "
                 "the suite.", "examples": ["scorers.py"]},
        "function": {"type": "string", "minLength": 1, "description": "The function to call (default `score`).",
                     "examples": ["score"]},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 600,
                      "description": "Time limit per call, seconds (default the sandbox's)."},
        "memory_mb": {"type": "integer", "minimum": 16, "description": "Memory limit, MB."}}},
    {}, ({"python": {"file": "scorers.py", "function": "score"}},), build=python_, check=_check, blocking=True)
