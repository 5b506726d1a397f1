"""One results row (a plain dict keyed by `schema.COLUMN_NAMES`; a single-turn row leaves out the columns
null on every one, `SINGLE_TURN_NULLS`) from a call and its verdict.

Rows travel as dicts of JSON-friendly values (timestamps as integer microseconds since the epoch) so
the journal can store them as JSON text and the writer can hand a batch straight to
`pyarrow.Table.from_pylist(rows, schema=SCHEMA)`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.evaluators.markers import is_unscored
from engine.model.model_config import ModelConfig, cost_of
from engine.model.scoring import Record
from engine.model.test import Test, TestKey
from engine.model.transcript import Transcript
from engine.model.verdict import Verdict
from engine.results.version import SCHEMA_VERSION

if TYPE_CHECKING:
    from engine.client.request import PreparedRequest
    from engine.client.response import CallResult

#: The agent columns: null on a single-turn row.
AGENT_COLUMNS = ("transcript", "ledger", "tool_events", "turns", "prose_turns", "tool_calls_made", "invented_tools",
                 "bad_tool_args", "outcome", "state",
                 # workspace tests only (engine/run/conversation.py fills them)
                 "failed_commands", "refused_paths", "workspace_files", "workspace_diff")
_NO_AGENT: dict[str, Any] = dict.fromkeys(AGENT_COLUMNS)
#: The judge columns summed over a row's model-graded nodes (`judge_columns`).
JUDGE_SUM_COLUMNS = ("judge_calls", "judge_cost", "judge_prompt_tokens", "judge_completion_tokens")
_NO_JUDGE: dict[str, Any] = dict.fromkeys(JUDGE_SUM_COLUMNS)
#: Columns a single-turn row leaves out, as they are null on every one: the agent columns, context trimming's
#: counts, and the judge sums unless a model-graded node of its verdict reports calls (`judge_columns`). A
#: missing field is read as null (Arrow's JSON reader with the explicit schema, `Table.from_pylist`), so the
#: Parquet table is the same; a reader of the dict uses `get`. The row's JSON is about a quarter smaller, and
#: rows without them are what the writer's narrow read takes (`writer.table_from_json_lines`).
SINGLE_TURN_NULLS = (*AGENT_COLUMNS, "trimmed_requests", "trimmed_messages", *JUDGE_SUM_COLUMNS)

# `usage_source` of a row whose token counts are the server's own `usage` (every call's, in a conversation).
USAGE_SERVER = "server"

#: What a provider appends to a model id for one pinned version of it: a date (`-2024-08-06`, `-20240806`),
#: OpenAI's `-0613`, Gemini's `-001`.
_VERSION_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|\d{4}|\d{3})$")
#: What an id asking for "the current version" ends with: Anthropic's and Gemini's `-latest`, and Anthropic's
#: `-0` of a major version (`claude-sonnet-4-0` is `claude-sonnet-4-20250514`).
_ALIAS_SUFFIX = re.compile(r"-(latest|0)$")


def row_key(model: str, test: TestKey, attempt: int) -> str:
    """The identity of a row: (model, suite, test id, test hash, case, attempt[, variant]).

    Resume skips a key already in the journal; an edited test gets a new hash, so it runs again. The
    variant is appended only when there is one, so keys of runs without variants are unchanged.
    """
    case = "" if test.case_index is None else str(test.case_index)
    key = "\x1f".join((model, test.suite, test.id, test.hash, case, str(attempt)))
    return key if not test.variant else f"{key}\x1f{test.variant}"


def key_of_row(row: dict[str, Any]) -> str:
    """`row_key` of a stored row (read back from a Parquet part when the journal is rebuilt)."""
    case = "" if row["case_index"] is None else str(row["case_index"])
    key = "\x1f".join((row["model"], row["suite"], row["test_id"], row["test_hash"], case, str(row["attempt"])))
    return key if not row.get("variant") else f"{key}\x1f{row['variant']}"


@functools.lru_cache(maxsize=256)   # a run asks a few models and is served a few names: worked out once each
def is_fallback(asked: str, served: str | None) -> bool | None:
    """Whether the server answered with a different model than the one asked for.

    Lenient on purpose, so ordinary aliasing is not a fallback: the ids are compared without case, either
    may carry a provider prefix the other lacks (`meta/llama3` for `llama3`, `openai/gpt-4o` served as
    `gpt-4o`), the served id may be a pinned version of the asked one (`-2024-08-06`, `-20240806`, `-0613`,
    Gemini's `-001`), and an asked alias for the current version (`-latest`, Anthropic's `-0`) may be
    answered by a pinned version of its name. None when the server named no model.

    Args:
        asked: The model id sent in the request.
        served: The response's `model`, or None.
    """
    if not served:
        return None
    a, s = asked.strip().lower(), served.strip().lower()
    pairs = {(a, s), (a, _unprefixed(s)), (_unprefixed(a), s)}
    return not any(_same_model(asked_id, served_id) for asked_id, served_id in pairs)


def _unprefixed(model_id: str) -> str:
    """The id without a provider or router prefix (`openai/gpt-4o` -> `gpt-4o`)."""
    return model_id.rsplit("/", 1)[-1]


def _same_model(asked: str, served: str) -> bool:
    """`served` is `asked`, a pinned version of it, or the name an alias suffix of it stands for (pinned or not)."""
    if served == asked or _pinned(asked, served):
        return True
    alias = _ALIAS_SUFFIX.search(asked)
    return alias is not None and (served == asked[:alias.start()] or _pinned(asked[:alias.start()], served))


def _pinned(name: str, served: str) -> bool:
    return served.startswith(name) and _VERSION_SUFFIX.fullmatch(served[len(name):]) is not None


def evaluator_nodes(verdict: Verdict) -> tuple[list[dict[str, Any]], str | None]:
    """The verdict tree as `evaluators` list entries, and the isolation any exec node reported."""
    nodes = []
    isolation = None
    # A lone leaf (the usual verdict) is its own walk: no generator needed.
    for path, node in (((verdict.kind, verdict),) if not verdict.children else verdict.walk()):
        unscored = is_unscored(node)   # `none: true` judges nothing: its score and passed stay null
        nodes.append({"path": path, "kind": node.kind, "name": node.name,
                      "score": None if unscored else float(node.score), "weight": float(node.weight),
                      "passed": None if unscored else bool(node.passed), "error": bool(node.error),
                      "reason": node.reason, **judge_node_fields(node)})
        if isolation is None and node.details and node.details.get("isolation"):
            isolation = str(node.details["isolation"])
    return nodes, isolation


def judge_node_fields(node: Verdict) -> dict[str, Any]:
    """A `judge` node's own fields of the `evaluators` entry (none for other kinds: the columns stay null)."""
    details = node.details
    if node.kind != "judge" or not details:
        return {}
    grade = details.get("grade")
    return {"judge_model": details.get("judge_model"), "judge_scale": details.get("scale"),
            "judge_grade": None if grade is None or node.error else json.dumps(grade),
            "judge_grades": [json.dumps(g) for g in details.get("grades") or []],
            "judge_calls": details.get("judge_calls"), "judge_cached": details.get("judge_cached"),
            "judge_prompt_tokens": details.get("judge_prompt_tokens"),
            "judge_completion_tokens": details.get("judge_completion_tokens"), "judge_cost": details.get("judge_cost")}


