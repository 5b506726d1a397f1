"""Suite files -> validated, expanded `Suite`s: YAML, then schema, then meaning checks, then expansion.

One pass reports every problem in every file. A file with any error yields no Suite; its diagnostics are
still returned. Warnings (e.g. a golden `1.10` read as the number 1.1) do not stop a suite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.base.yaml import SUITE_FILE, load_yaml_file, size_limit
from engine.errors import Diagnostic, StorageError
from engine.evaluators import score
from engine.model.test import Suite
from engine.suite.checks import Report
from engine.suite.expand import Expander
from engine.suite.golden import ConversationCheck, GoldenCheck
from engine.suite.schema import validate
from engine.suite.stored_tests import TestSet, TestStore
from engine.suite.variants import apply_variants

__all__ = ["expand_paths", "load_suite_file", "load_suites"]

_SUFFIXES = (".yaml", ".yml")


def expand_paths(paths: list[str | Path]) -> tuple[list[Path], list[Diagnostic]]:
    """Files to load: files as given, folders searched recursively for *.yaml / *.yml (sorted).

    Args:
        paths: Files and folders.

    Returns:
        The files (each once), and a diagnostic for every path that does not exist.
    """
    files: list[Path] = []
    problems: list[Diagnostic] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES and p.is_file())
            files.extend(p for p in found if _looks_like_suite(p))
        elif path.is_file():
            files.append(path)
        else:
            problems.append(Diagnostic(str(raw), 0, 0, "no such file or folder; check the path "
                                                        "(give suite files or folders of them)"))
    unique: dict[Path, None] = {}
    for f in files:
        unique.setdefault(f, None)
    return list(unique), problems


def _looks_like_suite(path: Path) -> bool:
    """In a folder, skip YAML files that are plainly not suites (models files, harness files).

    A file counts as a suite when its text has a top-level `suite:` or `tests:` key; anything else found
    while walking a folder is someone else's file. A file named on the command line is always checked.
    A file over the size limit is not read here at all: it counts, so loading refuses it by its size.
    """
    try:
        if path.stat().st_size > size_limit(SUITE_FILE)[0]:
            return True
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(("suite:", "tests:", "suite :", "tests :")):
                    return True
    except OSError:
        return True
    return False


def load_suites(paths: list[str | Path], *, golden_check: bool = False,
                conversation_check: ConversationCheck | None = None) -> tuple[list[Suite], list[Diagnostic]]:
    """Load, check and expand suites.

    Args:
        paths: Suite files or folders (searched recursively for *.yaml / *.yml, sorted).
        golden_check: Also score each test's golden answer with its own evaluator.
        conversation_check: With `golden_check`, how an agent test's golden conversation is replayed and
            scored (`engine.agent.golden.score_golden_conversation`; the agent loop sits above this layer).

    Returns:
        The suites without errors (their tests held compactly in one `TestStore`), and every diagnostic found in
        every file (one whose tests could not be kept, their temporary file being full, has an error saying so).
    """
    files, diagnostics = expand_paths(paths)
    suites: list[Suite] = []
    first_file: dict[str, tuple[str, int]] = {}
    store = TestStore()
    for path in files:
        suite, found, suite_line = load_suite_file(path, golden_check=golden_check,
                                                   conversation_check=conversation_check, store=store)
        diagnostics.extend(found)
        if suite is None:
            continue
        if suite.id in first_file:
            other, other_line = first_file[suite.id]
            diagnostics.append(Diagnostic(suite.file, suite_line, 1, f"suite id '{suite.id}' is already used by "
                                          f"{other}:{other_line}; suite ids must be unique, rename one"))
            continue
        first_file[suite.id] = (suite.file, suite_line)
        if not any(d.severity == "error" for d in found):   # else a golden failed: the suite still claims its id
            suites.append(suite)
    return suites, diagnostics


def load_suite_file(path: Path, file: str | None = None, *, golden_check: bool = False,
                    conversation_check: ConversationCheck | None = None,
                    store: TestStore | None = None) -> tuple[Suite | None, list[Diagnostic], int]:
    """Load one suite file.

    Args:
        path: The file.
        file: The name used in diagnostics (default: the path as given).
        golden_check: Score each test's golden with its own evaluator as the test is expanded (the tests
            without errors of a file with errors too, so every problem in the file is reported in one pass).
        store: Where its tests are kept (default: a store of its own).

    Returns:
        (the Suite or None when the file has errors, its diagnostics, the line of its `suite:` key). A suite
        whose goldens fail is returned with their errors among its diagnostics (`load_suites` leaves it out).
    """
    name = file if file is not None else str(path)
    loaded = load_yaml_file(path, name)
    if loaded.diagnostics:
        return None, loaded.diagnostics, 1
    data = loaded.data
    if not isinstance(data, dict):
        return None, [Diagnostic(name, 1, 1, "a suite file must be a mapping with `suite:` and `tests:` keys, "
                                             "not a single value or a list")], 1
    report = Report(name, loaded.positions)
    report.diagnostics.extend(validate(data, loaded.positions, name, "suite"))
    suite_line = loaded.positions.of(("suite",), key=True)[0]
    schema_failed = report.failed
    broken_sections = {p for p in _error_paths(report, data)}
    if schema_failed and any(not isinstance(section, int) for section in broken_sections):
        # Only tests with their own errors can be skipped; a broken shared section would mislead every test.
        return None, report.diagnostics, suite_line
    expander = Expander(data, report, path.parent)
    store = store if store is not None else TestStore()
    first = len(store)
    golden = GoldenCheck(score, conversation_check) if golden_check else None
    try:
        for test in apply_variants(data, report, expander.expand(skip={i for i in broken_sections
                                                                        if isinstance(i, int)})):
            if golden is not None:
                golden.see(test)
            store.add(test, expander.row_evaluator)
    except StorageError as exc:   # the tests' temporary file: nothing is wrong with the suite
        report.error((), str(exc))
        return None, _dedupe(report.diagnostics), suite_line
    except Exception as exc:  # noqa: BLE001 - a bug here must still end in a message, never a traceback
        report.error((), f"internal error while checking this file ({type(exc).__name__}: {exc}); "
                         "please report it with this file attached")
        return None, _dedupe(report.diagnostics), suite_line
    _warn_number_traps(report, loaded.positions, data)
    tests = TestSet(store, range(first, len(store)))
    suite = Suite(id=data.get("suite", ""), file=name, description=data.get("description", ""),
                  tags=tuple(data.get("tags", ())), tests=tests)
    # After the file's own problems, in file order; a `cases_from` row's golden problem names its data file.
    found = _dedupe(report.diagnostics) + (golden.diagnostics() if golden is not None else [])
    return (None if report.failed else suite), found, suite_line


def _dedupe(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Each problem once, in file order (a default used by many tests is reported once)."""
    unique = list(dict.fromkeys(diagnostics))
    unique.sort(key=lambda d: (d.line, d.col))
    return unique


