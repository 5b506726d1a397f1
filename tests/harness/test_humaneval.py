"""HumanEval as a real check: every canonical solution passes, every empty body fails."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from harness_helpers import make_test
from ruamel.yaml import YAML
from typer.testing import CliRunner

from engine.evaluators import score
from engine.importers.humaneval import import_humaneval, read_problems
from engine.model.answer import Answer
from engine.model.verdict import Verdict


@pytest.fixture(scope="module")
def humaneval_suite(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_humaneval(shared_data / "humaneval" / "HumanEval.jsonl.gz",
                            tmp_path_factory.mktemp("he") / "humaneval.yaml")


def load_tests(path: Path) -> list[dict[str, Any]]:
    return YAML(typ="safe").load(path.read_text())["tests"]


# What `make test` replays: every 8th problem (21 of 164, HumanEval-0 to HumanEval-160), each its own program
# through the sandbox. The two sweeps over all 164 (~15 CPU-s with the sandbox's process starts) are `slow`.
SAMPLE = slice(None, None, 8)


def replay(path: Path, answer_for: Any, which: slice = slice(None)) -> list[tuple[str, Verdict]]:
    tests = load_tests(path)[which]

    def one(test: dict[str, Any]) -> tuple[str, Verdict]:
        compiled = make_test(path.parent, prompt=test["prompt"], spec=test["eval"]["exec"])
        return test["id"], score(compiled, Answer.from_golden(answer_for(test)))

    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        return list(pool.map(one, tests))


def test_the_import_keeps_every_problem_verbatim(humaneval_suite: Path, shared_data: Path) -> None:
    problems = read_problems(shared_data / "humaneval" / "HumanEval.jsonl.gz")
    tests = load_tests(humaneval_suite)
    assert len(tests) == len(problems) == 164
    for problem, test in zip(problems, tests, strict=True):
        assert test["id"] == problem["task_id"].replace("/", "-")
        assert test["prompt"] == problem["prompt"]
        assert test["golden"] == problem["canonical_solution"]
        assert test["eval"]["exec"]["vars"]["test"] == problem["test"]
        assert test["eval"]["exec"]["harness"] == "humaneval"
    header = humaneval_suite.read_text()[:600]
    assert "MIT" in header and "openai/human-eval" in header


def test_a_sample_of_canonical_solutions_pass(humaneval_suite: Path) -> None:
    """The representative part of the sweep below, in `make test`: 21 problems spread over the file."""
    verdicts = replay(humaneval_suite, lambda test: test["golden"], SAMPLE)
    failed = [(tid, v.reason) for tid, v in verdicts if not v.passed]
    assert len(verdicts) == 21 and failed == []


def test_a_sample_of_empty_bodies_fail(humaneval_suite: Path) -> None:
    """The representative part of the sweep below, in `make test`: 21 problems spread over the file."""
    verdicts = replay(humaneval_suite, lambda test: "    pass\n", SAMPLE)
    passed = [tid for tid, v in verdicts if v.passed]
    errors = [(tid, v.reason) for tid, v in verdicts if v.error]
    assert len(verdicts) == 21 and passed == [] and errors == []


@pytest.mark.slow
def test_all_164_canonical_solutions_pass(humaneval_suite: Path) -> None:
    """The exhaustive sweep (`make test-slow`); `make test` runs its sample above."""
    verdicts = replay(humaneval_suite, lambda test: test["golden"])
    failed = [(tid, v.reason) for tid, v in verdicts if not v.passed]
    assert len(verdicts) == 164 and failed == []


@pytest.mark.slow
def test_all_164_empty_bodies_fail(humaneval_suite: Path) -> None:
    """The exhaustive sweep (`make test-slow`); `make test` runs its sample above."""
    verdicts = replay(humaneval_suite, lambda test: "    pass\n")
    passed = [tid for tid, v in verdicts if v.passed]
    errors = [(tid, v.reason) for tid, v in verdicts if v.error]
    assert len(verdicts) == 164 and passed == [] and errors == []


def test_a_chat_style_full_function_in_a_fence_also_passes(humaneval_suite: Path) -> None:
    test = load_tests(humaneval_suite)[0]
    answer = "Here it is:\n```python\n" + test["prompt"] + test["golden"] + "```\n"
    verdict = score(make_test(humaneval_suite.parent, prompt=test["prompt"], spec=test["eval"]["exec"]),
                    Answer(text=answer))
    assert verdict.passed, verdict.reason


def test_the_cli_command_writes_a_limited_suite(shared_data: Path, tmp_path: Path) -> None:
    from engine.cli import app

    out = tmp_path / "he.yaml"
    result = CliRunner().invoke(app, ["import", "humaneval", str(shared_data / "humaneval" / "HumanEval.jsonl.gz"),
                                      "--out", str(out), "--limit", "3"])
    assert result.exit_code == 0, result.output
    assert [t["id"] for t in load_tests(out)] == ["HumanEval-0", "HumanEval-1", "HumanEval-2"]


def test_the_cli_reports_a_bad_source_without_a_traceback(tmp_path: Path) -> None:
    from engine.cli import app

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "x"}\n')
    result = CliRunner().invoke(app, ["import", "humaneval", str(bad), "--out", str(tmp_path / "o.yaml")])
    assert result.exit_code == 2
    assert "bad.jsonl:1: missing prompt" in result.output
    assert "Traceback" not in result.output


def test_the_suite_loader_accepts_the_imported_suite(humaneval_suite: Path) -> None:
    suite_module = pytest.importorskip("engine.suite")
    load_suites = getattr(suite_module, "load_suites", None)
    if load_suites is None:
        pytest.skip("engine.suite.load_suites is not available yet")
    suites, diagnostics = load_suites([humaneval_suite])
    assert [d for d in diagnostics if d.severity == "error"] == []
    assert len(suites[0].tests) == 164
