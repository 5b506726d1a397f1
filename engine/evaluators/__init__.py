"""The evaluator catalogue and the one entry point the runner calls.

`EVALUATORS` maps each YAML key to its leaf function - the whole catalogue in one visible dict.
Compositions (`all`, `any`, `not`, `use`) live in `compose.py`; docs/evaluators.md documents every
entry, and docs/architecture.md holds the option table the JSON Schema is written from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from engine.evaluators import compose, json_eval, text, tool_call
from engine.evaluators import exec as exec_family
from engine.evaluators.base import EvalContext, Leaf
from engine.model import Answer, Test, Verdict

__all__ = ["EVALUATORS", "EvalContext", "evaluate", "normalise_answer", "uses_exec"]

EVALUATORS: dict[str, Leaf] = {
    # text
    "equals": text.equals,
    "contains": text.contains,
    "not_contains": text.not_contains,
    "regex": text.regex,
    "starts_with": text.starts_with,
    "numeric": text.numeric,
    "exact_token": text.exact_token,
    "length": text.length,
    # json
    "is_json": json_eval.is_json,
    "json_schema": json_eval.json_schema,
    "json_field": json_eval.json_field,
    # tool calls
    "tool_call": tool_call.tool_call,
    "no_tool_call": tool_call.no_tool_call,
    "tool_sequence": tool_call.tool_sequence,
    "first_tool": tool_call.first_tool,
    # code
    "exec": exec_family.exec_,
}

# A reasoning block the model printed before its answer; an unclosed one (cut by max_tokens) is all reasoning.
_THINK = re.compile(r"^\s*<think>.*?(?:</think>|\Z)\s*", re.DOTALL | re.IGNORECASE)


def normalise_answer(answer: Answer) -> Answer:
    """The answer as evaluators see it: a leading `<think>...</think>` block removed.

    Args:
        answer: The answer as the client produced it.
    """
    text_value = answer.text or ""
    if "<" not in text_value:   # no `<think>` possible: skip the regex
        return answer
    stripped = _THINK.sub("", text_value, count=1)
    if stripped == text_value:
        return answer
    return Answer(text=stripped, tool_calls=answer.tool_calls, finish_reason=answer.finish_reason,
                  reasoning=answer.reasoning)


def evaluate(spec: Mapping[str, Any] | None, answer: Answer, test: Test) -> Verdict:
    """Score one answer against a test's evaluator spec. Never raises.

    Args:
        spec: The evaluator spec as written in the suite (templates unrendered), or None for "no check".
        answer: The model's answer.
        test: The test (variables, golden, tools, threshold).

    Returns:
        The root verdict; `passed` uses the root node's own threshold, else `test.threshold`.
    """
    if spec is None:
        return Verdict(score=1.0, passed=True, reason="no evaluator", kind="none")
    try:
        variables = dict(test.variables)
        variables.setdefault("golden", test.golden)
        ctx = EvalContext(test=test, variables=variables)
        normalised = normalise_answer(answer)
    except Exception as exc:  # noqa: BLE001 - evaluate never raises
        return Verdict(score=0.0, passed=False, reason=f"could not prepare scoring: {exc}", error=True)
    return compose.evaluate_node(spec, normalised, ctx, EVALUATORS, root_threshold=test.threshold)


def uses_exec(spec: Any) -> bool:
    """True when any node anywhere in the spec is an `exec` evaluator (the runner threads those).

    Args:
        spec: An evaluator spec, or None.
    """
    if type(spec) is dict and "exec" not in spec and spec.keys().isdisjoint(compose.COMPOSITIONS):
        return False   # the usual leaf, without the recursion below
    if isinstance(spec, Mapping):
        return "exec" in spec or any(uses_exec(v) for k, v in spec.items() if k in compose.COMPOSITIONS)
    if isinstance(spec, (list, tuple)):
        return any(uses_exec(item) for item in spec)
    return False
