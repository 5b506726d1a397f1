"""The results table: one row per (run, model, test, case, attempt), declared as data.

Bump SCHEMA_VERSION (engine/results/version.py) when a column changes meaning or type; adding a nullable
column is a minor change that readers handle (analysis keeps columns only later runs have). docs/results.md
documents every column.
"""

from __future__ import annotations

import pyarrow as pa

from engine.results.version import SCHEMA_VERSION

EVALUATOR_NODE = pa.struct([
    ("path", pa.string()),        # "all/0.contains"
    ("kind", pa.string()),        # evaluator key
    ("name", pa.string()),        # author's name: for the node, or null
    ("score", pa.float64()),
    ("weight", pa.float64()),
    ("passed", pa.bool_()),
    ("error", pa.bool_()),
    ("reason", pa.string()),
    # `judge` nodes only (null elsewhere): the judge model, scale, the grade it settled on and each sample's
    # grade (JSON text), and this node's own paid calls, cache hits, tokens and cost (the row's judge_*
    # columns are their sums)
    ("judge_model", pa.string()),
    ("judge_scale", pa.string()),
    ("judge_grade", pa.string()),
    ("judge_grades", pa.list_(pa.string())),
    ("judge_calls", pa.int32()),
    ("judge_cached", pa.int32()),
    ("judge_prompt_tokens", pa.int64()),
    ("judge_completion_tokens", pa.int64()),
    ("judge_cost", pa.float64()),
])

TOOL_CALL = pa.struct([
    ("id", pa.string()),
    ("name", pa.string()),
    ("arguments", pa.string()),   # raw JSON text as received
    ("valid_json", pa.bool_()),
])

# Agent rows (tests with `agent:`): the conversation, declared field by field from the records
# `engine.model.transcript.Transcript` builds (inferring them would type a column of empty lists as null).
# tests/results check these fields against the record keys.
TRANSCRIPT_CALL = pa.struct([
    ("id", pa.string()),
    ("name", pa.string()),
    ("arguments", pa.string()),   # raw JSON text as received
])

TRANSCRIPT_MESSAGE = pa.struct([
    ("turn", pa.int32()),               # the model call it came from or answers; 0 for the opening messages
    ("role", pa.string()),              # system | user | assistant | tool
    ("content", pa.string()),
    ("reasoning", pa.string()),
    ("tool_calls", pa.list_(TRANSCRIPT_CALL)),
    ("tool_call_id", pa.string()),      # a tool message: the call it answers
    ("tool_name", pa.string()),         # a tool message: its tool event's name, status, rule, latency
    ("tool_status", pa.string()),       # ok | error | invented | bad_args | failed | refused
    ("tool_rule", pa.int32()),
    ("tool_latency_s", pa.float64()),
    ("latency_s", pa.float64()),        # an assistant message: its model call's figures
    ("ttft_provider_s", pa.float64()),
    ("ttft_visible_s", pa.float64()),
    ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()),
    ("retries", pa.int32()),
    ("truncated", pa.bool_()),
    ("served_model", pa.string()),
    ("fallback", pa.bool_()),
])

LEDGER_ENTRY = pa.struct([
    ("turn", pa.int32()),
    ("kind", pa.string()),              # tool_calls | answer | error
    ("started_s", pa.float64()),        # seconds from the start of the conversation
    ("latency_s", pa.float64()),
    ("ttft_provider_s", pa.float64()),
    ("ttft_visible_s", pa.float64()),
    ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()),
    ("retries", pa.int32()),
    ("rate_limit_wait_s", pa.float64()),
    ("truncated", pa.bool_()),
    ("served_model", pa.string()),
    ("fallback", pa.bool_()),
    ("finish_reason", pa.string()),
    ("error_kind", pa.string()),
    ("error", pa.string()),
])

TOOL_EVENT = pa.struct([
    ("turn", pa.int32()),
    ("index", pa.int32()),              # its position among the turn's calls
    ("call_id", pa.string()),
    ("name", pa.string()),
    ("raw_arguments", pa.string()),
    ("status", pa.string()),            # ok | error | invented | bad_args | failed | refused
    ("content", pa.string()),           # the tool message the model read
    ("rule", pa.int32()),               # the `returns` rule that answered, or null
    ("started_s", pa.float64()),
    ("ended_s", pa.float64()),
    ("latency_s", pa.float64()),
])

TS = pa.timestamp("us", tz="UTC")

