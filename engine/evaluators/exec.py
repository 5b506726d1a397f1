"""The `exec` evaluator family: run the model's code in a sandboxed harness (placeholder)."""

from __future__ import annotations

from typing import Any, Mapping

from engine.evaluators.base import EvalContext, error
from engine.model import Answer, Verdict


def exec_(value: Any, options: Mapping[str, Any], answer: Answer, ctx: EvalContext) -> Verdict:
    """Run the answer's code through a harness template and score it.

    Args:
        value: The `exec:` mapping (harness, cases, ...), rendered.
        options: Other keys of the node (none for exec).
        answer: The model's answer.
        ctx: The evaluation context.
    """
    return error("exec harnesses are not implemented yet", kind="exec")
