"""`engine import bfcl`: BFCL questions + possible answers -> YAML suites.

(`engine import humaneval` lives in import_humaneval.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.cli.app import app, import_app  # noqa: F401
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
        except (FileNotFoundError, ValueError) as exc:
            typer.echo(f"engine import bfcl: error: {exc}", err=True)
            raise typer.Exit(2) from None
        parts = sorted(first.parent.glob(f"{first.stem}_part*.yaml"))
        extra = f" (+{len(parts)} part file(s) for clashing tool definitions)" if parts else ""
        typer.echo(f"wrote {first}{extra}")