COLUMNS: list[tuple[str, pa.DataType]] = [
    ("schema_version", pa.int16()),
    ("run_id", pa.string()),
    # who was asked
    ("model", pa.string()),             # configured name (models.yaml key)
    ("model_id", pa.string()),          # model id sent in the request
    ("served_model", pa.string()),      # the response's `model`
    ("fallback", pa.bool_()),           # served model differs from the one asked: not a measurement of it
    ("api", pa.string()),               # chat | completions
    # what was asked
    ("suite", pa.string()),
    ("test_id", pa.string()),
    ("test_hash", pa.string()),
    ("case_index", pa.int32()),
    ("attempt", pa.int32()),            # 0-based repeat index
    ("tags", pa.list_(pa.string())),
    ("prompt", pa.string()),            # rendered: messages as JSON for chat, text for completions
    ("golden", pa.string()),            # JSON text of the golden, or null
    ("temperature", pa.float64()),
    ("max_tokens", pa.int32()),
    ("seed", pa.int64()),
    # what came back
    ("answer", pa.string()),
    ("reasoning", pa.string()),
    ("tool_calls", pa.list_(TOOL_CALL)),
    ("finish_reason", pa.string()),
    ("system_fingerprint", pa.string()),
    ("prompt_tokens", pa.int64()),      # null when the server sent none - never 0
    ("completion_tokens", pa.int64()),
    ("cached_tokens", pa.int64()),
    ("reasoning_tokens", pa.int64()),
    ("latency_s", pa.float64()),
    ("ttft_provider_s", pa.float64()),  # first byte of the response body
    ("ttft_visible_s", pa.float64()),   # first non-blank content or tool-call delta
    ("retries", pa.int32()),
    ("rate_limit_wait_s", pa.float64()),
    ("truncated", pa.bool_()),          # finish_reason == length, or a stream cut short
    ("cost", pa.float64()),             # from models.yaml price; null when unpriced or tokens unknown
    # the verdict
    ("score", pa.float64()),            # null on error rows
    ("passed", pa.bool_()),             # null on error rows
    ("threshold", pa.float64()),
    ("error_kind", pa.string()),        # null | http_<status> | timeout | connection | stream | bad_response | ...
    ("error_message", pa.string()),
    ("evaluators", pa.list_(EVALUATOR_NODE)),
    ("isolation", pa.string()),         # exec sandbox level that ran, null when no exec
    ("notes", pa.string()),             # what was refused from a reply that was otherwise read, or null
    # model-graded evaluators (`judge`): paid judge calls of the row, apart from the answering model's
    # columns above; null on rows without a judge (a cache hit is no call: 0 calls, no cost)
    ("judge_calls", pa.int32()),
    ("judge_cost", pa.float64()),
    ("judge_prompt_tokens", pa.int64()),
    ("judge_completion_tokens", pa.int64()),
    # agent tests only (null on single-turn rows); the token, cost, retry and latency columns above
    # then hold the whole conversation's totals
    ("transcript", pa.list_(TRANSCRIPT_MESSAGE)),
    ("ledger", pa.list_(LEDGER_ENTRY)),
    ("tool_events", pa.list_(TOOL_EVENT)),
    ("turns", pa.int32()),              # model calls made
    ("prose_turns", pa.int32()),        # model calls answered without a tool call
    ("tool_calls_made", pa.int32()),
    ("invented_tools", pa.int32()),     # calls to a tool that was not offered
    ("bad_tool_args", pa.int32()),      # calls whose arguments were not JSON or did not fit the parameters
    ("outcome", pa.string()),           # completed | escalated | capped | stuck | failed | error
    ("state", pa.string()),             # the final state variables, JSON text
    # workspace tests only (null elsewhere): engine/workspace, docs/agents.md section 8
    ("failed_commands", pa.int32()),    # run_command calls that exited non-zero, timed out or wrote too much
    ("refused_paths", pa.int32()),      # file-tool calls refused for a path outside the workspace
    ("workspace_files", pa.list_(pa.string())),   # the final workspace's files, sorted (capped at 500)
    ("workspace_diff", pa.string()),    # unified diff against the seed (after setup), cut at 8000 characters
    ("started_at", TS),
    ("ended_at", TS),
    ("served_by", pa.string()),         # the replica that answered (`base_urls`), userinfo masked; null: one endpoint
    ("trimmed_requests", pa.int32()),   # agent rows: model calls sent with messages trimmed to fit context_tokens
    ("trimmed_messages", pa.int32()),   # agent rows: distinct messages trimmed or dropped to fit
    ("variant", pa.string()),           # the suite's `variants:` entry the row ran under; null without variants
    ("cached", pa.bool_()),             # answered from the response cache: no latency, cost 0 (null in older runs)
    ("cache_write_tokens", pa.int64()),  # of prompt_tokens: written to the provider's prompt cache (Anthropic)
    ("usage_source", pa.string()),      # where the token counts come from: `server` (its usage); null: none sent
    ("batch_id", pa.string()),          # the provider's batch that answered the call (batch price); null: live
]

SCHEMA = pa.schema(COLUMNS, metadata={b"schema_version": str(SCHEMA_VERSION).encode()})

COLUMN_NAMES = [name for name, _ in COLUMNS]
#: The top-level float columns (the journal checks them for NaN before its fast encoder: journal.py).
FLOAT_COLUMNS = tuple(name for name, kind in COLUMNS if kind == pa.float64())
