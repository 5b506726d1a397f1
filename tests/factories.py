"""Build `Test`s by hand the way the loader does: defaults for every field, the evaluator compiled.

    make_test(eval={"contains": "Paris"}, golden="Paris", variables={"city": "Paris"})

The one place tests construct `engine.model.test.Test` (the loader builds them for suites).
"""

from __future__ import annotations

from typing import Any

from engine.evaluators import compile_spec
from engine.model.test import Test


def make_test(**fields: Any) -> Test:
    """A Test with `fields` over the defaults, its `eval` spec compiled as the loader compiles it.

    Args:
        fields: Any `Test` field; `eval` is the spec as written (templates rendered with `variables`
            and `golden`, as when a suite loads).
    """
    base: dict[str, Any] = {"suite": "s", "id": "t", "file": "s.yaml", "line": 1,
                            "messages": ({"role": "user", "content": "q"},), "prompt": "q", "eval": None,
                            "hash": "h"}
    base.update(fields)
    spec = base["eval"]
    if spec is not None and "evaluator" not in fields:
        variables = dict(base.get("variables") or {})
        variables.setdefault("golden", base.get("golden"))
        base["evaluator"] = compile_spec(spec, variables)
    return Test(**base)
