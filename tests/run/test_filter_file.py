"""`engine run --filter-file`: exactly the listed tests; comments; bare ids; every bad line named FILE:LINE."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import UsageError
from engine.run.jobs import read_filter_file, select_listed, select_tests
from tests.factories import make_test

TESTS = [make_test(suite="geo", id="paris"), make_test(suite="geo", id="rome"), make_test(suite="math", id="add-1"),
         make_test(suite="math", id="paris"), make_test(suite="math", id="mul")]


def listed(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "keep.txt"
    path.write_text(text)
    return [f"{t.suite}/{t.id}" for t in select_listed(TESTS, path)]


def test_selects_exactly_the_listed_tests_in_suite_order(tmp_path: Path) -> None:
    text = "# chosen by engine analyze --subset\n\nmath/mul\n  geo/paris   # trailing comment\nadd-1\nmath/mul\n"
    assert listed(tmp_path, text) == ["geo/paris", "math/add-1", "math/mul"]
    assert read_filter_file(tmp_path / "keep.txt") == [(3, "math/mul"), (4, "geo/paris"), (5, "add-1"), (6, "math/mul")]


def test_unknown_and_ambiguous_ids_name_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        listed(tmp_path, "geo/rome\ngeo/rom\nparis\nnothing-like-it\n")
    message = str(caught.value)
    path = tmp_path / "keep.txt"
    assert f"{path}:2: no test 'geo/rom' in the suites loaded; did you mean 'geo/rome'?" in message
    assert f"{path}:3: 'paris' is a test of several suites (geo, math); write it as suite/paris" in message
    assert f"{path}:4: no test 'nothing-like-it'" in message and "fix or remove those lines" in message


def test_empty_or_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="lists no test"):
        listed(tmp_path, "# nothing but comments\n\n")
    with pytest.raises(UsageError, match=r"absent\.txt: no such file"):
        select_listed(TESTS, tmp_path / "absent.txt")


def test_filter_narrows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "keep.txt"
    path.write_text("geo/paris\ngeo/rome\nmath/mul\n")
    assert [t.id for t in select_tests(select_listed(TESTS, path), ["geo/*"])] == ["paris", "rome"]
