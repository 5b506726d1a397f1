"""Command-line interface: `engine validate|list|schema|init|run|analyze|report|rescore|diff|import|cache`."""

from __future__ import annotations

from engine.cli import (  # noqa: F401  (importing registers the commands)
    analysis_cmds,
    cache_cmds,
    import_cmds,
    import_humaneval,
    run_cmd,
    suite_cmds,
)
from engine.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point: one command, under the CLI's one garbage-collector setting (engine/_gc.py)."""
    from engine._gc import tuned_gc

    with tuned_gc():
        app()
