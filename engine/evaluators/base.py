"""What every evaluator kind shares: the registry entry, verdict and option helpers.

A kind is one `Kind` entry in `engine.evaluators.registry.KINDS` (a visible dict, as jsonschema keeps its
keywords) and owns everything about itself:

- `schema`: the JSON Schema of the value under its key and of its own options; schemas/suite.schema.json
  is generated from these fragments (engine/suite/schema_source.py);
- `check(value, spec, site)`: what a schema cannot say, checked when the suite loads (a regex compiles,
  a harness exists), reported at FILE:LINE:COL through `site.error`;
- `build(value, options) -> Scorer`: binds the options once, typed and checked (raising
  `EvaluatorConfigError` naming the option and the fix); the scorer it returns only scores.

A scorer is `scorer(answer, ctx) -> Verdict` (`ctx`: engine.model.scoring's ScoringContext), or an `async
def` returning one (a judge awaiting a model call). It never sees `not`, weights or thresholds
(engine.evaluators.compose owns those), returns a Verdict and never raises to signal a failure; one that
raises becomes an *error* verdict, so a crash never stops a run. `blocking=True` marks a scorer that
blocks (exec runs programs): the runner scores it in a worker thread, off the event loop. `bounded=True`
marks a scorer whose time is a small constant per character of the answer (C-level string work, RE2): on an
answer of up to `INLINE_CHARS` it scores where the call was made; every other synchronous scorer runs in a
scoring process under its time limit (engine.evaluators.scoring_pool).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from engine.base.words import short
from engine.errors import EvaluatorConfigError
from engine.evaluators.judge_prompt import JudgePrompt
from engine.model.scoring import Scorer
from engine.model.verdict import Verdict

__all__ = [
    "COMMON_KEYS",
    "COMMON_OPTIONS",
    "INLINE_CHARS",
    "NO_OPTIONS",
    "REGEX_FLAGS",
    "CheckSite",
    "CompileOptions",
    "Kind",
    "check_regex",
    "error",
    "regex_flags",
    "short",
    "verdict",
]

# The options every node may carry beside its kind; composition (compose.py) is the only reader.
COMMON_OPTIONS: dict[str, Any] = {
    "weight": {"type": "number", "minimum": 0, "description": "Weight of this check inside its parent "
               "`all` (default 1). 0 = reported but not counted.", "examples": [1, 3, 0]},
    "threshold": {"type": "number", "minimum": 0, "maximum": 1, "description": "Score (0..1) this node needs "
                  "to pass; without it a leaf passes only with a full score.", "examples": [0.5]},
    "name": {"type": "string", "description": "A label shown in results for this check.",
             "examples": ["mentions the city"]},
    "must": {"type": "boolean", "description": "When true, the parent fails whenever this check fails, "
             "whatever the other scores."},
    "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600, "description": "The longest this "
                  "check may take on one answer, seconds (default 10); past it the verdict is an error naming "
                  "the limit. Not for exec, python and workspace_check (their own `timeout_s` limits their "
                  "program) nor judge and similar (the judge model's `timeout_s` limits its call).",
                  "examples": [30]},
    "memory_mb": {"type": "integer", "minimum": 16, "maximum": 1024 * 1024, "description": "The most memory this "
                  "check may take on one answer, MiB (default 1024); past it the verdict is an error naming the "
                  "limit. Not for exec and python (their own `memory_mb` limits their program), workspace_check "
                  "(the `workspace:` block's) nor judge and similar.", "examples": [4096]},
}
#: The longest answer (characters, tool call arguments included) a `bounded` scorer scores inline.
INLINE_CHARS = 64 * 1024
COMMON_KEYS: tuple[str, ...] = tuple(COMMON_OPTIONS)

# Regex flag letters, for `regex: {flags: ims}` (the schema allows exactly these letters).
REGEX_FLAGS: dict[str, re.RegexFlag] = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}


Build = Callable[[Any, Mapping[str, Any]], Scorer]


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """What a suite sets for every evaluator it compiles, beside their specs.

    Args:
        judge_prompt: The suite's `judge_prompt:` for its judges, or None for the shipped prompt.
    """

    judge_prompt: JudgePrompt | None = None


NO_OPTIONS = CompileOptions()


@dataclass(frozen=True, slots=True)
class CheckSite:
    """Where a load-time check reports: problems go to FILE:LINE:COL of a path under the node.

    Args:
        error: Called with (a path relative to the node, e.g. ("regex",) or ("pattern",), the message).
        suite_dir: The folder of the suite file (harness files resolve inside it).
        warning: Called like `error`, for a problem that does not stop the suite (shown at the key).
    """

    error: Callable[[tuple[Any, ...], str], None]
    suite_dir: Path
    warning: Callable[[tuple[Any, ...], str], None] = lambda where, message: None


Check = Callable[[Any, Mapping[str, Any], CheckSite], None]


@dataclass(frozen=True, slots=True)
class Kind:
    """One registry entry: everything about one evaluator kind.

    Args:
        description: One line for the schema and the docs.
        value: JSON Schema of the value under the kind's key.
        options: JSON Schemas of the kind's own options beside the key ({option: schema}).
        examples: Example nodes for the schema.
        build: (value, options) -> scorer; None for compositions (compose.py scores them).
        check: Load-time checks beyond the schema, or None.
        blocking: The scorer blocks (runs programs): score it in a worker thread.
        bounded: The scorer's time is a small constant per character of the answer: on a short answer it
            scores inline, with no process between (see the module docstring).
        child: The value is one evaluator (`final_answer`): compile_spec compiles it with the test's
            variables and `build` receives the compiled child Node instead of the rendered value.
        build_in_suite: For a kind whose scorer depends on what the suite sets (the judge, on its judge
            prompt): the builder to use under the suite's CompileOptions; `build` is the one under none.
        calls_model: The scorer awaits a model call through `ScoringContext.caller` and names the model it asks
            (`judge`, `similar`): a run resolves those models against the models file before any call.
    """

    description: str
    value: Mapping[str, Any]
    options: Mapping[str, Any] = field(default_factory=dict)
    examples: tuple[Any, ...] = ()
    build: Build | None = None
    check: Check | None = None
    blocking: bool = False
    child: bool = False
    bounded: bool = False
    build_in_suite: Callable[[CompileOptions], Build] | None = None
    calls_model: bool = False


def verdict(score: float, reason: str, kind: str = "", **details: Any) -> Verdict:
    """A leaf verdict: passed means a full score, the parent's threshold may say otherwise."""
    score = min(1.0, max(0.0, float(score)))
    return Verdict(score=score, passed=score >= 1.0, reason=reason, kind=kind, details=details)


