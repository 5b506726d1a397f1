"""The golden self-check scores each golden with its own test's evaluator (engine.evaluators)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.suite import load_suites

pytest.importorskip("engine.evaluators")


def check(tmp_path: Path, tests: str, header: str = "") -> list[str]:
    path = tmp_path / "g.yaml"
    path.write_text(f"suite: g\n{header}tests:\n{tests}", encoding="utf-8")
    _, diagnostics = load_suites([path], golden_check=True)
    return [f"{d.line}:{d.col}: {d.message}" for d in diagnostics]


def test_passing_goldens_are_silent(tmp_path: Path) -> None:
    assert check(tmp_path, "  - id: a\n    prompt: p\n    golden: Paris\n    eval: {contains: '{{ golden }}'}\n"
                           "  - id: b\n    prompt: p\n    golden: {name: Alice}\n"
                           "    eval: {json_field: {path: name, equals: Alice}}\n") == []


def test_failing_golden_is_reported_at_its_test_with_the_reason(tmp_path: Path) -> None:
    [message] = check(tmp_path, "  - id: ok\n    prompt: p\n    golden: x\n    eval: {equals: x}\n"
                                "  - id: broken\n    prompt: p\n    golden: Paris\n    eval: {contains: Lyon}\n")
    assert message.startswith("7:5: test 'broken': the golden answer scores 0.00, below the threshold 1: ")
    assert "Lyon" in message


def test_threshold_decides(tmp_path: Path) -> None:
    tests = ("  - id: half\n    prompt: p\n    golden: Paris\n    threshold: {t}\n"
             "    eval:\n      all:\n        - contains: Paris\n        - contains: Lyon\n")
    assert check(tmp_path, tests.format(t=0.5)) == []
    assert len(check(tmp_path, tests.format(t=0.75))) == 1


def test_each_case_row_golden_is_checked(tmp_path: Path) -> None:
    messages = check(tmp_path, "  - id: add-{{ a }}\n    prompt: '{{ a }} + 1?'\n    cases:\n"
                               "      - {a: 1, golden: 2}\n      - {a: 2, golden: 4}\n"
                               "    eval: {numeric: '{{ a + 1 }}'}\n")
    assert len(messages) == 1 and "add-2" in messages[0]


def test_tool_call_envelope_golden(tmp_path: Path) -> None:
    header = "tools:\n  f:\n    parameters: {type: object, properties: {x: {type: string}}}\n"
    tests = ("  - id: t\n    prompt: p\n    tools: [f]\n"
             "    golden: {{tool_calls: [{{name: f, arguments: {{x: {x}}}}}]}}\n"
             "    eval: {{tool_call: {{name: f, args: {{x: [a]}}}}}}\n")
    assert check(tmp_path, tests.format(x="a"), header) == []
    assert len(check(tmp_path, tests.format(x="b"), header)) == 1


def test_without_golden_check_nothing_is_scored(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text("suite: g\ntests:\n  - id: a\n    prompt: p\n    golden: x\n    eval: {equals: y}\n")
    suites, diagnostics = load_suites([path])
    assert diagnostics == [] and len(suites) == 1
