"""Record evaluators: checks over what the run recorded of a test (served model, finish reason, usage, times,
cost), not over what the model said.

    no_fallback      the model asked for answered (served model)
    not_truncated    no reply was cut short by the token limit
    usage_reported   the server reported token counts
    latency_s / ttft_s / tokens / cost      budgets: {min: .., max: ..} (ttft_s, tokens: `kind:` too)

The run facts come from `ScoringContext.record`, which the runner and `engine rescore` build from the results row
(`engine.results.rows.record_of`); where nothing ran (the golden self-check) there is no record, and these kinds,
listed in `RUN_ONLY`, give a neutral verdict saying so (`engine validate` names them). How a conversation went
(outcome, counts, tool statuses) is conversation.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from engine.errors import EvaluatorConfigError
from engine.evaluators.base import Kind, error, option_choice, short, verdict
from engine.evaluators.ranges import Range, bounds_schema, parse_range
from engine.model.answer import Answer
from engine.model.scoring import Record, Scorer, ScoringContext
from engine.model.verdict import Verdict

__all__ = ["COST", "LATENCY_S", "NOT_TRUNCATED", "NO_FALLBACK", "RUN_ONLY", "TOKENS", "TTFT_S", "USAGE_REPORTED"]

#: Kinds that read what a run records: the golden self-check cannot judge them.
RUN_ONLY: frozenset[str] = frozenset({"no_fallback", "not_truncated", "usage_reported", "latency_s", "ttft_s",
                                      "tokens", "cost"})


def _unmeasured(kind: str) -> Verdict:
    """The verdict of a run-only kind scored without a run: neutral, and saying why."""
    return verdict(1.0, f"{kind} cannot be checked without a run: it reads what the run records", kind,
                   unchecked="needs a run")


def _on_record(kind: str, judge: Callable[[Record], Verdict]) -> Scorer:
    """A scorer giving `judge`'s verdict on the run's record, and the neutral one where nothing ran."""
    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        return _unmeasured(kind) if ctx.record is None else judge(ctx.record)

    return score


def _run_flag(kind: str, judge: Callable[[Record], Verdict]) -> Callable[[Any, Mapping[str, Any]], Scorer]:
    """The builder of a `{kind: true}` check scored by `judge` on the run's record."""
    def build(value: Any, options: Mapping[str, Any]) -> Scorer:
        if value is not True:
            raise EvaluatorConfigError(f"{kind} takes `true` (write {{{kind}: true}}), got {short(value)}",
                                       kind=kind)
        return _on_record(kind, judge)

    return build


# ------------------------------------------------------------------------------------------ run flags

def _served(record: Record) -> Verdict:
    """The served model is the one asked for. Names compare as `engine.results.rows.is_fallback` does:
    without case; a provider prefix (`openai/gpt-4o`), a dated snapshot of the asked id
    (`gpt-4o-mini-2024-07-18`, `-20240718`, `-0718`, Gemini's `-001`), or a dated model answering a `-latest`
    alias is the same model."""
    kind = "no_fallback"
    if record.fallback is None:
        return error("no_fallback: the server did not say which model answered (no `model` in its reply), "
                     "so a fallback cannot be told; drop this check for this server", kind)
    if record.fallback:
        return verdict(0.0, f"answered by {record.served_model!r}, not the model asked for "
                            f"{record.asked_model!r}", kind)
    return verdict(1.0, f"answered by {record.served_model!r} (asked {record.asked_model!r})", kind)


def _ended(record: Record) -> Verdict:
    """No reply was cut short: finish reason `length`, or a stream that ended early."""
    kind = "not_truncated"
    if record.truncated or record.finish_reason == "length":
        return verdict(0.0, f"the reply was cut short (finish reason {record.finish_reason!r}); raise the "
                            "test's max_tokens or ask for a shorter answer", kind)
    return verdict(1.0, f"the reply ended by itself (finish reason {record.finish_reason!r})", kind)


def _usage(record: Record) -> Verdict:
    """The server reported prompt and completion token counts (for every call of a conversation)."""
    kind = "usage_reported"
    missing = [name for name, got in (("prompt", record.prompt_tokens), ("completion", record.completion_tokens))
               if got is None]
    if missing:
        return verdict(0.0, f"the server reported no {' and no '.join(missing)} token count", kind)
    return verdict(1.0, f"usage reported: {record.prompt_tokens} prompt + {record.completion_tokens} "
                        "completion tokens", kind)


no_fallback = _run_flag("no_fallback", _served)
not_truncated = _run_flag("not_truncated", _ended)
usage_reported = _run_flag("usage_reported", _usage)


def _seconds(value: float) -> str:
    return f"{value:.3g} s"


def _dollars(value: float) -> str:
    return f"${value:.6g}"


