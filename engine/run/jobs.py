"""Jobs: one per (model, test, attempt), produced lazily so 100k jobs cost nothing up front."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.base.input_file import InputFileError, read_capped
from engine.base.words import did_you_mean
from engine.errors import UsageError
from engine.model.model_config import ModelConfig
from engine.model.test import Test
from engine.results.rows import row_key
from engine.run.shards import Shard

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


def select_tests(tests: Iterable[Test], filters: Iterable[str]) -> list[Test]:
    """Keep tests matching any filter: a tag, or a glob on the test id or `suite/test id`.

    Args:
        tests: All tests.
        filters: `--filter` values; none keeps every test.
    """
    patterns = list(filters)
    if not patterns:
        return list(tests)
    kept = []
    for test in tests:
        for pattern in patterns:
            if pattern in test.tags or fnmatch.fnmatchcase(test.id, pattern) or \
                    fnmatch.fnmatchcase(f"{test.suite}/{test.id}", pattern):
                kept.append(test)
                break
    return kept


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


def select_listed(tests: Iterable[Test], path: Path) -> list[Test]:
    """Keep exactly the tests a `--filter-file` lists, in suite order (`engine analyze --subset` writes one).

    An entry is `suite/test_id` (what `engine analyze` writes) or a bare `test_id` found in one suite only.

    Args:
        tests: All tests.
        path: The filter file.

    Raises:
        UsageError: An entry names no test (or a bare id found in several suites): FILE:LINE and the fix.
    """
    tests = list(tests)
    by_key = {(t.suite, t.id): t for t in tests}
    suites_of: dict[str, list[str]] = {}
    for test in tests:
        suites_of.setdefault(test.id, []).append(test.suite)
    wanted: set[tuple[str, str]] = set()
    problems = []
    for number, entry in read_filter_file(path):
        suite, _, test_id = entry.partition("/")
        if test_id and (suite, test_id) in by_key:
            wanted.add((suite, test_id))
        elif len(suites_of.get(entry, ())) == 1:
            wanted.add((suites_of[entry][0], entry))
        elif entry in suites_of:
            problems.append(f"{path}:{number}: '{entry}' is a test of several suites "
                            f"({', '.join(suites_of[entry])}); write it as suite/{entry}")
        else:
            near = did_you_mean(entry, [f"{s}/{i}" for s, i in by_key])
            hint = f"; did you mean '{near}'?" if near else " (a line is `suite/test_id` or `test_id`)"
            problems.append(f"{path}:{number}: no test '{entry}' in the suites loaded{hint}")
    if problems:
        more = f"\n... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise UsageError("\n".join(problems[:10]) + more + "\nfix or remove those lines of the filter file "
                         "(it may predate a change to the suites)")
    return [t for t in tests if (t.suite, t.id) in wanted]


def attempts(test: Test, repeat: int | None) -> int:
    """How many attempts a test gets: `--repeat` when given, else the test's `repeat`."""
    return max(1, repeat if repeat is not None else test.repeat)


def runs_on(model: ModelConfig, test: Test) -> bool:
    """Whether `test` can run on `model`: an agent test needs tools, which `/completions` cannot send.

    Such pairs get no job (and no row): the suite is not wrong and the model is not at fault, so an error
    row would count against neither honestly. `engine run` says how many pairs it left out.
    """
    return test.agent is None or model.api != "completions"


def iter_jobs(model: ModelConfig, tests: list[Test], repeat: int | None, *,
              skip: set[str] | frozenset[str] = frozenset(), only: set[str] | None = None,
              shard: Shard | None = None) -> Iterator[Job]:
    """The jobs of one model, attempt-major (attempt 0 of every test first), lazily.

    Args:
        model: The model.
        tests: The selected tests.
        repeat: `--repeat`, or None for each test's own.
        skip: Keys already done (resume).
        only: When given, only these keys run (`--retry-errors`).
        shard: When given, only the jobs this shard owns (`--shard I/N`, by row key).
    """
    tests = [t for t in tests if runs_on(model, t)]
    most = max((attempts(t, repeat) for t in tests), default=0)
    for attempt in range(most):
        for test in tests:
            if attempt >= attempts(test, repeat):
                continue
            key = row_key(model.name, test, attempt)
            if key in skip or (only is not None and key not in only) or (shard is not None and not shard.owns(key)):
                continue
            yield Job(model, test, attempt, key)


def count_jobs(models: list[ModelConfig], tests: list[Test], repeat: int | None, *,
               skip: set[str] | frozenset[str] = frozenset(), only: set[str] | None = None,
               shard: Shard | None = None) -> int:
    """How many jobs `iter_jobs` yields over all models (for the progress total)."""
    return sum(1 for model in models for _ in iter_jobs(model, tests, repeat, skip=skip, only=only, shard=shard))