_JUDGE_SUMS = ("judge_calls", "judge_prompt_tokens", "judge_completion_tokens")   # the integer ones


def judge_columns(verdict: Verdict | None) -> dict[str, Any]:
    """The row's judge columns: the model-graded nodes' (`judge`, `similar`) paid calls, tokens and cost summed
    (all null without them): any node whose details carry `judge_calls`.

    `judge_cost` is null when no judge call was priced; cache hits count nowhere (nothing was paid).
    """
    out: dict[str, Any] = dict(_NO_JUDGE)
    if verdict is None:
        return out
    for _, node in (((verdict.kind, verdict),) if not verdict.children else verdict.walk()):
        details = node.details
        if not details or "judge_calls" not in details:
            continue
        for name in _JUDGE_SUMS:
            if details.get(name) is not None:
                out[name] = (out[name] or 0) + int(details[name])
        if details.get("judge_cost") is not None:
            out["judge_cost"] = (out["judge_cost"] or 0.0) + float(details["judge_cost"])
    return out


def build_row(*, run_id: str, model: ModelConfig, test: Test, attempt: int, request: PreparedRequest,
              result: CallResult, verdict: Verdict | None, evaluator_error: str | None,
              started_us: int, ended_us: int) -> dict[str, Any]:
    """Assemble one row.

    Args:
        run_id: The run's id.
        model: The model config the row is reported under.
        test: The test.
        attempt: 0-based repeat index.
        request: The prepared request (resolved temperature, max_tokens, seed).
        result: The call's result (its `error` makes this an error row).
        verdict: The evaluation, or None when the call failed or the test has no check.
        evaluator_error: A message when scoring crashed or returned an error verdict.
        started_us: Start time, microseconds since the epoch (UTC).
        ended_us: End time, microseconds since the epoch (UTC).
    """
    messages_json, golden_json = test.messages_json, test.golden_json   # each computed once per Test
    row: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "model": model.name,
        "model_id": model.model,
        "served_model": result.served_model,
        "fallback": is_fallback(model.model, result.served_model),
        "api": model.api,
        "suite": test.suite,
        "test_id": test.id,
        "test_hash": test.hash,
        "case_index": test.case_index,
        "attempt": attempt,
        "tags": list(test.tags),
        "prompt": test.prompt if model.api == "completions" else messages_json,
        "golden": golden_json,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "seed": request.seed,
        "answer": result.text,
        "reasoning": result.reasoning,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.raw_arguments, "valid_json": c.valid_json}
                       for c in result.tool_calls],
        "finish_reason": result.finish_reason,
        "system_fingerprint": result.system_fingerprint,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "cached_tokens": result.cached_tokens,
        "cache_write_tokens": result.cache_write_tokens,
        "reasoning_tokens": result.reasoning_tokens,
        "latency_s": result.latency_s,
        "ttft_provider_s": result.ttft_provider_s,
        "ttft_visible_s": result.ttft_visible_s,
        "retries": result.retries,
        "rate_limit_wait_s": result.rate_limit_wait_s,
        "truncated": result.truncated,
        "cost": row_cost(model, result),
        "score": None,
        "passed": None,
        "threshold": test.threshold,
        "error_kind": None if result.error is None else result.error.kind,
        "error_message": None if result.error is None else str(result.error),
        "evaluators": [],
        "isolation": None,
        "notes": "; ".join(result.notes) if result.notes else None,
        "started_at": started_us,
        "ended_at": ended_us,
        "served_by": result.served_by,
        "variant": test.variant,
        "cached": result.cached,
        "usage_source": USAGE_SERVER if result.prompt_tokens is not None or result.completion_tokens is not None
        else None,
        "batch_id": result.batch_id,
    }
    if verdict is not None or evaluator_error is not None:
        set_verdict(row, verdict, evaluator_error)
    return row


