"""The hidden check's verdict comes from the check: end to end with `engine run` and a scripted model, at each
isolation level the machine offers, and on a real Workspace for the report, skip and reason rules.

- A check written the natural way (`python3 -c 'import greet; ...'`, `python3 -m pytest tests`) finds the
  model's module, and passes only when the model fixed it; the model's `os._exit(0)` / `sys.exit(0)` in the
  module the check imports (or in the function it calls) never passes it.
- A `pytest:` check passes only on a report that names a test with none failed, errored or (unless
  allowed) skipped; its reason names the failing tests and their assertion lines first.
- The JUnit report is read with a size cap, never through a symlink, by a parser that refuses any DOCTYPE.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.errors import EvaluatorConfigError
from engine.evaluators.workspace_check import workspace_check
from engine.model.workspace import WorkspaceSpec
from engine.workspace import check as hidden
from engine.workspace.check import REPORT_MAX_BYTES, HiddenCheck, ReportError, parse_report, read_report
from engine.workspace.workspace import Workspace
from tests.agent.scripted_server import Turn, model_turns
from tests.run.agent_project import scripted_server_thread
from tests.run.e2e import engine
from tests.workspace.test_workspace_attacks import CHECK_LEVELS, MODELS, level_or_skip

GREET = 'def greet():\n    return "helo"\n'
FIXED = 'def greet():\n    return "hello"\n'
TEST_GREET = "from greet import greet\n\n\ndef test_greet():\n    assert greet() == 'hello'\n"
ONE_LINER = "python3 -c 'import greet; assert greet.greet() == \"hello\"'"

# What the model leaves in greet.py, per task; only `fixed` solves it.
MODEL_WRITES = {
    "fixed": FIXED,
    "untouched": None,
    "exit-on-import": "import os; os._exit(0)\n",
    "sys-exit-on-import": "import sys; sys.exit(0)\n",
    "exit-when-called": "import os\n\n\ndef greet():\n    os._exit(0)\n",
    "ctypes-exit-on-import": "import ctypes; ctypes.CDLL(None)._exit(0)\n",
}
CHECKS = {   # how the suite writes the check
    "one-liner": f"command: {ONE_LINER}",   # exactly as a suite writes it
    "pytest-command": "command: python3 -m pytest -q tests\n        files: {tests: checks/greet}",
    "pytest": "pytest: tests/\n        files: {tests: checks/greet}",
}


def _suite() -> str:
    tests = []
    for check, form in CHECKS.items():
        for name in MODEL_WRITES:
            tests.append(f"""\
  - id: {check}-{name}
    prompt: "TASK {name}. greet.py returns a misspelled greeting. Fix it."
    workspace: workspaces/greet
    tools: [write_file]
    eval:
      workspace_check:
        {form}