def _error_paths(report: Report, data: dict[str, Any]) -> set[Any]:
    """Which sections have schema errors: top-level key names, and test indexes (ints)."""
    if not report.diagnostics:
        return set()   # the usual file: finding where each of the bench suite's 5,716 tests starts took 8 ms
    positions = report.positions
    out: set[Any] = set()
    # Map each diagnostic back to the section it lies in, by line range.
    raw_tests = data.get("tests")
    tests: list[Any] = raw_tests if isinstance(raw_tests, list) else []
    starts = sorted((positions.of(("tests", i))[0], i) for i in range(len(tests)))
    section_starts = sorted((positions.of((key,), key=True)[0], key) for key in data)
    for diag in report.diagnostics:
        section = None
        for line, key in section_starts:
            if line <= diag.line:
                section = key
        if section == "tests":
            index = None
            for line, i in starts:
                if line <= diag.line:
                    index = i
            out.add(index if index is not None else "tests")
        elif section is not None:
            out.add(section)
    return out


def _warn_number_traps(report: Report, positions: Any, data: dict[str, Any]) -> None:
    """Warn where YAML turned a golden/case value like `1.10` or `007` into a different-looking number.

    Only where text is expected: a golden that is one value, a tool-call golden's `content`, and a case
    row's variable. Inside a JSON golden (`golden: {total: 12.50}`) or an exec case a number is a number,
    and quoting it would make it a string.
    """
    for path, raw in positions.raw.items():
        # The cheap test first: most numbers read back as written (`5`), and then where they sit does not matter.
        # Plain ASCII digits without a leading zero always do (`str(int(raw)) == raw`), so they are passed before
        # being parsed.
        if raw.isdigit() and raw.isascii() and (raw[0] != "0" or len(raw) == 1):
            continue
        value = _lookup_number(raw)
        if value is None or str(value) == raw or raw.lower() in ("true", "false"):
            continue
        if _text_expected(path, data):
            report.warning(path, f"YAML reads {raw} as the number {value}; if you meant the text '{raw}', "
                                 "put it in quotes")


def _text_expected(path: tuple[Any, ...], data: dict[str, Any]) -> bool:
    """Is the scalar at `path` read as text: a whole golden, a tool-call golden's content, a case-row variable?"""
    if len(path) < 3 or path[0] != "tests" or not isinstance(path[1], int):
        return False
    test, where = _at(data, path[:2]), path[2:]
    if where[0] == "cases" and len(where) >= 3:  # ("cases", row, variable, ...)
        if len(where) == 3:
            return True  # a template variable (rendered as text), or the row's golden as one value
        golden, where = _at(test, where[:3]), where[2:]
    else:
        golden = _at(test, ("golden",))
    if where == ("golden",):
        return True
    if where == ("golden", "content"):  # text beside tool calls; any other mapping golden is JSON
        return isinstance(golden, dict) and "tool_calls" in golden
    return False


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    """The value at `path` inside loaded YAML, or None."""
    for step in path:
        found = ((isinstance(value, dict) and step in value)
                 or (isinstance(value, list) and isinstance(step, int) and 0 <= step < len(value)))
        if not found:
            return None
        value = value[step]
    return value


def _lookup_number(raw: str) -> Any:
    try:
        return int(raw) if raw.lstrip("+-").isdigit() else float(raw)
    except ValueError:
        return None
