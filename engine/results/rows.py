"""One results row (a plain dict keyed by `schema.COLUMN_NAMES`) from a call and its verdict.

Rows travel as dicts of JSON-friendly values (timestamps as integer microseconds since the epoch) so
the journal can store them as JSON text and the writer can hand a batch straight to
`pyarrow.Table.from_pylist(rows, schema=SCHEMA)`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from engine.model import ModelConfig, Test, Verdict
from engine.results.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from engine.client.openai import CallResult, PreparedRequest

_DATE_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|\d{4})$")


def row_key(model: str, test: Test, attempt: int) -> str:
    """The identity of a row: (model, suite, test id, test hash, case, attempt).

    Resume skips a key already in the journal; an edited test gets a new hash, so it runs again.
    """
    case = "" if test.case_index is None else str(test.case_index)
    return "\x1f".join((model, test.suite, test.id, test.hash, case, str(attempt)))


def key_of_row(row: dict[str, Any]) -> str:
    """`row_key` of a stored row (read back from a Parquet part when the journal is rebuilt)."""
    case = "" if row["case_index"] is None else str(row["case_index"])
    return "\x1f".join((row["model"], row["suite"], row["test_id"], row["test_hash"], case, str(row["attempt"])))


def is_fallback(asked: str, served: str | None) -> bool | None:
    """Whether the server answered with a different model than the one asked for.

    Lenient on purpose, so ordinary aliasing is not a fallback: the ids are compared without case;
    the served id may equal the asked id, end with "/" + the asked id (a provider prefix), be the
    asked id plus a date or version suffix (`-2024-08-06`, `-20240806`, `-0613`), or the asked id
    may end with "/" + the served id (a router that strips its prefix). None when the server named no model.

    Args:
        asked: The model id sent in the request.
        served: The response's `model`, or None.
    """
    if not served:
        return None
    a, s = asked.strip().lower(), served.strip().lower()
    if s == a or s.endswith("/" + a) or a.endswith("/" + s):
        return False
    return not (s.startswith(a) and _DATE_SUFFIX.fullmatch(s[len(a):]) is not None)


def cost_of(model: ModelConfig, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
    """Priced spend of one call in the price's currency; None when unpriced or tokens unknown."""
    if model.price_in is None and model.price_out is None:
        return None
    if prompt_tokens is None or completion_tokens is None:
        return None
    return (prompt_tokens * (model.price_in or 0.0) + completion_tokens * (model.price_out or 0.0)) / 1e6


def evaluator_nodes(verdict: Verdict) -> tuple[list[dict[str, Any]], str | None]:
    """The verdict tree as `evaluators` list entries, and the isolation any exec node reported."""
    nodes = []
    isolation = None
    # A lone leaf (the usual verdict) is its own walk: no generator needed.
    for path, node in (((verdict.kind, verdict),) if not verdict.children else verdict.walk()):
        nodes.append({"path": path, "kind": node.kind, "name": node.name, "score": float(node.score),
                      "weight": float(node.weight), "passed": bool(node.passed), "error": bool(node.error),
                      "reason": node.reason})
        if isolation is None and node.details and node.details.get("isolation"):
            isolation = str(node.details["isolation"])
    return nodes, isolation


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
    error_kind = error_message = None
    score = passed = None
    evaluators: list[dict[str, Any]] = []
    isolation = None
    if result.error is not None:
        error_kind, error_message = result.error.kind, str(result.error)
    elif evaluator_error is not None:
        error_kind, error_message = "evaluator", evaluator_error
    messages_json, golden_json = test.messages_json, test.golden_json
    if verdict is not None:
        evaluators, isolation = evaluator_nodes(verdict)
        if error_kind is None:
            score = float(verdict.score)
            # score() already applied the test threshold, node thresholds and `must` gates at the root.
            passed = bool(verdict.passed)
    return {
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
        "reasoning_tokens": result.reasoning_tokens,
        "latency_s": result.latency_s,
        "ttft_provider_s": result.ttft_provider_s,
        "ttft_visible_s": result.ttft_visible_s,
        "retries": result.retries,
        "rate_limit_wait_s": result.rate_limit_wait_s,
        "truncated": result.truncated,
        "cost": cost_of(model, result.prompt_tokens, result.completion_tokens),
        "score": score,
        "passed": passed,
        "threshold": test.threshold,
        "error_kind": error_kind,
        "error_message": error_message,
        "evaluators": evaluators,
        "isolation": isolation,
        "notes": "; ".join(result.notes) if result.notes else None,
        "started_at": started_us,
        "ended_at": ended_us,
    }