""")
    return "suite: greet-checks\ntests:\n" + "".join(tests)


def greeter(messages: list[dict[str, Any]]) -> Turn:
    user = next(m["content"] for m in messages if m.get("role") == "user")
    written = MODEL_WRITES[user.split()[1].rstrip(".")]
    if model_turns(messages) == 0 and written is not None:
        return Turn(tool_calls=[{"name": "write_file", "arguments": {"path": "greet.py", "content": written}}])
    return Turn(content="Done.")


@pytest.mark.parametrize("level", CHECK_LEVELS)
def test_the_natural_check_forms_pass_the_fix_and_nothing_else(level: str, tmp_path: Path) -> None:
    env = level_or_skip(level)
    suites = tmp_path / "suites"
    (suites / "workspaces" / "greet").mkdir(parents=True)
    (suites / "workspaces" / "greet" / "greet.py").write_text(GREET)
    (suites / "checks" / "greet").mkdir(parents=True)
    (suites / "checks" / "greet" / "test_greet.py").write_text(TEST_GREET)
    (suites / "greet.yaml").write_text(_suite())
    with scripted_server_thread(greeter) as server:
        (tmp_path / "models.yaml").write_text(MODELS.format(base_url=server.base_url))
        done = engine("run", str(suites), "--models", str(tmp_path / "models.yaml"), "--out", str(tmp_path / "out"),
                      "--quiet", "--concurrency", "4", env=env, timeout=900)
    assert done.returncode in (0, 1), done.stderr
    (run_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir() and p.name != "latest"]
    df = pd.read_parquet(run_dir).set_index("test_id")
    assert len(df) == len(CHECKS) * len(MODEL_WRITES)
    for check in CHECKS:
        for name in MODEL_WRITES:
            row = df.loc[f"{check}-{name}"]
            (verdict,) = row["evaluators"]
            assert row["isolation"] == level
            assert bool(row["passed"]) == (name == "fixed"), (check, name, verdict["reason"])
            assert not verdict["error"], (check, name, verdict["reason"])
    assert "ModuleNotFoundError" not in str(df["evaluators"].tolist())
    reason = df.loc["pytest-untouched", "evaluators"][0]["reason"]
    assert reason.startswith("the check failed: 1 failed of 1 tests: tests.test_greet.test_greet "
                             "(tests/test_greet.py:5): assert greet() == 'hello': AssertionError: assert 'helo' == "
                             "'hello'"), reason
    assert "did not reach its end" in df.loc["pytest-exit-on-import", "evaluators"][0]["reason"]
    assert "(pid " in df.loc["one-liner-exit-on-import", "evaluators"][0]["reason"]


# --------------------------------------------------------------------------------------------
# On a real workspace: the pytest check's rules


def _check(files: dict[str, str], check: HiddenCheck) -> Any:
    workspace = Workspace.create(WorkspaceSpec(files=files))
    try:
        return workspace.check(check)
    finally:
        workspace.close()


SKIPPING = """\
import pytest


def test_passes():
    assert True


@pytest.mark.skip(reason="not today")
def test_skipped():
    assert False


@pytest.mark.xfail(reason="known")
def test_expected_to_fail():
    assert False
