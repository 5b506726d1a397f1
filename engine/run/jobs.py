"""Jobs: one per (model, test, attempt), produced lazily so 100k jobs cost nothing up front.

The tests come as a sequence (a `TestSet` from the loader): choosing and counting jobs reads only each test's key
(`keys_of`), and a job's Test is read (rebuilt) only when the job is handed out.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.base.input_file import InputFileError, read_capped
from engine.base.words import did_you_mean
from engine.errors import UsageError
from engine.model.model_config import ModelConfig
from engine.model.test import Test, TestKey
from engine.results.rows import row_key
from engine.run.shards import Shard
from engine.suite.stored_tests import keys_of, subset

#: The largest `--filter-file` read: a million `suite/test_id` lines fit many times over.
MAX_FILTER_FILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Job:
    """One call to make and score.

    Args:
        model: The model (with a base URL).
        test: The test.
        attempt: 0-based repeat index.
        key: The row key (`engine.results.rows.row_key`).
    """

    model: ModelConfig
    test: Test
    attempt: int
    key: str


def select_tests(tests: Sequence[Test], filters: Iterable[str]) -> Sequence[Test]:
    """Keep tests matching any filter: a tag, or a glob on the test id or `suite/test id`.

    Args:
        tests: All tests.
        filters: `--filter` values; none keeps every test.
    """
    patterns = list(filters)
    if not patterns:
        return tests
    return subset(tests, (i for i, key in enumerate(keys_of(tests)) if any(
        pattern in key.tags or fnmatch.fnmatchcase(key.id, pattern) or fnmatch.fnmatchcase(f"{key.suite}/{key.id}",
                                                                                            pattern)
        for pattern in patterns)))


def read_filter_file(path: Path) -> list[tuple[int, str]]:
    """The entries of a `--filter-file`: (line number, test id), one id a line; `#` starts a comment.

    A comment is a line whose first non-blank character is `#`, or the rest of a line after a blank and `#`.

    Raises:
        UsageError: The file cannot be read, is not a regular file, is over `MAX_FILTER_FILE_BYTES`, or lists no test.
    """
    try:
        text = read_capped(path, "--filter-file", MAX_FILTER_FILE_BYTES).decode("utf-8")
    except InputFileError as exc:
        raise UsageError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"--filter-file {path}: not UTF-8 text ({exc.reason} at byte {exc.start}); a filter file "
                         f"lists one `suite/test_id` a line") from None
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.strip()
        for mark in (" #", "\t#"):
            entry = entry.split(mark, 1)[0].strip()
        if entry and not entry.startswith("#"):
            entries.append((number, entry))
    if not entries:
        raise UsageError(f"--filter-file {path}: lists no test (one `suite/test_id` or `test_id` a line)")
    return entries


def select_listed(tests: Sequence[Test], path: Path) -> Sequence[Test]:
    """Keep exactly the tests a `--filter-file` lists, in suite order (`engine analyze --subset` writes one).

    An entry is `suite/test_id` (what `engine analyze` writes) or a bare `test_id` found in one suite only.
    What is held grows with the file, not the suites: the tests' keys are read twice instead.

    Args:
        tests: All tests.
        path: The filter file.

    Raises:
        UsageError: An entry names no test (or a bare id found in several suites): FILE:LINE and the fix.
    """
    entries = read_filter_file(path)
    as_written = {entry for _, entry in entries}
    as_pairs = {(suite, test_id) for suite, _, test_id in (entry.partition("/") for entry in as_written) if test_id}
    found: set[tuple[str, str]] = set()        # (suite, test id) pairs the entries may name, that exist
    suites_of: dict[str, list[str]] = {}       # bare entry -> the suites with a test of that id
    keys = keys_of(tests)
    for key in keys:
        if (key.suite, key.id) in as_pairs:
            found.add((key.suite, key.id))
        if key.id in as_written:
            suites_of.setdefault(key.id, []).append(key.suite)
    wanted: set[tuple[str, str]] = set()
    problems = []
    for number, entry in entries:
        suite, _, test_id = entry.partition("/")
        if test_id and (suite, test_id) in found:
            wanted.add((suite, test_id))
        elif len(suites_of.get(entry, ())) == 1:
            wanted.add((suites_of[entry][0], entry))
        elif entry in suites_of:
            problems.append(f"{path}:{number}: '{entry}' is a test of several suites "
                            f"({', '.join(suites_of[entry])}); write it as suite/{entry}")
        else:
            near = did_you_mean(entry, [f"{key.suite}/{key.id}" for key in keys])
            hint = f"; did you mean '{near}'?" if near else " (a line is `suite/test_id` or `test_id`)"
            problems.append(f"{path}:{number}: no test '{entry}' in the suites loaded{hint}")
    if problems:
        more = f"\n... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise UsageError("\n".join(problems[:10]) + more + "\nfix or remove those lines of the filter file "
                         "(it may predate a change to the suites)")
    return subset(tests, (i for i, key in enumerate(keys) if (key.suite, key.id) in wanted))


def attempts(test: TestKey, repeat: int | None) -> int:
    """How many attempts a test gets: `--repeat` when given, else the test's `repeat`."""
    return max(1, repeat if repeat is not None else test.repeat)


def runs_on(model: ModelConfig, test: TestKey) -> bool:
    """Whether `test` can run on `model`: an agent test needs tools, which `/completions` cannot send.

    Such pairs get no job (and no row): the suite is not wrong and the model is not at fault, so an error
    row would count against neither honestly. `engine run` says how many pairs it left out.
    """
    return test.agent is None or model.api != "completions"


def _job_keys(model: ModelConfig, tests: Sequence[Test], repeat: int | None, *,
              skip: set[str] | frozenset[str], only: set[str] | None,
              shard: Shard | None) -> Iterator[tuple[int, int, str]]:
    """(index in `tests`, attempt, row key) of each job of `iter_jobs`, in its order, reading only the keys."""
    keys = keys_of(tests)
    most = max((attempts(k, repeat) for k in keys if runs_on(model, k)), default=0)
    for attempt in range(most):
        for index, test in enumerate(keys):
            if attempt >= attempts(test, repeat) or not runs_on(model, test):
                continue
            key = row_key(model.name, test, attempt)
            if key in skip or (only is not None and key not in only) or (shard is not None and not shard.owns(key)):
                continue
            yield index, attempt, key


def iter_jobs(model: ModelConfig, tests: Sequence[Test], repeat: int | None, *,
              skip: set[str] | frozenset[str] = frozenset(), only: set[str] | None = None,
              shard: Shard | None = None) -> Iterator[Job]:
    """The jobs of one model, attempt-major (attempt 0 of every test first), lazily: a job's test is read as the
    job is handed out.

    Args:
        model: The model.
        tests: The selected tests.
        repeat: `--repeat`, or None for each test's own.
        skip: Keys already done (resume).
        only: When given, only these keys run (`--retry-errors`).
        shard: When given, only the jobs this shard owns (`--shard I/N`, by row key).
    """
    for index, attempt, key in _job_keys(model, tests, repeat, skip=skip, only=only, shard=shard):
        yield Job(model, tests[index], attempt, key)


def count_jobs(models: list[ModelConfig], tests: Sequence[Test], repeat: int | None, *,
               skip: set[str] | frozenset[str] = frozenset(), only: set[str] | None = None,
               shard: Shard | None = None) -> int:
    """How many jobs `iter_jobs` yields over all models (for the progress total); no test is read."""
    return sum(1 for model in models for _ in _job_keys(model, tests, repeat, skip=skip, only=only, shard=shard))
