"""`workspace_check`: a hidden command run in the final workspace of a workspace test, after the loop.

    workspace_check:
      command: python3 -m unittest discover -s tests -t .
      files: {tests: checks/mathpkg-tests}      # workspace path <- a file or folder beside the suite
      timeout_s: 60

The command runs (bash -c) in the attempt's workspace under the exec sandbox, with the workspace's
limits and network setting (`timeout_s` here overrides the time limit). It is never offered or shown to
the model: it runs once the conversation is over, in an environment the model cannot shape
(`Workspace.check`): `files` are copied in from the suite over whatever the model left at those paths,
HOME and TMPDIR are a folder of its own, Python gets neither the user site folder nor the current folder
on sys.path (a check that imports the model's code names the folder: `-t .`, `sys.path.append(".")`),
pytest reads no conftest.py. Pass = exit code 0. Partial credit: the last line of
stdout that is a JSON object with a numeric `score` (0..1) gives the score; the check passes only with exit
code 0 and a full score. A test without a workspace, or a stored row rescored later (its workspace is gone),
gets an error verdict, not a fail.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from engine.errors import EvaluatorConfigError, HarnessError
from engine.evaluators.base import Kind, Scorer, ScoringContext, error
from engine.model import Answer, Verdict

__all__ = ["WORKSPACE_CHECK", "score_line", "workspace_check"]

KIND = "workspace_check"


def workspace_check(value: Any, options: Mapping[str, Any]) -> Scorer:
    """Options bound once: the command and its time limit; the scorer only runs it."""
    if isinstance(value, str):
        value = {"command": value}
    if not isinstance(value, Mapping) or not isinstance(value.get("command"), str) or not value["command"].strip():
        raise EvaluatorConfigError("workspace_check takes {command: \"...\"}: a shell command run in the final "
                                   "workspace (exit 0 = pass)", kind=KIND)
    unknown = sorted(set(value) - {"command", "timeout_s", "files"})
    if unknown:
        raise EvaluatorConfigError(f"workspace_check: unknown option(s) {', '.join(map(str, unknown))}; allowed: "
                                   "command, files, timeout_s", kind=KIND, option=str(unknown[0]))
    command = str(value["command"])
    files = _check_files(value.get("files") or {})
    timeout = value.get("timeout_s")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout <= 3600):
        raise EvaluatorConfigError("workspace_check `timeout_s` is seconds, above 0 and at most 3600", kind=KIND)

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        workspace = ctx.workspace
        if workspace is None:
            return error("workspace_check needs the attempt's workspace: the test has no `workspace:`, or this "
                         "is a stored row scored again after its workspace was deleted", KIND)
        sources = {rel: Path(ctx.test.suite_dir, source) for rel, source in files.items()}
        missing = [str(path) for path in sources.values() if not path.exists()]
        if missing:
            return error(f"workspace_check: the check file {missing[0]} does not exist; `files` maps a workspace "
                         "path to a file or folder next to the suite", KIND)
        try:
            result = workspace.check(command, timeout_s=float(timeout) if timeout is not None else None,
                                     files=sources)
        except HarnessError as exc:
            return error(f"the check could not run: {exc}", KIND)
        partial = score_line(result.stdout)
        value_ = (1.0 if result.ok else 0.0) if partial is None else partial
        passed = result.ok and value_ >= 1.0
        tail = (result.stderr or result.stdout).strip()[-300:]
        reason = (f"the check {'passed' if result.ok else 'failed'}: {result.describe()}"
                  + (f", score {partial:g}" if partial is not None else "") + (f": {tail}" if tail and not passed
                                                                               else ""))
        return Verdict(score=value_, passed=passed, reason=reason, kind=KIND,
                       details={"exit_code": result.exit_code, "isolation": result.isolation})

    return score


def _check_files(raw: Any) -> dict[str, str]:
    """`files:` as {workspace path: suite path}, both relative and inside their folders."""
    if not isinstance(raw, Mapping):
        raise EvaluatorConfigError("workspace_check `files` maps a workspace path to a file or folder next to the "
                                   "suite, e.g. {tests: checks/tests}", kind=KIND, option="files")
    out: dict[str, str] = {}
    for rel, source in raw.items():
        for name in (rel, source):
            pure = PurePosixPath(str(name))
            if (not isinstance(name, str) or not name.strip() or pure.is_absolute() or ".." in pure.parts
                    or pure.as_posix() == "."):
                raise EvaluatorConfigError(f"workspace_check `files`: {name!r} must be a relative path (no leading "
                                           "/, no ..): the key inside the workspace, the value next to the suite",
                                           kind=KIND, option="files")
        out[PurePosixPath(rel).as_posix()] = str(source)
    return out


def score_line(stdout: str) -> float | None:
    """The score of the last stdout line that is `{"score": x}` JSON (clamped to 0..1), or None."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        found = data.get("score") if isinstance(data, dict) else None
        if isinstance(found, (int, float)) and not isinstance(found, bool) and math.isfinite(found):
            return min(1.0, max(0.0, float(found)))
    return None


WORKSPACE_CHECK = Kind(
    "Workspace tests: a hidden shell command run in the final workspace; exit 0 passes, a JSON line "
    "{\"score\": x} on stdout gives partial credit.",
    {"type": "object", "additionalProperties": False, "required": ["command"], "properties": {
        "command": {"type": "string", "minLength": 1, "description": "Run by bash -c in the final workspace.",
                    "examples": ["python3 -m pytest -q"]},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600,
                      "description": "Its time limit (default: the workspace's)."},
        "files": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1},
                  "description": "Workspace path -> a file or folder next to the suite, copied in after the "
                                 "model is done, over whatever the model left there.",
                  "examples": [{"tests": "checks/tests"}]}}},
    {}, ({"workspace_check": {"command": "python3 -m pytest -q"}},), build=workspace_check, blocking=True)