"""


def test_a_skip_fails_the_check_unless_it_allows_skips_and_some_test_passed() -> None:
    strict = _check({"tests/test_s.py": SKIPPING}, HiddenCheck(pytest=("tests",)))
    assert not strict.passed
    assert strict.reason.startswith("2 of 3 tests skipped (a skip fails a hidden check unless it says allow_skips: "
                                    "true): tests.test_s.test_skipped"), strict.reason
    allowed = _check({"tests/test_s.py": SKIPPING}, HiddenCheck(pytest=("tests",), allow_skips=True))
    assert allowed.passed and allowed.score == 1.0, allowed.reason
    only_skips = _check({"tests/test_s.py": SKIPPING.replace("def test_passes", "def passes")},
                        HiddenCheck(pytest=("tests",), allow_skips=True))
    assert not only_skips.passed and only_skips.reason == "no test passed (2 skipped)"


def test_zero_tests_collected_is_a_failure_with_that_reason() -> None:
    result = _check({"tests/test_none.py": "def helper():\n    pass\n"}, HiddenCheck(pytest=("tests/",)))
    assert not result.passed
    assert result.reason.startswith("0 tests collected in tests/ (pytest exit code 5): the check ran no test")
    selected = _check({"tests/test_a.py": "def test_a():\n    pass\n"}, HiddenCheck(pytest=("tests",),
                                                                                   args=("-k", "nothing")))
    assert not selected.passed and selected.reason.startswith("0 tests collected"), selected.reason


def test_the_reason_names_the_failing_tests_first_not_the_warnings_on_stderr() -> None:
    noisy = ("import sys, warnings\n\n\ndef test_a():\n    warnings.warn('old API', DeprecationWarning)\n"
             "    print('noise ' * 50, file=sys.stderr)\n    assert 1 + 1 == 3\n\n\n"
             "def test_b():\n    assert [1, 2] == [1, 2, 3]\n\n\ndef test_c():\n    pass\n")
    result = _check({"tests/test_noisy.py": noisy}, HiddenCheck(pytest=("tests",)))
    assert not result.passed and result.score == pytest.approx(1 / 3)
    assert result.reason.startswith("2 failed of 3 tests: tests.test_noisy.test_a (tests/test_noisy.py:7): assert "
                                    "1 + 1 == 3: assert (1 + 1) == 3; tests.test_noisy.test_b (tests/test_noisy.py:"
                                    "11): assert [1, 2] == [1, 2, 3]"), result.reason
    assert "noise" not in result.reason and "Warning" not in result.reason
    command = _check({"tests/test_noisy.py": noisy}, HiddenCheck(command="python3 -m pytest -q -W default tests"))
    assert command.reason.startswith("exit code 1: FAILED tests/test_noisy.py::test_a - assert (1 + 1) == 3 | "
                                     "FAILED tests/test_noisy.py::test_b"), command.reason
    assert "noise" not in command.reason


def test_the_check_reads_the_engines_configuration_only_and_finds_the_workspaces_modules() -> None:
    files = {"greet.py": FIXED, "tests/test_greet.py": TEST_GREET,
             "pytest.ini": "[pytest]\naddopts = --co -p no:python\n", "conftest.py": "raise SystemExit(3)\n",
             "hashlib.py": "import os; os._exit(0)\n", "sitecustomize.py": "import os; os._exit(0)\n"}
    result = _check(files, HiddenCheck(pytest=("tests/test_greet.py::test_greet",)))
    assert result.passed and result.reason == "1 of 1 tests passed", result.reason


def test_a_script_finds_modules_beside_it_and_in_the_workspace_as_python_would() -> None:
    files = {"greet.py": FIXED, "tools/helper.py": "WORD = 'hello'\n",
             "tools/run.py": "import greet, helper\nassert greet.greet() == helper.WORD\nprint('ok')\n"}
    for command in ("python3 tools/run.py", "cd tools && python3 run.py", "cd tools && python3 -c 'import helper'"):
        result = _check(files, HiddenCheck(command=command))
        assert result.passed, (command, result.reason)


def test_environment_given_to_the_check_reaches_the_tests() -> None:
    test = "import os\n\n\ndef test_env():\n    assert os.environ['TEST_DIR'] == '/somewhere'\n"
    result = _check({"t/test_env.py": test}, HiddenCheck(pytest=("t",), env={"TEST_DIR": "/somewhere"}))
    assert result.passed, result.reason


UNITTEST_OUTPUT = """\
F.
======================================================================
FAIL: test_mean (test_stats.StatsTest.test_mean)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/w/tests/test_stats.py", line 8, in test_mean
    self.assertEqual(mean([1, 2, 3, 4]), 2.5)
AssertionError: 3.3333333333333335 != 2.5

----------------------------------------------------------------------
Ran 2 tests in 0.001s

FAILED (failures=1)
"""
TRACEBACK_OUTPUT = """\
/w/old.py:3: DeprecationWarning: old API
  warnings.warn("old API", DeprecationWarning)
Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "/w/greet.py", line 2, in greet
    return 1 / 0
