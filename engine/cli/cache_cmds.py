"""`engine cache info|clear`: look at and trim the response cache (`engine.client.response_cache`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import typer

from engine.cli.app import app

if TYPE_CHECKING:
    from engine.client.response_cache import ResponseCache

T = TypeVar("T")

cache_app = typer.Typer(help="The response cache: identical requests answered without a call (engine run --cache).",
                        no_args_is_help=True)
app.add_typer(cache_app, name="cache")


def _on_cache(missing: str, act: Callable[[ResponseCache], T]) -> T | None:
    """`act` on the opened response cache, closed after; None (saying `missing`) where there is no cache file.
    A cache that cannot be used is an error naming the fix (exit 1)."""
    from engine.client.response_cache import ResponseCache, default_path

    path = default_path()
    if not path.exists():
        typer.echo(missing.format(path=path))
        return None
    cache = ResponseCache(path)
    try:
        result = act(cache)
    finally:
        cache.close()
    if cache.problem:
        typer.echo(f"error: {cache.problem}; delete the file to start a new cache", err=True)
        raise typer.Exit(1)
    return result


def _when(stamp: float | None) -> str:
    return "-" if stamp is None else time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(stamp))


@cache_app.command("info")
def info_command() -> None:
    """Where the response cache is, how many replies it holds, its size, and entries by model id."""
    found = _on_cache("path: {path}\nentries: 0 (no cache file yet; engine run creates it)", lambda cache: cache.info())
    if found is None:
        return
    typer.echo(f"path: {found.path}\nentries: {found.entries}\nsize: {found.size_bytes / 2**20:.2f} MiB "
               f"({found.size_bytes} bytes)\noldest: {_when(found.oldest)}\nnewest: {_when(found.newest)}")
    if found.by_model:
        typer.echo("by model:")
        width = max(len(name) for name in found.by_model)
        for name, count in found.by_model.items():
            typer.echo(f"  {name:<{width}}  {count}")


@cache_app.command("clear")
def clear_command(
    model: str | None = typer.Option(None, "--model", help="Only the replies of this model id (as sent in "
                                                           "requests; see engine cache info)."),
    older_than: float | None = typer.Option(None, "--older-than", min=0, help="Only replies stored more than "
                                                                               "DAYS days ago.", metavar="DAYS"),
) -> None:
    """Delete replies from the response cache (all of them unless --model / --older-than narrow it)."""
    from engine.client.response_cache import default_path

    removed = _on_cache("{path}: no cache file; nothing to clear",
                        lambda cache: cache.clear(model=model, older_than_days=older_than))
    if removed is None:
        return
    typer.echo(f"removed {removed} cached repl{'y' if removed == 1 else 'ies'} from {default_path()}")