def set_verdict(row: dict[str, Any], verdict: Verdict | None, evaluator_error: str | None) -> None:
    """Put the verdict on a row built without one (the runner builds the row, scores with its record, then this).

    Args:
        row: A row from `build_row` or `build_agent_row`, verdict columns empty.
        verdict: The evaluation, or None when the call failed or scoring crashed.
        evaluator_error: A message when scoring crashed or returned an error verdict.
    """
    call_failed = row["error_kind"] is not None and row["error_kind"] != "evaluator"
    if not call_failed and evaluator_error is not None:
        row["error_kind"], row["error_message"] = "evaluator", evaluator_error
    if verdict is None:
        return
    row["evaluators"], row["isolation"] = evaluator_nodes(verdict)
    if row["error_kind"] is None and not is_unscored(verdict):
        # score() already applied the test threshold, node thresholds and `must` gates at the root.
        row["score"], row["passed"] = float(verdict.score), bool(verdict.passed)
    # A verdict without a model-graded node has no judge figures to sum: a single-turn row leaves its judge
    # columns out (SINGLE_TURN_NULLS), so the writer's narrow read takes it (writer.table_from_json_lines). A
    # leaf without details cannot hold one: no walk for it.
    if verdict.children or verdict.details:
        judged = judge_columns(verdict)
        if judged != _NO_JUDGE:
            row.update(judged)


def record_of(row: Mapping[str, Any]) -> Record:
    """What the row recorded of its call(s), for the record evaluators: the run and `engine rescore` both
    score from this, so they read the same facts."""
    return Record(asked_model=row.get("model_id"), served_model=row.get("served_model"),
                  fallback=row.get("fallback"), finish_reason=row.get("finish_reason"),
                  truncated=bool(row.get("truncated")), prompt_tokens=row.get("prompt_tokens"),
                  completion_tokens=row.get("completion_tokens"), latency_s=row.get("latency_s"),
                  ttft_provider_s=row.get("ttft_provider_s"), ttft_visible_s=row.get("ttft_visible_s"),
                  cost=row.get("cost"), cached=bool(row.get("cached")))


def row_cost(model: ModelConfig, result: CallResult) -> float | None:
    """The row's `cost`: 0 when the response cache answered (nothing was paid), null when unpriced; a call answered
    through a batch (`batch_id`) at the batch price."""
    cost = cost_of(model, result.prompt_tokens, result.completion_tokens, result.cached_tokens,
                   result.cache_write_tokens, batch=result.batch_id is not None)
    return 0.0 if cost is not None and result.cached else cost


