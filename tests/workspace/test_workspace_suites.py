"""suites/workspace_tasks.yaml: its golden trajectories pass `engine validate`'s self-check, and trajectories that
cheat or do half the work are failed by the hidden checks (a check that passes everything would pass these too)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engine.agent.golden import score_golden_conversation
from engine.model.test import Test
from engine.suite.agent import compile_golden
from engine.suite.loader import load_suites

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "workspace_tasks.yaml"


@pytest.fixture(scope="module")
def tests() -> dict[str, Test]:
    suites, diagnostics = load_suites([SUITE], golden_check=True, conversation_check=score_golden_conversation)
    assert [d for d in diagnostics if d.severity == "error"] == []
    (suite,) = suites
    # three real tasks, and the easy one a first `make run` shows solved
    assert [t.id for t in suite.tests] == ["write-hello-file", "fix-failing-unit-test", "summarise-csv", "rename-files"]
    return {test.id: test for test in suite.tests}


def test_the_easy_task_needs_the_file_and_the_word(tests: dict[str, Test]) -> None:
    write = [{"tool_calls": [{"name": "write_file", "arguments": {"path": "hello.txt", "content": "Hello, World!"}}]},
             "done"]
    wrong_file = [{"tool_calls": [{"name": "write_file", "arguments": {"path": "hi.txt", "content": "hello"}}]},
                  "done"]
    assert _replay(tests["write-hello-file"], write)[1]
    assert not _replay(tests["write-hello-file"], wrong_file)[1]


def _play(test: Test, commands: list[str]) -> tuple[float, bool]:
    golden = [{"tool_calls": [{"name": "run_command", "arguments": {"command": c}}]} for c in commands] + ["done"]
    return _replay(test, golden)


def _replay(test: Test, golden: list) -> tuple[float, bool]:  # type: ignore[type-arg]
    turns, problems = compile_golden(golden, ends_with_calls=True)
    assert problems == []
    verdict = score_golden_conversation(replace(test, golden_turns=turns))
    assert not verdict.error, verdict.reason
    return verdict.score, verdict.passed


def test_editing_the_tests_instead_of_the_code_fails(tests: dict[str, Test]) -> None:
    score, passed = _play(tests["fix-failing-unit-test"],
                          ["sed -i 's/2.5)/mean([1, 2, 3, 4]))/' tests/test_stats.py"])
    assert not passed and score < 1


def test_a_summary_with_one_wrong_field_gets_two_thirds(tests: dict[str, Test]) -> None:
    wrong = ('echo \'{"total_units": 18, "revenue_by_region": {"north": 251.3, "south": 64.4, "east": 240.5}, '
             '"top_product": "toaster"}\' > summary.json')
    score, passed = _play(tests["summarise-csv"], [wrong])
    assert not passed
    # all: [workspace_check (2/3), no_invented_tools (1)] -> the mean of the two
    assert score == pytest.approx((2 / 3 + 1) / 2)


def test_renaming_the_cover_too_fails(tests: dict[str, Test]) -> None:
    rename_all = "cd photos && for f in IMG_*; do mv \"$f\" \"photo-${f#IMG_}\"; done"
    score, passed = _play(tests["rename-files"], [rename_all])
    assert not passed and score < 1
