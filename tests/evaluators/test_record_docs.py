"""docs/evaluators.md's example of each record kind and of `python` is real: it compiles to that kind, and the
python example is the function the end-to-end suite runs (tests/fixtures/record_suite/scorers.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from engine.evaluators import compile_spec
from engine.evaluators.record import OUTCOMES, RUN_ONLY

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "evaluators.md").read_text(encoding="utf-8")
KINDS = sorted({*RUN_ONLY, "outcome", "calls", "prose_turns", "bad_arguments", "invented_tools", "python"})


def _example(kind: str) -> str:
    section = DOC.split(f"### `{kind}`\n", 1)[1].split("\n### ", 1)[0]
    found = re.search(r"```yaml\n(.*?)```", section, flags=re.S)
    assert found, f"no yaml example under ### `{kind}`"
    return found.group(1)


@pytest.mark.parametrize("kind", KINDS)
def test_the_documented_example_compiles_to_its_kind(kind: str) -> None:
    spec = YAML(typ="safe", pure=True).load(_example(kind))["eval"]
    node = compile_spec(spec, {})
    assert (node.kind, node.problem) == (kind, None)


def test_the_python_example_is_the_suites_scorer() -> None:
    section = DOC.split("### `python`\n", 1)[1].split("\n### ", 1)[0]
    shown = re.search(r"```python\n# scorers.py [^\n]*\n(.*?)```", section, flags=re.S)
    assert shown is not None
    assert shown.group(1) in (ROOT / "tests" / "fixtures" / "record_suite" / "scorers.py").read_text()


def test_every_outcome_is_documented() -> None:
    section = DOC.split("### `outcome`\n", 1)[1].split("\n### ", 1)[0]
    assert all(f"`{name}`" in section for name in OUTCOMES)
