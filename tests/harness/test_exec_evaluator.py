"""The exec evaluator through the built-in harnesses, with real sandboxed runs."""

from __future__ import annotations

import shutil

import pytest
from harness_helpers import run_exec

from engine.harness.isolation import SANDBOX_PATH, isolation

ADD_CASES = [
    {"call": "add(2, 3)", "expect": 5},
    {"call": "add(-1, 1)", "expect": 0},
    {"assert": "add(0.5, 0.25) == 0.75"},
    {"call": "pair(1)", "expect": [1, 1]},
]
GOOD = (
    "Sure:\n```python\n"
    "def add(a, b):\n    print('debug noise')\n    return a + b\n\n"
    "def pair(x):\n    return (x, x)\n```\n"
)


def test_python_function_all_cases_pass() -> None:
    verdict = run_exec({"harness": "python-function", "cases": ADD_CASES}, GOOD)
    assert verdict.passed and verdict.score == 1.0, verdict.reason
    assert verdict.reason == "4/4 cases passed"
    assert verdict.details["cases_total"] == 4
    assert verdict.details["isolation"] == isolation()


def test_python_function_partial_credit_names_the_failures() -> None:
    code = "```python\ndef add(a, b):\n    if a < 0:\n        raise ValueError('negative')\n    return a * b\n" \
           "def pair(x):\n    return [x, x]\n```"
    verdict = run_exec({"harness": "python-function", "cases": ADD_CASES}, code)
    assert verdict.score == pytest.approx(0.25)
    assert not verdict.passed and not verdict.error
    assert verdict.reason.startswith("1/4 cases passed; failed: ")
    # Cases are counted from 1: "case 1" is the first case written.
    assert "case 1 `add(2, 3)`: returned 6, expected 5" in verdict.reason
    assert "case 2 `add(-1, 1)`: raised ValueError: negative" in verdict.reason
    assert "case 3 `add(0.5, 0.25) == 0.75`: assertion is false" in verdict.reason


def test_python_function_code_that_does_not_load() -> None:
    verdict = run_exec({"harness": "python-function", "cases": ADD_CASES[:1]}, "```python\ndef add(a, b)\n```")
    assert verdict.score == 0.0
    assert "the code did not load: SyntaxError" in verdict.reason


def test_python_function_a_hanging_case_fails_the_rest_with_the_timeout() -> None:
    code = "```python\ndef add(a, b):\n    while a < 0:\n        pass\n    return a + b\n```"
    verdict = run_exec({"harness": "python-function", "timeout_s": 1,
                        "cases": [{"call": "add(1, 1)", "expect": 2}, {"call": "add(-1, 1)", "expect": 0}]}, code)
    assert verdict.score == pytest.approx(0.5)
    assert "case 2 `add(-1, 1)`: did not finish: timed out" in verdict.reason


def test_python_function_case_numbers_count_from_one_everywhere() -> None:
    """The reason, the syntax error's own file name and the malformed-case error all say "case 2"."""
    cases = [{"call": "add(1, 1)", "expect": 2}, {"call": "add(1,", "expect": 2}]
    verdict = run_exec({"harness": "python-function", "cases": cases}, GOOD)
    assert verdict.score == pytest.approx(0.5)
    assert "failed: case 2 `add(1,`: raised SyntaxError: " in verdict.reason
    assert "(case 2, line 1)" in verdict.reason
    bad = run_exec({"harness": "python-function", "cases": [cases[0], {"call": "add(1, 1)"}]}, GOOD)
    assert bad.error and bad.reason.startswith("exec: case 2 must be {call: ..., expect: ...}")


def test_python_function_needs_cases() -> None:
    verdict = run_exec({"harness": "python-function"}, GOOD)
    assert verdict.error and "cases" in verdict.reason


def test_python_function_printing_a_fake_result_line_does_not_count() -> None:
    code = "```python\nprint('@@case-0@@{\"case\": 0, \"ok\": true}')\ndef add(a, b):\n    return 0\n```"
    verdict = run_exec({"harness": "python-function", "cases": ADD_CASES[:1]}, code)
    assert verdict.score == 0.0


def test_python_script_stdout_and_exit_code() -> None:
    assert run_exec({"harness": "python-script", "expect_stdout": "hello\n"}, "print('hello')  ").passed
    wrong = run_exec({"harness": "python-script", "expect_stdout": "hello"}, "```python\nprint('bye')\n```")
    assert not wrong.passed and wrong.reason == "stdout was 'bye\\n', expected 'hello'"
    crash = run_exec({"harness": "python-script"}, "```python\nraise SystemExit(3)\n```")
    assert crash.reason.startswith("exit code 3, expected 0")
    assert run_exec({"harness": "python-script", "expect_exit_code": 3}, "import sys; sys.exit(3)").passed


def test_no_fenced_block_is_said_on_the_verdict() -> None:
    verdict = run_exec({"harness": "python-script"}, "print(1)")
    assert "no fenced code block found; ran the whole answer" in verdict.reason


def test_bash_harness() -> None:
    verdict = run_exec({"harness": "bash", "expect_stdout": "6"}, "```bash\necho $((1 + 2 + 3))\n```")
    assert verdict.passed, verdict.reason


@pytest.mark.skipif(shutil.which("node", path=SANDBOX_PATH) is None, reason="node is not installed here")
def test_node_harness() -> None:
    verdict = run_exec({"harness": "node", "expect_stdout": "6"},
                       "```js\nconsole.log([1, 2, 3].reduce((a, b) => a + b))\n```")
    assert verdict.passed, verdict.reason
    failing = run_exec({"harness": "node"}, "```javascript\nthrow new Error('boom')\n```")
    assert not failing.passed and "boom" in failing.reason


def test_a_missing_program_is_an_error_not_a_fail(tmp_path: object) -> None:
    from pathlib import Path

    suite_dir = Path(str(tmp_path))
    (suite_dir / "ruby.yaml").write_text("language: ruby\nrun: [no-such-interpreter-xyz, main.rb]\n"
                                         "score: exit_code\nfiles: {main.rb: '{{ code }}'}\n")
    verdict = run_exec({"harness": "./ruby.yaml"}, "puts 1", suite_dir=suite_dir)
    assert verdict.error and "'no-such-interpreter-xyz' is not installed" in verdict.reason


def test_unknown_options_are_an_error() -> None:
    verdict = run_exec({"harness": "python-script", "timeout": 3}, "print(1)")
    assert verdict.error and "unknown option(s) timeout" in verdict.reason
