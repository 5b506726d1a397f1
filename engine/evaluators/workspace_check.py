"""`workspace_check`: a hidden check run in the final workspace of a workspace test, after the loop.

    workspace_check: {pytest: tests/}                  # the task's tests, judged from pytest's JUnit report
    workspace_check:
      pytest: [tests/test_api.py, tests/test_cli.py]   # paths or node ids, relative to the workspace
      args: ["-k", "not slow"]                         # more pytest options
      allow_skips: true                                # a skipped test does not fail the check
      files: {tests: checks/mathpkg-tests}             # workspace path <- a file or folder beside the suite
      env: {TEST_DIR: /app/tests}
      timeout_s: 60
    workspace_check:
      command: python3 -c 'import greet; assert greet.greet() == "hello"'

It runs once the conversation is over, is never offered or shown to the model, and judges in an
environment the model cannot shape (`Workspace.check`, engine.workspace.check): `files` are copied in from
the suite over whatever the model left at those paths, HOME and TMPDIR are a folder of its own, Python
finds the workspace's modules after the standard library and the check's packages, and any pytest it runs
reads the engine's configuration only. `pytest` passes when the report names at least one test and none
failed, errored or was skipped (unless `allow_skips`); its score is the share of tests that passed.
`command` passes when it exits 0 and the engine's wrapper reached its end (no Python process of the
command ended early, e.g. by `os._exit(0)` in the model's code); the last stdout line that is a JSON object
with a numeric `score` (0..1) gives partial credit, and the check passes only with a full score. A test
without a workspace, or a stored row rescored later (its workspace is gone), gets an error verdict.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

from engine.errors import EvaluatorConfigError, HarnessError
from engine.evaluators.base import Kind, error
from engine.model.answer import Answer
from engine.model.scoring import Scorer, ScoringContext
from engine.model.verdict import Verdict
from engine.workspace.check import HiddenCheck
from engine.workspace.workspace import Workspace

__all__ = ["WORKSPACE_CHECK", "score_line", "workspace_check"]

KIND = "workspace_check"
_OPTIONS = ("command", "pytest", "args", "allow_skips", "env", "files", "timeout_s")
# pytest options the engine sets itself for a `pytest:` check: a suite giving them would undo what the check
# guarantees (its own configuration, rootdir and report; the workspace importable only after everything else)
_OWNED_OPTIONS = ("-c", "--config-file", "--rootdir", "--junitxml", "--junit-xml", "--import-mode", "--co",
                  "--collect-only", "--confcutdir")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_OWNED_ENV = ("PATH", "HOME", "TMPDIR", "PWD", "LANG", "LC_ALL")
_OWNED_ENV_PREFIXES = ("PYTHON", "PYTEST_", "ENGINE_", "LD_")


def workspace_check(value: Any, options: Mapping[str, Any]) -> Scorer:
    """Options bound once: what the check runs and its time limit; the scorer only runs it."""
    if isinstance(value, str):
        value = {"command": value}
    if not isinstance(value, Mapping) or ("command" in value) == ("pytest" in value):
        raise EvaluatorConfigError("workspace_check takes {pytest: tests/} (pytest runs those tests) or {command: "
                                   "\"...\"} (a shell command, exit 0 = pass): one of the two", kind=KIND)
    unknown = sorted(set(map(str, value)) - set(_OPTIONS))
    if unknown:
        raise EvaluatorConfigError(f"workspace_check: unknown option(s) {', '.join(unknown)}; allowed: "
                                   f"{', '.join(_OPTIONS)}", kind=KIND, option=unknown[0])
    check = _hidden_check(value)
    files = _check_files(value.get("files") or {})
    timeout = value.get("timeout_s")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout <= 3600):
        raise EvaluatorConfigError("workspace_check `timeout_s` is seconds, above 0 and at most 3600", kind=KIND)

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        workspace = ctx.workspace
        if not isinstance(workspace, Workspace):
            return error("workspace_check needs the attempt's workspace: the test has no `workspace:`, or this "
                         "is a stored row scored again after its workspace was deleted", KIND)
        sources = {rel: Path(ctx.test.suite_dir, source) for rel, source in files.items()}
        missing = [str(path) for path in sources.values() if not path.exists()]
        if missing:
            return error(f"workspace_check: the check file {missing[0]} does not exist; `files` maps a workspace "
                         "path to a file or folder next to the suite", KIND)
        try:
            result = workspace.check(check, timeout_s=float(timeout) if timeout is not None else None,
                                     files=sources)
        except HarnessError as exc:
            return error(f"the check could not run: {exc}", KIND)
        partial = score_line(result.run.stdout) if check.command is not None and result.ended else None
        value_ = result.score if result.score is not None else (1.0 if result.passed else 0.0)
        if partial is not None:
            value_ = partial
        passed = result.passed and value_ >= 1.0
        reason = (f"the check {'passed' if result.passed else 'failed'}: {result.reason}"
                  + (f", score {partial:g}" if partial is not None else ""))
        return Verdict(score=value_, passed=passed, reason=reason, kind=KIND,
                       details={**result.details, "isolation": result.run.isolation})

    return score


def _hidden_check(value: Mapping[str, Any]) -> HiddenCheck:
    """The `command` or `pytest` form, with its options checked."""
    env = _env(value.get("env") or {})
    if "command" in value:
        command = value["command"]
        if not isinstance(command, str) or not command.strip():
            raise EvaluatorConfigError("workspace_check `command` is a shell command run in the final workspace "
                                       "(exit 0 = pass)", kind=KIND, option="command")
        for option in ("args", "allow_skips"):
            if option in value:
                raise EvaluatorConfigError(f"workspace_check `{option}` goes with `pytest:`, not `command:`",
                                           kind=KIND, option=option)
        return HiddenCheck(command=command, env=env)
    raw = value["pytest"]
    paths = [raw] if isinstance(raw, str) else raw
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and _test_path(p) for p in paths):
        raise EvaluatorConfigError("workspace_check `pytest` is a path relative to the workspace, or a list of them "
                                   "(a folder, a file, or a node id such as tests/test_a.py::test_x; no leading / "
                                   "or -, no ..)", kind=KIND, option="pytest")
    args = value.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise EvaluatorConfigError("workspace_check `args` is a list of pytest options, e.g. [\"-k\", \"not "
                                   "slow\"]", kind=KIND, option="args")
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in _OWNED_OPTIONS or (arg.startswith("-c") and not arg.startswith("--")):
            raise EvaluatorConfigError(f"workspace_check `args`: {arg!r} is set by the engine for a pytest check "
                                       "(its own configuration file, rootdir, report and import mode, so nothing of "
                                       "the workspace's decides the verdict); leave it out", kind=KIND,
                                       option="args")
    allow_skips = value.get("allow_skips", False)
    if not isinstance(allow_skips, bool):
        raise EvaluatorConfigError("workspace_check `allow_skips` is true or false", kind=KIND, option="allow_skips")
    return HiddenCheck(pytest=tuple(paths), args=tuple(args), allow_skips=allow_skips, env=env)


def _test_path(path: str) -> bool:
    file_part = path.split("::", 1)[0]
    pure = PurePosixPath(file_part)
    return (bool(file_part.strip()) and not path.startswith(("-", "~")) and not pure.is_absolute()
            and ".." not in pure.parts and "\0" not in path)


def _env(raw: Any) -> Mapping[str, str]:
    """`env:` as {NAME: text}, refusing the names the check's environment is built from."""
    if not isinstance(raw, Mapping) or not all(isinstance(v, str) for v in raw.values()):
        raise EvaluatorConfigError("workspace_check `env` maps a variable name to its text (quote numbers), e.g. "
                                   "{TEST_DIR: /app/tests}", kind=KIND, option="env")
    for name in raw:
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise EvaluatorConfigError(f"workspace_check `env`: {name!r} is not a variable name", kind=KIND,
                                       option="env")
        if name in _OWNED_ENV or name.startswith(_OWNED_ENV_PREFIXES):
            raise EvaluatorConfigError(f"workspace_check `env`: {name} is set by the engine for a hidden check "
                                       "(PATH, HOME, PYTHON*, PYTEST_*...: so nothing of the workspace's shapes "
                                       "how it runs); leave it out", kind=KIND, option="env")
    return MappingProxyType(dict(raw))


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


