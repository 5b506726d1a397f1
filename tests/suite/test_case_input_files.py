"""Inputs a user names that are not what they seem: `--filter-file /dev/zero`, a FIFO as `--filter-file` or in
`cases_from`, a case file with no line break in gigabytes. Each must end promptly with an error naming the file
and the fix. `engine` runs as a real subprocess; its timeout is the hang guard (a FIFO with no writer would
block an ordinary open forever, /dev/zero would fill memory)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.run.jobs import MAX_FILTER_FILE_BYTES
from engine.suite.case_readers import MAX_LINE_CHARS
from tests.run.e2e import engine, write_project

KEY_ENV = "ENGINE_TEST_KEY"
HANG_GUARD_S = 120


def sparse(path: Path, head: bytes, size: int) -> Path:
    """A file of `size` bytes: `head`, then NUL bytes that take no disk space (a hole)."""
    with path.open("wb") as handle:
        handle.write(head)
        handle.truncate(size)
    return path


def run_with_filter(tmp_path: Path, filter_file: str) -> tuple[int, str]:
    suites, models = write_project(tmp_path, "http://127.0.0.1:9/v1")
    done = engine("run", str(suites), "--models", str(models), "--filter-file", filter_file, "--out",
                  str(tmp_path / "out"), env={KEY_ENV: "k"}, timeout=HANG_GUARD_S)
    return done.returncode, done.stderr


def test_filter_file_dev_zero_is_refused_as_not_a_regular_file(tmp_path: Path) -> None:
    code, err = run_with_filter(tmp_path, "/dev/zero")
    assert code == 2 and "--filter-file /dev/zero: not a regular file (it is a character device)" in err
    assert "save the data to a file" in err and "Traceback" not in err


def test_filter_file_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "keep.fifo"
    os.mkfifo(fifo)
    code, err = run_with_filter(tmp_path, str(fifo))
    assert code == 2 and f"--filter-file {fifo}: not a regular file (it is a FIFO (named pipe))" in err


def test_filter_file_over_the_cap_is_refused(tmp_path: Path) -> None:
    big = sparse(tmp_path / "keep.txt", b"capitals/france\n", MAX_FILTER_FILE_BYTES + 1)
    code, err = run_with_filter(tmp_path, str(big))
    assert code == 2 and f"--filter-file {big}: larger than 64 MiB" in err


CASES_SUITE = """\
suite: table
tests:
  - id: "q-{{{{ n }}}}"
    prompt: "question {{{{ n }}}}"
    eval: {{contains: ok}}
    cases_from: {source}
"""


def validate(tmp_path: Path, source: str) -> tuple[int, str]:
    suites = tmp_path / "suites"
    suites.mkdir(exist_ok=True)
    (suites / "table.yaml").write_text(CASES_SUITE.format(source=source))
    done = engine("validate", str(suites), timeout=HANG_GUARD_S)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("name, head", [("cases.csv", b"n\n1\n"), ("cases.jsonl", b'{"n": 1}\n')])
def test_a_two_gigabyte_line_is_an_error_at_that_line(tmp_path: Path, name: str, head: bytes) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    sparse(suites / name, head, 2 * 1024**3)
    code, out = validate(tmp_path, name)
    line = head.count(b"\n") + 1
    assert code == 1, out
    assert f"suites/{name}:{line}:1: error: line {line} is longer than {MAX_LINE_CHARS:,} characters" in out
    assert "line break missing" in out and "Traceback" not in out


def test_a_fifo_in_cases_from_is_not_a_regular_file_not_a_missing_one(tmp_path: Path) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    os.mkfifo(suites / "cases.csv")
    code, out = validate(tmp_path, "cases.csv")
    assert code == 1 and "is not a regular file; `cases_from` reads a regular file" in out
    assert "no such file" not in out


def test_a_fifo_in_a_cases_folder_is_refused_without_blocking(tmp_path: Path) -> None:
    data = tmp_path / "suites" / "data"
    data.mkdir(parents=True)
    (data / "a.csv").write_text("n\n1\n")
    os.mkfifo(data / "b.csv")
    code, out = validate(tmp_path, "data/")
    assert code == 1 and "suites/data/b.csv: error: not a regular file (it is a FIFO (named pipe))" in out
