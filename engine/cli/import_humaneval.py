"""`engine import humaneval`: convert OpenAI HumanEval into an exec-harness YAML suite."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.cli.app import app, import_app  # noqa: F401


@import_app.command("humaneval")
def import_humaneval_cmd(
    src: Annotated[Path, typer.Argument(help="HumanEval.jsonl.gz (or .jsonl), e.g. "
                                        "../shared/data/humaneval/HumanEval.jsonl.gz")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The suite file to write.")] = Path("suites/humaneval.yaml"),
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Import only the first N problems.")] = None,
) -> None:
    """Write HumanEval as a suite: golden = canonical solution, scored by the `humaneval` harness."""
    from engine.errors import EngineError
    from engine.importers.humaneval import import_humaneval

    try:
        written = import_humaneval(src, out, limit=limit)
    except EngineError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {written}")