def error(reason: str, kind: str = "") -> Verdict:
    """An error verdict: the evaluator could not judge. Kept apart from a fail."""
    return Verdict(score=0.0, passed=False, reason=reason, kind=kind, error=True)


def regex_flags(letters: str, kind: str) -> int:
    """The `re` flags for letters from `imsx`.

    Raises:
        EvaluatorConfigError: for any other letter.
    """
    bits = 0
    for letter in letters:
        if letter not in REGEX_FLAGS:
            raise EvaluatorConfigError(f"{kind}: unknown flag {letter!r}; use letters from 'imsx'", kind=kind,
                                       option="flags")
        bits |= REGEX_FLAGS[letter]
    return bits


@lru_cache(maxsize=4096)
def check_regex(pattern: str, flags: str = "") -> str | None:
    """None when `pattern` compiles as a Python regex, else the reason it does not (unknown flags ignored)."""
    bits = 0
    for letter in flags:
        bits |= REGEX_FLAGS.get(letter, 0)
    try:
        re.compile(pattern, bits)
    except re.error as exc:
        return str(exc)
    return None


def option_choice(options: Mapping[str, Any], name: str, choices: tuple[str, ...], kind: str) -> str:
    """A string option that must be one of `choices` (the first is the default)."""
    value = str(options.get(name, choices[0]))
    if value not in choices:
        raise EvaluatorConfigError(f"{kind}: {name} must be {' or '.join(map(repr, choices))}, got {short(value)}",
                                   kind=kind, option=name)
    return value
