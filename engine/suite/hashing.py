"""Test identity: a stable content hash of what a test sends and how it is scored.

The id, file, line, tags and repeat count are left out on purpose: moving a test, renaming its file or
retagging it keeps its results comparable; changing its prompt, tools, evaluator, variables, threshold
or sampling settings gives it a new hash, so `resume` and `diff` can tell a changed test apart.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["canonical_json", "test_hash"]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def test_hash(*, messages: Sequence[Mapping[str, Any]], prompt: str, tools: Sequence[Mapping[str, Any]],
              eval_spec: Any, variables: Mapping[str, Any], max_tokens: int | None, temperature: float | None,
              threshold: float, agent: Mapping[str, Any] | None = None,
              returns: Mapping[str, Any] | None = None) -> str:
    """The first 16 hex digits of sha256 over the canonical JSON of the test's content.

    Args:
        messages: The chat messages sent.
        prompt: The completions-API prompt.
        tools: The OpenAI tool definitions offered.
        eval_spec: The resolved evaluator spec.
        variables: The template variables the evaluator renders with (golden included).
        max_tokens: The test's max_tokens.
        temperature: The test's temperature.
        threshold: The score needed to pass.
        agent: The test's `agent:` block (defaults merged), or None for a single-turn test.
        returns: Tool name -> its `returns` rules as written, for the offered tools (agent tests only).
    """
    content = {"messages": list(messages), "prompt": prompt, "tools": list(tools), "eval": eval_spec,
               "variables": dict(variables), "max_tokens": max_tokens, "temperature": temperature,
               "threshold": threshold}
    # Only agent tests carry the new keys, so every single-turn test keeps the hash it had.
    if agent is not None:
        content["agent"] = dict(agent)
        content["returns"] = dict(returns or {})
    return hashlib.sha256(canonical_json(content).encode("utf-8")).hexdigest()[:16]
