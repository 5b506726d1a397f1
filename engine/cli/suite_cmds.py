"""Suite commands: `engine validate`, `engine list`, `engine schema`, `engine init`.

Exit codes: 0 fine, 1 problems found in the files, 2 a usage error (a path that does not exist, an
unknown schema name, a folder `init` would overwrite).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from engine.cli.app import app, import_app  # noqa: F401

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.model.test import Test
    from engine.model.verdict import Verdict

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


def _score_golden_conversation(test: Test) -> Verdict:
    """engine.agent's golden replay, imported on first use: it pulls in the HTTP client, which `engine validate`
    of a suite without agent tests need not load (about 0.4 s of imports)."""
    from engine.agent.golden import score_golden_conversation

    return score_golden_conversation(test)


def _golden_conversation_unstarted(test: Test) -> Verdict | None:
    """`validate --no-start`: a golden that would call MCP servers is not replayed (None: left unchecked)."""
    return None if test.mcp else _score_golden_conversation(test)


def _print_diagnostics(diagnostics: list, files_checked: int, tests: int) -> int:
    """Print diagnostics gcc-style to stderr with a one-line summary; return the exit code."""
    ordered = sorted(diagnostics, key=lambda d: (d.file, d.line, d.col))
    for diag in ordered:
        print(str(diag), file=sys.stderr)
    errors = sum(1 for d in ordered if d.severity == "error")
    warnings = sum(1 for d in ordered if d.severity == "warning")
    summary = (f"{errors} error{'s' if errors != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''} "
               f"in {files_checked} file{'s' if files_checked != 1 else ''} ({tests} tests loaded)")
    print(summary, file=sys.stderr)
    return EXIT_PROBLEMS if errors else EXIT_OK


def _missing_paths(paths: list[Path]) -> list[Path]:
    return [p for p in paths if not p.exists()]


@app.command()
def validate(
    paths: Annotated[list[Path], typer.Argument(help="Suite files or folders (searched for *.yaml / *.yml).")],
    no_golden_check: Annotated[bool, typer.Option(
        "--no-golden-check", help="Skip scoring each test's golden answer with its own evaluator.")] = False,
    models: Annotated[Path | None, typer.Option("--models", help="Also check this models.yaml.")] = None,
    judges: Annotated[bool, typer.Option("--judges", help="Also grade every judge's calibration examples "
                                         "(calls the judge models: those of --models, else the default embedded "
                                         "models, as `engine run`) and fail under min_agreement.")
                      ] = False,
    calibration_out: Annotated[Path | None, typer.Option(
        "--calibration-out", help="Where --judges writes the calibration `engine analyze` reads (default: "
        "judge-calibration.json beside the judge cache).")] = None,
    labels: Annotated[list[Path] | None, typer.Option(
        "--labels", help="With --judges: a run folder (or a folder of runs) whose reviewers' labels "
        "(`engine view`) become calibration examples of the judges; repeatable.")] = None,
    no_start: Annotated[bool, typer.Option(
        "--no-start", help="Start no MCP server: their tools are not listed, the tool names checks refer to "
                           "not looked up, goldens that call them not replayed.")] = False,
) -> None:
    """Check suites before any model is called: YAML, schema, references, templates, goldens."""
    from engine._gc import tuned_gc
    from engine.base.heartbeat import Heartbeat
    from engine.suite import load_models, load_suites
    from engine.suite.loader import expand_paths

    missing = _missing_paths(list(paths) + ([models] if models else []) + list(labels or []))
    if missing:
        for path in missing:
            print(f"{path}: error: no such file or folder", file=sys.stderr)
        raise typer.Exit(EXIT_USAGE)
    if labels and not judges:
        print("error: --labels gives the judges calibration examples: add --judges", file=sys.stderr)
        raise typer.Exit(EXIT_USAGE)
    files, _ = expand_paths(list(paths))
    # Goldens of workspace and exec tests run in the sandbox, those of MCP tests start their servers: seconds
    # each, so a long check says it goes on.
    still = Heartbeat(lambda seconds: print(f"  ... still checking ({seconds:.0f} s; the goldens of workspace and "
                                            "exec tests run in the sandbox, those of MCP tests start their "
                                            "servers)", file=sys.stderr, flush=True))
    with tuned_gc(collect=False), still:
        suites, diagnostics = load_suites(list(paths), golden_check=not no_golden_check,
                                          conversation_check=_golden_conversation_unstarted if no_start
                                          else _score_golden_conversation)
    checked = len(files)
    from engine.suite.conversation import uncallable_choices
    from engine.suite.models_file import raised_max_tokens
    from engine.suite.stored_tests import definition_samples, joined, keys_of

    loaded = joined(s.tests for s in suites)   # read as each check needs: the tests are not held at once
    if models:
        configs, model_problems = load_models(models)
        diagnostics.extend(model_problems)
        checked += 1
        from engine.suite.content_parts import completions_conflicts

        diagnostics.extend(completions_conflicts(loaded, configs.values()))
        which = ""
    else:   # the models `engine run` uses without --models
        from engine.local import default_models

        configs, which = default_models(), " (the default embedded models)"
    if not no_start:
        diagnostics.extend(_check_mcp_servers(loaded, [server for config in configs.values()
                                                       for server in config.mcp]))
    diagnostics.extend(raised_max_tokens(keys_of(loaded), configs.values(), which=which))
    diagnostics.extend(uncallable_choices(definition_samples(loaded), configs.values(), which=which))
    tests = sum(len(s.tests) for s in suites)
    code = _print_diagnostics(diagnostics, checked, tests)
    if judges:
        code = _validate_judges(suites, models, calibration_out, code, labels or [])
    raise typer.Exit(code)


def _check_mcp_servers(tests: Sequence[Test], model_servers: list[Any]) -> list[Any]:
    """Each MCP server started once, its tools listed, the checks' tool names looked up (engine.agent.mcp.check);
    nothing is imported when no test or model declares a server."""
    from engine.suite.stored_tests import definition_samples

    if not model_servers and not any(test.mcp for test in definition_samples(tests)):   # a definition's setting
        return []
    from engine.agent.mcp.check import check_servers

    return check_servers(tests, model_servers)


def _validate_judges(suites: list, models: Path | None, calibration_out: Path | None, code: int,
                     labels: list[Path]) -> int:
    """`validate --judges` (engine.analysis.judge_validate): only for suites without errors, nothing is paid
    for a suite that would not load."""
    from engine.analysis.judge_validate import validate_judges
    from engine.errors import EngineError
    from engine.judge.trust import default_calibration_path

    if code != EXIT_OK:
        print("judges: not graded: fix the errors above first", file=sys.stderr)
        return code
    try:
        found = validate_judges([t for s in suites for t in s.tests], models,
                                calibration_out or default_calibration_path(), labels=labels,
                                progress=lambda line: print(line, file=sys.stderr, flush=True))
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for line in found.lines:
        print(line)
    return EXIT_PROBLEMS if found.failed else EXIT_OK


@app.command("list")
def list_tests(
    paths: Annotated[list[Path], typer.Argument(help="Suite files or folders.")],
) -> None:
    """A table of tests: suite, id, tags, evaluator kinds and content hash."""
    from engine._gc import tuned_gc
    from engine.suite import load_suites
    from engine.suite.loader import expand_paths
    from engine.suite.stored_tests import keys_of

    missing = _missing_paths(list(paths))
    if missing:
        for path in missing:
            print(f"{path}: error: no such file or folder", file=sys.stderr)
        raise typer.Exit(EXIT_USAGE)
    with tuned_gc(collect=False):
        suites, diagnostics = load_suites(list(paths))
    rows = [("SUITE", "TEST", "TAGS", "EVALUATORS", "HASH")]
    for suite in suites:
        for test in suite.tests:
            kinds = test.evaluator.kinds() if test.evaluator is not None else []
            name = test.id if not test.variant else f"{test.id} @{test.variant}"
            rows.append((suite.id, name, ",".join(test.tags) or "-", ",".join(kinds) or "-", test.hash))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1])
    keys = [key for s in suites for key in keys_of(s.tests)]   # without reading each test again
    variants = {t.variant for t in keys if t.variant}
    if variants:   # the matrix size: each test runs once per variant (and per model and repeat)
        distinct = len({(t.suite, t.id, t.case_index) for t in keys})
        print(f"{len(rows) - 1} tests to run: {distinct} tests x {len(variants)} variants")
    errors = [d for d in diagnostics if d.severity == "error"]
    if diagnostics:
        files, _ = expand_paths(list(paths))
        _print_diagnostics(diagnostics, len(files), sum(len(s.tests) for s in suites))
    raise typer.Exit(EXIT_PROBLEMS if errors else EXIT_OK)


@app.command()
def schema(
    which: Annotated[str, typer.Argument(help="suite, models or harness.")] = "suite",
) -> None:
    """Print a JSON Schema from schemas/ (for editors and tools)."""
    from engine.suite.schema import SCHEMA_DIR

    names = ("suite", "models", "harness")
    if which not in names:
        print(f"error: unknown schema '{which}'; choose one of {', '.join(names)}", file=sys.stderr)
        raise typer.Exit(EXIT_USAGE)
    path = SCHEMA_DIR / f"{which}.schema.json"
    if not path.is_file():
        print(f"error: {path} is missing from this installation", file=sys.stderr)
        raise typer.Exit(EXIT_PROBLEMS)
    sys.stdout.write(path.read_text(encoding="utf-8"))


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="Folder to write a starter suite into (created if needed).")],
) -> None:
    """Write a commented starter suite that validates, to edit into your own, and the suite schema beside it."""
    from engine.suite.starter import STARTER_FILE, starter_suite, write_schema

    target = directory / STARTER_FILE
    if target.exists():
        print(f"{target}: error: already exists; choose another folder or remove the file", file=sys.stderr)
        raise typer.Exit(EXIT_USAGE)
    directory.mkdir(parents=True, exist_ok=True)
    target.write_text(starter_suite(), encoding="utf-8")
    schema = write_schema(directory)
    print(f"wrote {target} and {schema} (editor help: a suite whose first line is `# yaml-language-server: "
          f"$schema={schema.name}` finds it in its own folder); check it with: engine validate {target}")