def _budget(kind: str, label: str, rng: Range, unit: Callable[[float], str],
            read: Callable[[Record], tuple[float | None, str]]) -> Scorer:
    """A scorer holding the recorded figure `read` gives (or, for None, why there is none) within `rng`."""
    def judge(record: Record) -> Verdict:
        got, missing = read(record)
        if got is None:
            return error(f"{kind}: {missing}", kind)
        if rng.holds(got):
            return verdict(1.0, f"{label} {unit(got)}, {rng.words(unit)} allowed", kind)
        return verdict(0.0, f"{label} {unit(got)}, outside the budget: {rng.words(unit)}", kind)

    return _on_record(kind, judge)


_CACHED = "the response cache answered, so nothing was timed; run with --no-cache to time it"


def latency_s(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The call's latency (an agent test: the whole conversation) within `{min, max}` seconds."""
    rng = parse_range("latency_s", value, (), exact=False, whole=False)

    def read(record: Record) -> tuple[float | None, str]:
        if record.cached:
            return None, _CACHED
        return record.latency_s, "the run recorded no latency for this call"

    return _budget("latency_s", "latency", rng, _seconds, read)


_TTFT_KINDS = ("visible", "provider")


def ttft_s(value: Any, options: Mapping[str, Any]) -> Scorer:
    """Time to first token within `{min, max}` seconds: `kind: visible` (default; the first visible token or
    tool call, streamed replies only) or `provider` (the reply's first byte). An agent test: its first call."""
    rng = parse_range("ttft_s", value, ("kind",), exact=False, whole=False)
    which = option_choice(value, "kind", _TTFT_KINDS, "ttft_s")

    def read(record: Record) -> tuple[float | None, str]:
        if record.cached:
            return None, _CACHED
        if which == "visible":
            return record.ttft_visible_s, ("no visible first token was timed: the reply was not streamed; set "
                                           "`stream: true` for the model, or use `kind: provider`")
        return record.ttft_provider_s, "the run recorded no first byte for this call"

    return _budget("ttft_s", f"{which} TTFT", rng, _seconds, read)


_TOKEN_KINDS = ("total", "completion", "prompt")


def tokens(value: Any, options: Mapping[str, Any]) -> Scorer:
    """Tokens used within `{min, max}`: `kind: total` (default: prompt + completion), `prompt` or
    `completion`; an agent test counts every call."""
    rng = parse_range("tokens", value, ("kind",), exact=False, whole=True)
    which = option_choice(value, "kind", _TOKEN_KINDS, "tokens")

    def read(record: Record) -> tuple[float | None, str]:
        prompt, completion = record.prompt_tokens, record.completion_tokens
        got = {"prompt": prompt, "completion": completion,
               "total": None if prompt is None or completion is None else prompt + completion}[which]
        return (None if got is None else float(got)), ("the server reported no token counts, so the budget cannot "
                                                       "be told; use {usage_reported: true} to fail such replies")

    return _budget("tokens", f"{which} tokens:", rng, lambda n: f"{n:g}", read)


def cost(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The test's priced cost within `{min, max}` dollars (an agent test: every call)."""
    rng = parse_range("cost", value, (), exact=False, whole=False)

    def read(record: Record) -> tuple[float | None, str]:
        return record.cost, ("the call has no price: give the model `price: {input: ..., output: ...}` (dollars "
                             "per million tokens) in the models file, and a server that reports usage")

    return _budget("cost", "cost", rng, _dollars, read)


# ------------------------------------------------------------------------------------------ registry entries

_TRUE = {"const": True}
NO_FALLBACK = Kind("The model asked for answered (its dated snapshot or a provider prefix counts as the same).",
                   _TRUE, {}, ({"no_fallback": True},), build=no_fallback, bounded=True)
NOT_TRUNCATED = Kind("No reply was cut short by the token limit.", _TRUE, {}, ({"not_truncated": True},),
                     build=not_truncated, bounded=True)
USAGE_REPORTED = Kind("The server reported token counts.", _TRUE, {}, ({"usage_reported": True},),
                      build=usage_reported, bounded=True)
LATENCY_S = Kind("The call's latency in seconds (agent: the whole conversation) within min/max.",
                 bounds_schema(False, False), {}, ({"latency_s": {"max": 2}},), build=latency_s, bounded=True)
TTFT_S = Kind("Time to first token in seconds within min/max; kind: visible (default) or provider.",
              bounds_schema(False, False, kind={"enum": list(_TTFT_KINDS), "description": "visible: the first visible "
                                          "token or tool call (streamed); provider: the reply's first byte."}),
              {}, ({"ttft_s": {"max": 0.5, "kind": "visible"}},), build=ttft_s, bounded=True)
TOKENS = Kind("Tokens used (agent: every call) within min/max; kind: total (default), prompt or completion.",
              bounds_schema(True, False, kind={"enum": list(_TOKEN_KINDS), "description": "total (default): prompt + "
                                         "completion; or prompt, or completion."}),
              {}, ({"tokens": {"max": 800}},), build=tokens, bounded=True)
COST = Kind("The priced cost in dollars (agent: every call) within min/max.", bounds_schema(False, False), {},
            ({"cost": {"max": 0.01}},), build=cost, bounded=True)
