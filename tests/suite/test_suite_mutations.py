"""Property tests: mutated valid suites never crash the validator and always get FILE:LINE:COL errors.

Each mutation is built to be certainly wrong (a required key dropped, a value of the wrong type, an
unknown key, a truncation before the first test is complete); free-form garbage may happen to stay valid,
so for it the property is only "no traceback, and exit 1 comes with error lines".
"""

from __future__ import annotations

import copy
import io
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from typer.testing import CliRunner

from engine.base.yaml import load_yaml_file
from engine.cli import app
from engine.suite.schema import load_schema

VALID = Path(__file__).resolve().parent / "fixtures" / "valid" / "capitals.yaml"
BASE: dict[str, Any] = load_yaml_file(VALID).data
TEXT = VALID.read_text(encoding="utf-8")
ERROR_LINE = re.compile(r"^.+:\d+:\d+: error: .+$", re.MULTILINE)
SETTINGS = settings(max_examples=int(os.environ.get("SUITE_FUZZ_EXAMPLES", "25")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
RUNNER = CliRunner()


def run_validate(text: str) -> tuple[int, str, BaseException | None]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mutant.yaml"
        path.write_text(text, encoding="utf-8")
        result = RUNNER.invoke(app, ["validate", str(path)])
    crash = result.exception if result.exception and not isinstance(result.exception, SystemExit) else None
    return result.exit_code, result.stderr, crash


def assert_reported(text: str) -> None:
    code, stderr, crash = run_validate(text)
    assert crash is None, f"traceback for:\n{text}"
    assert code == 1, f"accepted a broken suite:\n{text}\n{stderr}"
    assert ERROR_LINE.search(stderr), stderr
    assert "Traceback" not in stderr and "internal error" not in stderr


REQUIRED = [("suite",), ("tests",), ("tests", 0, "id"), ("tests", 1, "prompt"), ("tests", 4, "id"),
            ("tools", "get_weather", "parameters")]
TYPED = [("suite",), ("tests",), ("tests", 0, "id"), ("tests", 0, "prompt"), ("tests", 0, "eval"),
         ("tests", 2, "tools"), ("defaults", "max_tokens"), ("defaults", "threshold"), ("tests", 4, "cases"),
         ("tests", 2, "eval", "tool_call", "args", "city"), ("evaluators", "one_word", "all"),
         ("tests", 3, "eval", "all", 0, "json_field", "path")]
WRONG_VALUES = st.sampled_from([12345, -1.5, True, None, [], {}, "words here", ["a", 1], {"x": {"y": 1}}])
MAPPINGS = [(), ("tests", 0), ("tests", 3), ("defaults",), ("tests", 0, "eval"), ("tests", 2, "eval", "tool_call"),
            ("tools", "get_weather")]


def _parent(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        data = data[part]
    return data


def _dump(data: Any) -> str:
    out = io.StringIO()
    YAML().dump(data, out)   # keys in their order, text written as YAML 1.2 reads it back
    return out.getvalue()


def _wrong_for(path: tuple[Any, ...], value: Any) -> bool:
    """Whether `value` is certainly invalid at `path` (some slots accept several types)."""
    accepts = {
        "suite": lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v),
        "tests": lambda v: False if v == [] else isinstance(v, list) and all(isinstance(i, dict) for i in v),
        "id": lambda v: isinstance(v, str) and v != "",
        "prompt": lambda v: isinstance(v, str),
        "eval": lambda v: False,  # none of the sampled values is an evaluator
        "tools": lambda v: v == [] or (isinstance(v, list) and all(isinstance(i, str) for i in v)),
        "max_tokens": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
        "threshold": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1,
        "cases": lambda v: isinstance(v, list) and v != [] and all(isinstance(i, dict) for i in v),
        "city": lambda v: isinstance(v, list) and v != [],
        "all": lambda v: False,
        "path": lambda v: isinstance(v, str),
    }
    return not accepts[path[-1]](value)


@SETTINGS
@given(st.sampled_from(REQUIRED))
def test_dropping_a_required_key_is_reported(path: tuple[Any, ...]) -> None:
    data = copy.deepcopy(BASE)
    del _parent(data, path)[path[-1]]
    assert_reported(_dump(data))


@SETTINGS
@given(st.sampled_from(TYPED), WRONG_VALUES)
def test_a_value_of_the_wrong_type_is_reported(path: tuple[Any, ...], value: Any) -> None:
    assume(_wrong_for(path, value))
    data = copy.deepcopy(BASE)
    _parent(data, path)[path[-1]] = value
    assert_reported(_dump(data))


def _schema_words() -> set[str]:
    """Every property name the suite schema knows anywhere (a key valid somewhere is not "unknown" everywhere)."""
    words: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            words.update(node.get("properties", {}))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(load_schema("suite"))
    return words


@SETTINGS
@given(st.sampled_from(MAPPINGS), st.from_regex(r"[a-z][a-z_]{2,12}", fullmatch=True), WRONG_VALUES)
def test_an_unknown_key_is_reported(where: tuple[Any, ...], key: str, value: Any) -> None:
    data = copy.deepcopy(BASE)
    target = data
    for part in where:
        target = target[part]
    assume(key not in target and key not in _schema_words())
    target[key] = value
    assert_reported(_dump(data))


FIRST_TEST_PROMPT = TEXT.index("    prompt: What is the capital of France?")


@SETTINGS
@given(st.integers(min_value=0, max_value=FIRST_TEST_PROMPT))
def test_a_truncated_file_is_reported(length: int) -> None:
    assert_reported(TEXT[:length])


@SETTINGS
@given(st.integers(min_value=0, max_value=TEXT.count("\n")), st.text(max_size=40))
def test_garbage_never_crashes(line: int, garbage: str) -> None:
    lines = TEXT.splitlines(keepends=True)
    lines.insert(line, garbage + "\n")
    code, stderr, crash = run_validate("".join(lines))
    assert crash is None
    assert "internal error" not in stderr
    assert code in (0, 1)
    if code == 1:
        assert ERROR_LINE.search(stderr), stderr
