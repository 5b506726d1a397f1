"""`engine view`: serve the run browser (engine/view) until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.cli.app import app

USAGE = 2
# A run of this many rows or more has its viewer's snapshot written when `engine run` or `engine rescore` ends
# (its first viewer reads it at once); a smaller one is analysed by its first viewer (a couple of seconds at
# most), and its run does not hold an analysis in memory at its end.
PREPARED_FROM_ROWS = 250_000


def login_name() -> str:
    """The reviewer name labels carry by default: the login name."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "reviewer"


def prepare_snapshot(run_dir: Path, rows: int, *, quiet: bool = False) -> None:
    """After `engine run` or `engine rescore`: write the viewer's snapshot of a run of `PREPARED_FROM_ROWS` rows or
    more beside it (engine.view.cache), so its first `engine view` reads aggregates instead of analysing the rows.

    Ctrl-C skips it and a failure is a note: either way the first `engine view` of the run prepares it.
    """
    if rows < PREPARED_FROM_ROWS:
        return
    from engine.view import cache

    if not quiet:
        typer.echo(f"preparing engine view's summary of {rows:,} rows (Ctrl-C skips it) ...", err=True)
    try:
        cache.prepare(run_dir)
    except KeyboardInterrupt:
        typer.echo("note: engine view's summary skipped; the run's first `engine view` prepares it", err=True)
    except Exception as exc:  # noqa: BLE001 - the run is written; its viewer computes what this could not
        typer.echo(f"note: engine view's summary not prepared ({type(exc).__name__}: {exc}); the run's first "
                   f"`engine view` prepares it", err=True)


@app.command()
def view(
    path: Annotated[Path, typer.Argument(help="A run folder, or a folder of runs (results/).")],
    port: Annotated[int, typer.Option("--port", help="The port to listen on; 0 picks a free one.")] = 0,
    host: Annotated[str, typer.Option("--host", help="The address to bind. Beyond loopback, the printed URL "
                                                     "carries the access token every request needs.")] = "127.0.0.1",
    reviewer: Annotated[
        str | None, typer.Option("--reviewer", help="The name written with your labels (default: your login name).")
    ] = None,
) -> None:
    """Browse runs in a web browser: models, the tests × models grid, attempts side by side, labels by hand."""
    import asyncio

    from engine.errors import EngineError
    from engine.view.server import serve

    if not 0 <= port <= 65535:
        typer.echo(f"error: --port {port}: give a port between 0 and 65535", err=True)
        raise typer.Exit(USAGE)
    name = (reviewer or login_name()).strip() or "reviewer"

    def ready(url: str) -> None:
        typer.echo(f"engine view: serving {path} at {url}  (Ctrl-C stops)")

    try:
        asyncio.run(serve(path, host=host, port=port, reviewer=name, ready=ready))
    except KeyboardInterrupt:
        typer.echo("engine view: stopped")
    except EngineError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(USAGE) from None
    except OSError as exc:
        typer.echo(f"error: cannot listen on {host}:{port} ({exc.strerror or exc})", err=True)
        raise typer.Exit(USAGE) from None
