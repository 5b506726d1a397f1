"""A hidden check and its verdict, which comes from the check, never from the model's code or config.

    HiddenCheck(command="python3 -c 'import greet; assert greet.greet() == \\"hello\\"'")
    HiddenCheck(pytest=("tests/",))                  # the outcome read from pytest's JUnit report
    run_check(check, workdir, ...) -> CheckResult    # under the exec sandbox, as the check's own uid

The check runs under the engine's wrapper (check_runner.py), with the engine's start-up for every Python
it runs (check_startup.py: the workspace importable, after the standard library and the check's packages)
and, for any pytest it runs, the engine's configuration only (`-c` a file of the check's: no pytest.ini,
pyproject.toml, tox.ini or setup.cfg of the workspace is read; `--rootdir` the workspace; no conftest.py,
no cache, no plugins from entry points; `--import-mode=append`). Its own places (a home, an output folder,
the programs) are a fresh folder outside the workspace, created once the model is done.

- `command`: passes when the command exits 0 *and* the wrapper reached its end with no Python process of the
  command ended early (check_runner.py says how that is known).
- `pytest`: passes when the wrapper reached its end, pytest exited 0 and its JUnit report (written outside
  the workspace, read with a size cap by an XML parser that refuses DOCTYPEs, so no entities) names at least
  one test, none failed or errored, and none was skipped (unless `allow_skips`; then at least one passed).

A failed check's reason names the failing tests and their assertion lines first.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from xml.parsers import expat

from engine.errors import HarnessError
from engine.harness.isolation import Limits
from engine.harness.oneshot import CheckFolders, RunResult, check_python, check_site, run_in

__all__ = ["REPORT_MAX_BYTES", "CheckResult", "HiddenCheck", "Report", "ReportError", "TestCase", "output_summary",
           "read_report", "run_check"]

REPORT_MAX_BYTES = 16 * 1024 * 1024   # a JUnit report larger than this is not read: the check fails
RESULT_MAX_BYTES = 64 * 1024
REASON_CHARS = 1200                   # a reason's summary of failing tests, at most
CASES_KEPT = 50                       # failing tests described, at most (the others are counted)
_TEXT_KEPT = 4000                     # characters of one failure's text kept
_PYTEST_INI = """\
# A hidden check's own pytest configuration: nothing of the workspace's is read.
[pytest]
junit_family = xunit2
junit_logging = no
"""


@dataclass(frozen=True, slots=True)
class HiddenCheck:
    """What a `workspace_check` runs.

    Args:
        command: A shell command (bash -c), or None for a pytest check.
        pytest: Paths (or node ids) relative to the workspace that pytest runs.
        args: More pytest options (`-k "not slow"`), after the engine's.
        allow_skips: A skipped (or xfail) test does not fail a pytest check.
        env: More environment variables for the check.
    """

    command: str | None = None
    pytest: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    allow_skips: bool = False
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class TestCase:
    """One test of a JUnit report: its name, outcome ("passed", "failed", "error", "skipped") and why."""

    name: str
    outcome: str
    message: str = ""
    text: str = ""

    def describe(self) -> str:
        """`name (file:line): source line: message`, each part when the report has it."""
        location, source = _where(self.text)
        head = self.message.strip().splitlines()[0] if self.message.strip() else ""
        if not head or head in _GENERIC_MESSAGES:   # the exception pytest's traceback ends with says more
            head = next((line[1:].strip() for line in self.text.splitlines()
                         if line.startswith("E ") and line[1:].strip()), head)
        return ": ".join([self.name + (f" ({location})" if location else ""), *filter(None, (source, head))])


_GENERIC_MESSAGES = ("collection failure",)


@dataclass(slots=True)
class Report:
    """What a JUnit report says: counts of every outcome, and the first CASES_KEPT tests that did not pass."""

    counts: dict[str, int] = field(default_factory=lambda: {"passed": 0, "failed": 0, "error": 0, "skipped": 0})
    cases: list[TestCase] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class ReportError(ValueError):
    """A JUnit report that cannot be read (too large, malformed, declaring a DOCTYPE)."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    """A hidden check's outcome.

    Args:
        passed: The check passed.
        reason: Why, in words: the failing tests and their assertion lines first.
        run: How the check's process ended.
        score: A pytest check's share of passing tests; None for a command (its stdout may give one).
        ended: The check's wrapper reached its end and no Python process of the command ended early: its exit
            status is the check's own.
        details: Counts for the row (`exit_code`, `tests`, `failed`...).
    """

    passed: bool
    reason: str
    run: RunResult
    score: float | None = None
    ended: bool = False
    details: Mapping[str, object] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Running


def run_check(check: HiddenCheck, workdir: Path, limits: Limits, *, network: bool, uid: int | None,
              group: str | None, root: str | None, netns: int | None) -> CheckResult:
    """Run `check` in `workdir` (shown at `root` when given) under the sandbox, and read its verdict.

    Raises:
        HarnessError: The sandbox could not run it (not a failing check: that is a result).
    """
    python = check_python()
    if python is None:
        raise HarnessError("a hidden check needs Python (python3), which is not installed on this machine")
    if check.command is None and check_site() is None:
        raise HarnessError("a pytest check needs pytest installed with the engine (pip install pytest)")
    base = Path(tempfile.mkdtemp(prefix="engine-check-"))
    try:
        os.chmod(base, 0o711)   # its uid may pass through, not list or change it
        folders = CheckFolders(home=base / "home", out=base / "out", tools=base / "tools", result_fd=-1)
        for folder in (folders.home, folders.out):
            folder.mkdir(mode=0o700)
        _write_tools(folders.tools)
        view = root or str(workdir)
        report = folders.out / "report.xml"
        env = {"COLUMNS": "200", **check.env, "ENGINE_CHECK_WORKSPACE": view, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
               "PYTEST_ADDOPTS": shlex.join(_pytest_options(folders.tools, view))}
        if check.command is not None:   # the wrapper itself needs no site folder (-S: a faster start)
            env["ENGINE_CHECK_LEDGER"] = str(folders.out / "ledger")
            mode = ["command", check.command]
            python_flags = ["-S"]
        else:
            mode = ["pytest", *_pytest_options(folders.tools, view), f"--junitxml={report}", "-q", "--tb=short",
                    "-rfE", *check.args, "--", *check.pytest]
            python_flags = []
        result_path = base / "result"
        result_fd = os.open(result_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            argv = [python, *python_flags, str(folders.tools / "check_runner.py"), str(result_fd), *mode]
            run = run_in(argv, workdir, limits, network=network, uid=uid, env=env, group=group, root=root,
                         netns=netns, check=CheckFolders(folders.home, folders.out, folders.tools, result_fd))
        finally:
            os.close(result_fd)
        record = _read_record(result_path)
        if check.command is not None:
            return _command_verdict(run, record)
        return _pytest_verdict(check, run, record, report, view)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _pytest_options(tools: Path, view: str) -> list[str]:
    """The options every pytest of a check runs with (also through PYTEST_ADDOPTS, for a `command:` check)."""
    return ["-c", str(tools / "pytest.ini"), f"--rootdir={view}", "-p", "no:cacheprovider", "--noconftest",
            "--import-mode=append"]


def _write_tools(tools: Path) -> None:
    """The engine's programs for the check, readable by its uid and writable by no one but the engine."""
    here = Path(__file__).parent
    (tools / "lib").mkdir(parents=True)
    for source, target in (("check_runner.py", "check_runner.py"), ("check_startup.py", "lib/sitecustomize.py")):
        (tools / target).write_text((here / source).read_text(encoding="utf-8"), encoding="utf-8")
    (tools / "pytest.ini").write_text(_PYTEST_INI, encoding="utf-8")
    for path in (tools, tools / "lib"):
        os.chmod(path, 0o755)
    for path in (tools / "check_runner.py", tools / "lib" / "sitecustomize.py", tools / "pytest.ini"):
        os.chmod(path, 0o644)