def build_agent_row(*, run_id: str, model: ModelConfig, test: Test, attempt: int, request: PreparedRequest,
                    transcript: Transcript, replies: Sequence[CallResult], verdict: Verdict | None,
                    evaluator_error: str | None, started_us: int, ended_us: int,
                    trims: Mapping[str, int] | None = None, failure: Any = None) -> dict[str, Any]:
    """One row for a whole conversation (a test with `agent:`).

    The single-turn columns describe the conversation: `answer`, `reasoning`, `tool_calls` and
    `finish_reason` are the last model turn's; tokens, cost, retries and 429 waits are totals over every
    model call, null when any call's count is unknown (never a partial sum); `latency_s` is the
    conversation's length, the TTFTs the first call's; `fallback` is true when any call was answered by
    another model; `error_kind` is the failing call's when `outcome` is `error`; `served_by` is the last
    call's replica.

    Args:
        replies: Every model call's result, in order (the ledger's source; its extra counts and notes).
        trims: `trimmed_requests` and `trimmed_messages` (`engine.agent.context`); zeros when None.
        failure: What ended an `error` conversation when no model call failed (a `ClientError`: an MCP server's).
        Others: as `build_row`.
    """
    last = replies[-1] if replies else None
    failed = next((r for r in replies if r.error is not None), None)
    final = transcript.answer()
    summary = _Summary(final.text, final.reasoning, final.tool_calls, final.finish_reason,
                       last.served_model if last else None, failed.error if failed else failure, replies)
    row = build_row(run_id=run_id, model=model, test=test, attempt=attempt, request=request,
                    result=summary, verdict=verdict,  # type: ignore[arg-type]  # the fields build_row reads
                    evaluator_error=evaluator_error, started_us=started_us, ended_us=ended_us)
    for name in _NO_JUDGE:   # an agent row keeps every column, null or not (build_row leaves these out)
        row.setdefault(name, None)
    fallbacks = [entry.fallback for entry in transcript.ledger]
    row.update({
        **_NO_AGENT,   # the workspace columns stay null outside a workspace test
        "fallback": True if any(fallbacks) else (None if None in fallbacks or not fallbacks else False),
        "latency_s": None if summary.cached else transcript.elapsed_s,
        "cost": _conversation_cost(model, transcript, replies),
        "transcript": transcript.records(),
        "ledger": transcript.ledger_records(),
        "tool_events": transcript.tool_event_records(),
        **transcript.counts(),
        "state": json.dumps(dict(transcript.state), ensure_ascii=False, sort_keys=True, default=str),
        "trimmed_requests": 0, "trimmed_messages": 0, **(trims or {}),
    })
    return row


def _conversation_cost(model: ModelConfig, transcript: Transcript, replies: Sequence[CallResult]) -> float | None:
    """The conversation's spend; a turn the response cache answered costs nothing. Cached prompt tokens are
    priced at the model's cache prices (`cost_of`)."""
    cost = transcript.cost(model.price_in, model.price_out)
    cache_priced = model.price_cache_read is not None or model.price_cache_write is not None
    if cost is None or not (cache_priced or any(r.cached for r in replies)):
        return cost
    return sum(cost_of(model, r.prompt_tokens, r.completion_tokens, r.cached_tokens, r.cache_write_tokens) or 0.0
               for r in replies if not r.cached)


class _Summary:
    """A conversation seen as one `CallResult` by `build_row`: the last turn's text, the calls' totals."""

    def __init__(self, text: str, reasoning: str | None, tool_calls: Any, finish_reason: str | None,
                 served_model: str | None, error: Any, replies: Sequence[CallResult]) -> None:
        self.text, self.reasoning, self.tool_calls, self.finish_reason = text, reasoning, tool_calls, finish_reason
        self.served_model, self.error = served_model, error
        self.served_by = replies[-1].served_by if replies else None
        self.system_fingerprint = replies[-1].system_fingerprint if replies else None
        self.prompt_tokens = _total(r.prompt_tokens for r in replies)
        self.completion_tokens = _total(r.completion_tokens for r in replies)
        self.cached_tokens = _total(r.cached_tokens for r in replies)
        self.cache_write_tokens = _total(r.cache_write_tokens for r in replies)
        self.reasoning_tokens = _total(r.reasoning_tokens for r in replies)
        self.ttft_provider_s = replies[0].ttft_provider_s if replies else None
        self.ttft_visible_s = replies[0].ttft_visible_s if replies else None
        self.latency_s = None   # replaced by the conversation's elapsed time
        self.retries = sum(r.retries for r in replies)
        self.rate_limit_wait_s = sum(r.rate_limit_wait_s for r in replies)
        self.truncated = any(r.truncated for r in replies)
        self.notes = [f"turn {i}: {note}" for i, r in enumerate(replies, 1) for note in r.notes]
        self.cached = bool(replies) and all(r.cached for r in replies)   # every turn from the response cache
        self.batch_id = None   # a conversation's turns go live (docs/running.md, Batch runs)


def _total(values: Iterable[int | None]) -> int | None:
    """The sum, or None when any value is unknown (never a partial sum); None for no values."""
    total, seen = 0, False
    for value in values:
        if value is None:
            return None
        total, seen = total + value, True
    return total if seen else None
