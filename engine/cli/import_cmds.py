"""`engine import bfcl` (BFCL questions + possible answers), `engine import ifeval` (IFEval's input JSONL),
`engine import promptfoo` (a promptfoo config) and `engine import terminal-bench` (task folders): YAML suites.

(`engine import humaneval` lives in import_humaneval.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.cli.app import app, import_app  # noqa: F401
from engine.errors import ConfigError
from engine.importers.bfcl import CATEGORIES as _CATEGORIES


@import_app.command("bfcl")
def import_bfcl_cmd(
    category: Annotated[str, typer.Argument(help=f"A BFCL category ({', '.join(_CATEGORIES)}) or `all`.")],
    data: Annotated[Path, typer.Option("--data", help="Folder holding BFCL_v4_<category>.json and possible_answer/.")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write the suite YAML files to.")] = Path("suites/bfcl"),
    limit: Annotated[int | None,
                     typer.Option("--limit", min=1, help="Import only the first N entries of each.")] = None,
) -> None:
    """Turn BFCL questions and possible answers into suites scored with `tool_call` (`match: bfcl`)."""
    from engine.importers.bfcl import import_bfcl

    categories = list(_CATEGORIES) if category == "all" else [category]
    for name in categories:
        try:
            first = import_bfcl(name, data, out, limit)
        except (FileNotFoundError, ValueError, ConfigError) as exc:
            typer.echo(f"engine import bfcl: error: {exc}", err=True)
            raise typer.Exit(2) from None
        parts = sorted(first.parent.glob(f"{first.stem}_part*.yaml"))
        extra = f" (+{len(parts)} part file(s) for clashing tool definitions)" if parts else ""
        typer.echo(f"wrote {first}{extra}")


@import_app.command("ifeval")
def import_ifeval_cmd(
    source: Annotated[Path, typer.Argument(help="IFEval's input_data.jsonl (prompt, instruction_id_list, kwargs).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the suite to.")] = Path("suites/ifeval"),
    loose: Annotated[bool, typer.Option("--loose", help="Score by IFEval's loose mode.")] = False,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Import only the first N prompts.")] = None,
) -> None:
    """Turn IFEval prompts into a suite: one test per prompt, one `ifeval` check per instruction under `all`."""
    from engine.importers.ifeval import import_ifeval

    try:
        path = import_ifeval(source, out, loose=loose, limit=limit)
    except (FileNotFoundError, ValueError, ConfigError) as exc:
        typer.echo(f"engine import ifeval: error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {path}")


@import_app.command("promptfoo")
def import_promptfoo_cmd(
    config: Annotated[Path, typer.Argument(help="A promptfoo config (promptfooconfig.yaml).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the suite(s) and models.yaml to.")],
    allow_outside: Annotated[bool, typer.Option(
        "--allow-outside", help="Read files the config names outside its own folder (refused by default: a "
                                "config could copy any file it names into the suites).")] = False,
) -> None:
    """Turn a promptfoo config into suites (one per prompt), a models file and the python scorers its python
    asserts need; list, at file:line, every check not carried over and every test left out."""
    from engine.errors import EngineError
    from engine.importers.promptfoo import import_promptfoo

    try:
        imported = import_promptfoo(config, out, allow_outside=allow_outside)
    except EngineError as exc:
        typer.echo(f"engine import promptfoo: error: {exc}", err=True)
        raise typer.Exit(2) from None
    for note in imported.notes:
        typer.echo(f"{note.file}:{note.line or 1}: warning: {note.message}", err=True)
    for path in [*imported.suites, *imported.scorers]:
        typer.echo(f"wrote {path}")
    if imported.models is not None:
        typer.echo(f"wrote {imported.models}")
    left = f"; {len(imported.notes)} thing(s) not imported as written, listed above" if imported.notes else ""
    typer.echo(f"{imported.tests} test(s){left}. Next: engine validate {out}")


@import_app.command("terminal-bench")
def import_terminal_bench_cmd(
    source: Annotated[Path, typer.Argument(help="A Terminal-Bench task folder (task.yaml) or a folder of them.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the suite, seeds and checks to.")] = Path(
        "suites/terminal_bench"),
) -> None:
    """Turn Terminal-Bench tasks into workspace tests (golden = solution.sh, check = the task's pytest file);
    list every task that cannot be one, with the reason."""
    from engine.importers.terminal_bench import import_terminal_bench

    try:
        imported = import_terminal_bench(source, out)
    except ConfigError as exc:
        typer.echo(f"engine import terminal-bench: error: {exc}", err=True)
        raise typer.Exit(2) from None
    for task, why in imported.skipped:
        typer.echo(f"not importable: {task}: {why}", err=True)
    if imported.suite is None:
        typer.echo("engine import terminal-bench: error: no task could be imported (reasons above)", err=True)
        raise typer.Exit(1)
    typer.echo(f"wrote {imported.suite}: {len(imported.tests)} task(s), {len(imported.skipped)} not importable. "
               f"Next: engine validate {imported.suite}")
