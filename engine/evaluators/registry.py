"""The evaluator catalogue: one visible dict, one entry per kind (as jsonschema's `validators.py` keeps its
keywords). Each `Kind` holds the kind's schema fragment (schemas/suite.schema.json is generated from them),
its load-time check and its scorer builder; see engine/evaluators/base.py.

Adding a kind: write its builder, check and `Kind(...)` entry in a family module, then add one line here;
`python -m engine.suite.schema_source` regenerates the schema, and docs/evaluators.md documents it (a test
checks that the registry, the schema and both docs name the same kinds).
"""

from __future__ import annotations

from engine.evaluators import (
    compose,
    conversation,
    ifeval,
    json_eval,
    judge,
    markers,
    python_scorer,
    record,
    similar,
    text,
    tool_call,
    trajectory,
    workspace_check,
)
from engine.evaluators import exec as exec_family
from engine.evaluators.base import Kind

__all__ = ["COMPOSITIONS", "KINDS", "MODEL_GRADED"]

KINDS: dict[str, Kind] = {
    # composition (compose.py scores these; they have no builder)
    "all": compose.ALL,
    "any": compose.ANY,
    "not": compose.NOT,
    "use": compose.USE,
    # text
    "equals": text.EQUALS,
    "contains": text.CONTAINS,
    "not_contains": text.NOT_CONTAINS,
    "regex": text.REGEX,
    "starts_with": text.STARTS_WITH,
    "numeric": text.NUMERIC,
    "exact_token": text.EXACT_TOKEN,
    "length": text.LENGTH,
    # instruction following: one IFEval instruction by the reference checker's rules
    "ifeval": ifeval.IFEVAL,
    # json
    "is_json": json_eval.IS_JSON,
    "json_schema": json_eval.JSON_SCHEMA,
    "json_field": json_eval.JSON_FIELD,
    # tool calls
    "tool_call": trajectory.TOOL_CALL,
    "no_tool_call": tool_call.NO_TOOL_CALL,
    "tool_sequence": trajectory.TOOL_SEQUENCE,
    "first_tool": tool_call.FIRST_TOOL,
    # trajectories (agent tests: read the conversation from the scoring context)
    "max_calls": trajectory.MAX_CALLS,
    "max_turns": trajectory.MAX_TURNS,
    "no_invented_tools": trajectory.NO_INVENTED_TOOLS,
    "parallel": trajectory.PARALLEL,
    "final_answer": trajectory.FINAL_ANSWER,
    "state": trajectory.STATE,
    # how the conversation ended (conversation.py)
    "outcome": conversation.OUTCOME,
    # the run's record: the served model, usage, budgets (record.py)
    "no_fallback": record.NO_FALLBACK,
    "not_truncated": record.NOT_TRUNCATED,
    "usage_reported": record.USAGE_REPORTED,
    "latency_s": record.LATENCY_S,
    "ttft_s": record.TTFT_S,
    "tokens": record.TOKENS,
    "cost": record.COST,
    # the conversation's counts and tool statuses (conversation.py)
    "calls": conversation.CALLS,
    "prose_turns": conversation.PROSE_TURNS,
    "bad_arguments": conversation.BAD_ARGUMENTS,
    "invented_tools": conversation.INVENTED_TOOLS,
    "turns": conversation.TURNS,
    "tool_status": conversation.TOOL_STATUS,
    "failed_commands": conversation.FAILED_COMMANDS,
    # code
    "exec": exec_family.EXEC,
    "python": python_scorer.PYTHON,
    # workspace tests: a hidden command in the final workspace (engine.workspace)
    "workspace_check": workspace_check.WORKSPACE_CHECK,
    # model-graded (await a model call through ScoringContext.caller)
    "judge": judge.JUDGE,
    "similar": similar.SIMILAR,
    # markers that judge nothing: answers recorded unscored, a check an importer could not carry over
    "none": markers.NONE,
    "not_carried": markers.NOT_CARRIED,
}

#: Kinds whose value is other evaluators (or a name of one): composition, not a scorer.
COMPOSITIONS: frozenset[str] = frozenset(kind for kind, entry in KINDS.items() if entry.build is None)

#: Kinds whose scorer calls a model it names (`Kind.calls_model`): the run resolves those models before any call.
MODEL_GRADED: frozenset[str] = frozenset(kind for kind, entry in KINDS.items() if entry.calls_model)