_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}}

WORKSPACE_CHECK = Kind(
    "Workspace tests: a hidden check run in the final workspace: `pytest: tests/` (passes when pytest's report "
    "names a test and none failed, errored or was skipped) or a shell `command` (exit 0 passes; a JSON line "
    "{\"score\": x} on stdout gives partial credit).",
    {"type": "object", "additionalProperties": False,
     "oneOf": [{"required": ["command"]}, {"required": ["pytest"]}], "properties": {
         "pytest": {"anyOf": [{"type": "string", "minLength": 1}, {**_STRINGS, "minItems": 1}],
                    "description": "The tests pytest runs (paths or node ids relative to the workspace), with the "
                                   "engine's configuration only; the verdict is read from its JUnit report.",
                    "examples": ["tests/", ["tests/test_api.py", "tests/test_cli.py::test_help"]]},
         "args": {**_STRINGS, "description": "More pytest options, after the engine's (not -c, --rootdir, "
                                             "--junitxml, --import-mode).", "examples": [["-k", "not slow"]]},
         "allow_skips": {"type": "boolean", "description": "A skipped or xfail test does not fail a pytest check "
                                                          "(default false: it does)."},
         "command": {"type": "string", "minLength": 1, "description": "Run by bash -c in the final workspace; "
                                                                      "exit 0 passes.",
                     "examples": ["python3 -c 'import greet; assert greet.greet() == \"hello\"'"]},
         "env": {"type": "object", "additionalProperties": {"type": "string"},
                 "description": "More environment variables for the check (not PATH, HOME, PYTHON*, PYTEST_*).",
                 "examples": [{"TEST_DIR": "/app/tests"}]},
         "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600,
                       "description": "Its time limit (default: the workspace's)."},
         "files": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1},
                   "description": "Workspace path -> a file or folder next to the suite, copied in after the "
                                  "model is done, over whatever the model left there.",
                   "examples": [{"tests": "checks/tests"}]}}},
    {}, ({"workspace_check": {"pytest": "tests/", "files": {"tests": "checks/tests"}}},
         {"workspace_check": {"command": "grep -q hello hello.txt"}}), build=workspace_check, blocking=True)
