"""docs/evaluators.md's example of each record kind and of `python` is real: it compiles to that kind, the
python example is the function the end-to-end suite runs (tests/fixtures/record_suite/scorers.py), and the
conversation kinds' failing reasons are what a data-driven case (tests/evaluators/cases/record.yaml) scores."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from engine.evaluators import compile_spec
from engine.evaluators.conversation import CONVERSATION_ONLY, OUTCOMES
from engine.evaluators.record import RUN_ONLY

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "evaluators.md").read_text(encoding="utf-8")
KINDS = sorted({*RUN_ONLY, *CONVERSATION_ONLY, "calls", "prose_turns", "bad_arguments", "invented_tools", "python"})
CASES = YAML(typ="safe", pure=True).load((ROOT / "tests" / "evaluators" / "cases" / "record.yaml").read_text())


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


@pytest.mark.parametrize("kind", ["turns", "tool_status", "failed_commands"])
def test_the_documented_example_fails_with_the_documented_reason(kind: str) -> None:
    """The doc's example and its failing reason are a case the cases test scores (so neither drifts)."""
    example = YAML(typ="safe", pure=True).load(_example(kind))["eval"]
    section = DOC.split(f"### `{kind}`\n", 1)[1].split("\n### ", 1)[0]
    reason = re.search(r"Failing reason: `(.*?)`\n", section)
    assert reason is not None
    assert any(case["eval"] == example and case["reason"] == reason.group(1) and case["score"] == 0
               for case in CASES), f"no case in record.yaml scores {example} with the documented reason"


def test_each_seed_check_is_one_line_that_compiles() -> None:
    """The table of the checks agent and workspace benchmarks make: each row's line is one evaluator that
    compiles, without a problem, to the kind the row is about."""
    section = DOC.split("**The checks agent and workspace benchmarks make, one line each**", 1)[1].split("\n\n", 2)[1]
    lines = re.findall(r"^\| [^|]+ \| `- (\{.*\})` \|$", section, flags=re.M)
    assert len(lines) == 12
    kinds = []
    for line in lines:
        spec = YAML(typ="safe", pure=True).load(line)
        node = compile_spec(spec, {})
        assert node.problem is None, line
        kinds.append(node.kind)
    assert {"cost", "no_fallback", "outcome", "ttft_s", "tool_call", "calls", "invented_tools", "workspace_check",
            "not_truncated", "failed_commands", "tool_status", "turns"} == set(kinds)