ZeroDivisionError: division by zero
"""


def test_a_failed_commands_reason_leads_with_the_failure_not_the_warnings() -> None:
    summary = hidden.output_summary
    assert summary("", UNITTEST_OUTPUT) == ("FAIL: test_mean (test_stats.StatsTest.test_mean): AssertionError: "
                                            "3.3333333333333335 != 2.5")
    assert summary("", TRACEBACK_OUTPUT) == "ZeroDivisionError: division by zero | at /w/greet.py:2: return 1 / 0"
    usage = "ERROR: usage: pytest [options]\npytest: error: unrecognized arguments: --bogus\n"
    assert summary("", usage) == "ERROR: usage: pytest [options] | pytest: error: unrecognized arguments: --bogus"
    assert len(summary("x" * 5000, "")) == 600


# --------------------------------------------------------------------------------------------
# Reading the report


def test_a_report_declaring_entities_is_refused_before_any_expansion() -> None:
    laughs = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
              + b"".join(b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
                         for i in range(1, 10))
              + b']><testsuites><testsuite><testcase classname="a" name="b"><failure message="&lol9;"/>'
                b"</testcase></testsuite></testsuites>")
    with pytest.raises(ReportError, match="DOCTYPE"):
        parse_report(laughs)
    utf16 = '<?xml version="1.0" encoding="utf-16"?><!DOCTYPE x [<!ENTITY a "b">]><testsuites/>'.encode("utf-16")
    with pytest.raises(ReportError, match="DOCTYPE"):
        parse_report(utf16)
    with pytest.raises(ReportError, match="malformed"):
        parse_report(b"<testsuites><testcase name='x'>")


def test_a_report_is_counted_from_its_testcases() -> None:
    report = parse_report(b'<testsuites><testsuite tests="99" failures="0">'
                          b'<testcase classname="t.m" name="ok"/>'
                          b'<testcase classname="t.m" name="bad"><failure message="AssertionError: no">'
                          b"t/m.py:3: in bad\n    assert f()\nE   AssertionError: no</failure></testcase>"
                          b'<testcase classname="t.m" name="both"><failure message="x"/><error message="y"/></testcase>'
                          b'<testcase classname="t.m" name="skip"><skipped message="later"/></testcase>'
                          b"</testsuite></testsuites>")
    assert report.counts == {"passed": 1, "failed": 1, "error": 1, "skipped": 1} and report.total == 4
    assert report.cases[0].describe() == "t.m.bad (t/m.py:3): assert f(): AssertionError: no"


def test_a_report_is_never_read_through_a_link_nor_past_its_cap(tmp_path: Path) -> None:
    secret = tmp_path / "secret.xml"
    secret.write_text('<testsuites><testsuite><testcase classname="a" name="b"/></testsuite></testsuites>')
    (tmp_path / "report.xml").symlink_to(secret)
    with pytest.raises(OSError):
        read_report(tmp_path / "report.xml")
    os.mkfifo(tmp_path / "fifo.xml")
    with pytest.raises(ReportError, match="not a regular file"):
        read_report(tmp_path / "fifo.xml")
    big = tmp_path / "big.xml"
    with big.open("wb") as handle:
        handle.write(b"<testsuites>" + b" " * REPORT_MAX_BYTES + b"</testsuites>")
    with pytest.raises(ReportError, match="larger than 16 MiB"):
        read_report(big)
    with pytest.raises(FileNotFoundError):
        read_report(tmp_path / "none.xml")
    shutil.rmtree(tmp_path)


# --------------------------------------------------------------------------------------------
# The suite's options


@pytest.mark.parametrize("value,message", [
    ({"command": "true", "pytest": "tests"}, "one of the two"),
    ({}, "one of the two"),
    ({"pytest": "../tests"}, "no leading / or -, no .."),
    ({"pytest": ["-k", "x"]}, "no leading / or -, no .."),
    ({"pytest": "tests", "args": ["-c", "mine.ini"]}, "'-c' is set by the engine"),
    ({"pytest": "tests", "args": ["--rootdir=/"]}, "'--rootdir=/' is set by the engine"),
    ({"pytest": "tests", "args": ["--junitxml", "x.xml"]}, "'--junitxml' is set by the engine"),
    ({"pytest": "tests", "allow_skips": "yes"}, "`allow_skips` is true or false"),
    ({"command": "true", "allow_skips": True}, "`allow_skips` goes with `pytest:`"),
    ({"pytest": "tests", "env": {"PYTHONPATH": "."}}, "PYTHONPATH is set by the engine"),
    ({"pytest": "tests", "env": {"PATH": "/x"}}, "PATH is set by the engine"),
    ({"pytest": "tests", "env": {"N": 3}}, "quote numbers"),
    ({"pytest": "tests", "timeout": 3}, "unknown option(s) timeout"),
])
def test_a_check_that_cannot_work_is_refused_with_the_fix(value: dict[str, Any], message: str) -> None:
    with pytest.raises(EvaluatorConfigError) as raised:
        workspace_check(value, {})
    assert message in str(raised.value)