def _read_record(path: Path) -> dict[str, object] | None:
    """The wrapper's closing line, or None when it never wrote one."""
    try:
        data = path.read_bytes()[:RESULT_MAX_BYTES]
    except OSError:
        return None
    for line in reversed(data.splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("end") is True:
            return record
    return None


NOT_ENDED = ("did not reach its end: its process was ended early (os._exit, an exec or a kill in the code it ran), "
             "so its exit status says nothing")
_STOPPED = ("timed_out", "output_exceeded", "interrupted")


def _command_verdict(run: RunResult, record: dict[str, object] | None) -> CheckResult:
    details = {"exit_code": run.exit_code}
    raw = record.get("early") if record is not None else None
    early = [e for e in raw if isinstance(e, str)] if isinstance(raw, list) else []
    stopped = any(getattr(run, flag) for flag in _STOPPED)
    ended = record is not None and not early and not stopped
    if record is None and not stopped:
        return CheckResult(False, _with_output(f"{run.describe()}, but the command {NOT_ENDED}", run), run,
                           details=details)
    if early:
        return CheckResult(False, "a Python process of the command ended without reaching its end, so its exit "
                           f"status is not the check's ({'; '.join(early)})", run, details=details)
    if not run.ok:
        return CheckResult(False, _with_output(run.describe(), run), run, ended=ended, details=details)
    return CheckResult(True, "exit code 0", run, ended=True, details=details)


def _pytest_verdict(check: HiddenCheck, run: RunResult, record: dict[str, object] | None,
                    report_path: Path, view: str) -> CheckResult:
    code = record.get("exit_code") if record is not None else None
    details: dict[str, object] = {"exit_code": code}
    if any(getattr(run, flag) for flag in _STOPPED):
        return CheckResult(False, _with_output(f"pytest did not finish: {run.describe()}", run), run,
                           details=details)
    if record is None:
        return CheckResult(False, _with_output(f"pytest {NOT_ENDED} ({run.describe()})", run), run,
                           details=details)
    try:
        report = read_report(report_path)
    except FileNotFoundError:
        return CheckResult(False, _with_output(f"pytest wrote no report (exit code {code})", run), run,
                           details=details)
    except (OSError, ReportError) as exc:
        return CheckResult(False, f"pytest's report cannot be read: {exc}", run, details=details)
    counts = report.counts
    details.update(tests=report.total, failed=counts["failed"], errors=counts["error"], skipped=counts["skipped"])
    scored = report.total - (counts["skipped"] if check.allow_skips else 0)
    score = counts["passed"] / scored if scored else 0.0

    def verdict(passed: bool, reason: str) -> CheckResult:
        return CheckResult(passed, reason, run, score, True, details)

    if report.total == 0:
        return verdict(False, _with_output(f"0 tests collected in {' '.join(check.pytest)} (pytest exit code "
                                           f"{code}): the check ran no test", run))
    bad = [c for c in report.cases if c.outcome in ("failed", "error")]
    if bad:
        what = " and ".join(f"{n} {word}" for n, word in ((counts["failed"], "failed"), (counts["error"], "errored"))
                            if n)
        described = _cases(bad, counts["failed"] + counts["error"], view)
        return verdict(False, f"{what} of {report.total} tests: {described}")
    skipped = [c for c in report.cases if c.outcome == "skipped"]
    if skipped and not check.allow_skips:
        return verdict(False, f"{counts['skipped']} of {report.total} tests skipped (a skip fails a hidden check "
                       f"unless it says allow_skips: true): {_cases(skipped, counts['skipped'], view)}")
    if counts["passed"] == 0:
        return verdict(False, f"no test passed ({counts['skipped']} skipped)")
    if code != 0:
        return verdict(False, _with_output(f"pytest exited with code {code}", run))
    return verdict(True, f"{counts['passed']} of {report.total} tests passed")


def _cases(cases: list[TestCase], total: int, view: str) -> str:
    """The cases described one after another (paths relative to the workspace, `view`), cut at REASON_CHARS."""
    parts: list[str] = []
    used = 0
    for case in cases:
        text = case.describe().replace(view.rstrip("/") + "/", "")[:400]
        if parts and used + len(text) > REASON_CHARS:
            break
        parts.append(text)
        used += len(text) + 2
    left = total - len(parts)
    return "; ".join(parts) + (f"; ... and {left} more" if left > 0 else "")


def _with_output(reason: str, run: RunResult) -> str:
    tail = output_summary(run.stdout, run.stderr)
    return reason + (f": {tail}" if tail else "")


# --------------------------------------------------------------------------------------------
# Reading what a check wrote


_LOCATION = re.compile(r"^(?P<file>[^\s:]+\.py):(?P<line>\d+): ", re.MULTILINE)
_WARNING = re.compile(r"^\S+:\d+: \w*Warning: |^\s*warnings\.warn\(|Warning: ", re.MULTILINE)
_SUMMARY_CHARS = 600


def _where(text: str) -> tuple[str, str]:
    """(file:line, the failing source line) from a failure's traceback text (pytest's short or long form), each
    "" when it has none."""
    found = [match for match in _LOCATION.finditer(text) if _STARTUP not in match["file"]]
    if not found:
        return "", ""
    location = f"{found[-1]['file']}:{found[-1]['line']}"
    after = text[found[-1].end():].split("\n")[1:2]   # --tb=short: the source line follows, indented
    source = after[0].strip() if after and after[0][:1].isspace() else ""
    marked = [line[1:].strip() for line in text[:found[-1].start()].splitlines() if line.startswith(">")]
    return location, (source or (marked[-1] if marked else ""))[:200]


def read_report(path: Path) -> Report:
    """Read a JUnit XML report: a regular file (never through a symlink) of at most REPORT_MAX_BYTES.

    Raises:
        FileNotFoundError: There is none.
        ReportError: It is too large, not a regular file, malformed, or declares a DOCTYPE.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ReportError("it is not a regular file")
        data = handle.read(REPORT_MAX_BYTES + 1)
    if len(data) > REPORT_MAX_BYTES:
        raise ReportError(f"it is larger than {REPORT_MAX_BYTES // (1024 * 1024)} MiB")
    return parse_report(data)


def parse_report(data: bytes) -> Report:
    """Parse JUnit XML bytes with the standard library's expat, refusing any DOCTYPE (so any entity).

    Raises:
        ReportError: Malformed, or it declares a DOCTYPE or an entity.
    """
    report = Report()
    stack: list[str] = []
    current: dict[str, str] | None = None
    texts: list[str] = []

    def refuse(*_: object) -> None:
        raise ReportError("it declares a DOCTYPE or an entity, which a JUnit report never needs")

    def start(name: str, attrs: dict[str, str]) -> None:
        nonlocal current
        stack.append(name)
        if name == "testcase":
            classname, test = attrs.get("classname", ""), attrs.get("name", "")
            current = {"name": f"{classname}.{test}" if classname else test, "outcome": "passed",
                       "message": "", "text": ""}
            texts.clear()
        elif (current is not None and name in ("failure", "error", "skipped") and stack[-2:-1] == ["testcase"]
              and _RANK[name] > _RANK[current["outcome"]]):
            current["outcome"] = {"failure": "failed"}.get(name, name)
            current["message"] = attrs.get("message", "")[:_TEXT_KEPT]
            texts.clear()

    def end(name: str) -> None:
        nonlocal current
        stack.pop()
        if name == "testcase" and current is not None:
            report.counts[current["outcome"]] += 1
            if current["outcome"] != "passed" and len(report.cases) < CASES_KEPT:
                report.cases.append(TestCase(current["name"][:300], current["outcome"], current["message"],
                                             "".join(texts)[:_TEXT_KEPT]))
            current = None

    def characters(text: str) -> None:
        if current is not None and stack and stack[-1] in ("failure", "error", "skipped") \
                and sum(map(len, texts)) < _TEXT_KEPT:
            texts.append(text)

    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = characters
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise ReportError(f"malformed XML ({exc})") from None
    return report


_RANK = {"passed": 0, "skipped": 1, "failure": 2, "failed": 2, "error": 3}


def output_summary(stdout: str, stderr: str) -> str:
    """What a failed command's output says first: pytest's short summary (FAILED/ERROR lines and the totals),
    unittest's FAIL/ERROR headings with their exception lines, else the end of stderr or stdout without
    warnings; at most _SUMMARY_CHARS characters."""
    text = stdout + "\n" + stderr
    lines: list[str] = []
    if "short test summary info" in text:
        after = text[text.rindex("short test summary info"):].splitlines()[1:]
        lines = [line for line in after if line.startswith(("FAILED", "ERROR"))]
        lines += [line.strip("= ") for line in after if re.search(r"\d+ (failed|passed|errors?)\b", line)][-1:]
    if not lines:
        lines = _unittest_failures(text)
    if not lines and "Traceback (most recent call last):" in stderr:
        lines = _traceback(stderr[stderr.rindex("Traceback (most recent call last):"):])
    if not lines:
        for source in (stderr, stdout):
            kept = [line for line in source.strip().splitlines() if line.strip() and not _WARNING.search(line)
                    and not line.startswith("  warnings.warn")]
            if kept:
                lines = kept[-8:]
                break
    summary = " | ".join(line.strip() for line in lines)
    return summary if len(summary) <= _SUMMARY_CHARS else summary[:_SUMMARY_CHARS - 3] + "..."


def _traceback(text: str) -> list[str]:
    """A Python traceback as [its exception line, where (file:line: the source line)], the check's own
    start-up frames left out."""
    body = text.splitlines()[1:]
    frames = [i for i, line in enumerate(body) if line.startswith("  File ") and _STARTUP not in line]
    exception = [line for line in body if line.strip() and not line.startswith(" ")]
    out = exception[-1:] or body[-1:]
    if frames:
        match = re.match(r'\s*File "(.*)", line (\d+)', body[frames[-1]])
        following = body[frames[-1] + 1] if frames[-1] + 1 < len(body) else ""
        source = following.strip() if following.startswith("    ") else ""
        if match:
            out.append(f"at {match[1]}:{match[2]}" + (f": {source}" if source else ""))
    return out


_STARTUP = "/tools/lib/sitecustomize.py"
_UNITTEST_HEAD = re.compile(r"^(FAIL|ERROR): \S+ \(.+\)$")   # FAIL: test_mean (test_stats.StatsTest.test_mean)


def _unittest_failures(text: str) -> list[str]:
    """unittest's `FAIL: test (module.Class.test)` headings, each with its traceback's last line."""
    out: list[str] = []
    blocks = re.split(r"^=+\n", text, flags=re.MULTILINE)
    for block in blocks:
        head = block.lstrip().splitlines()[0] if block.strip() else ""
        if not _UNITTEST_HEAD.match(head):
            continue
        body = [line for line in block.splitlines()[1:] if line.strip() and not line.startswith("-")]
        last = next((line.strip() for line in reversed(body) if re.match(r"^\w[\w.]*(Error|Exception)\b", line)),
                    body[-1].strip() if body else "")
        out.append(f"{head}: {last}" if last else head)
    return out
