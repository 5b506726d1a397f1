"""Command-line interface: `engine validate|list|schema|init|run|analyze|report|rescore|diff|import`."""

from __future__ import annotations

from engine.cli.app import app
from engine.cli import suite_cmds, run_cmd, analysis_cmds, import_cmds  # noqa: F401  (they register commands)

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point."""
    app()
