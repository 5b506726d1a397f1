"""Command-line interface: `engine validate|list|schema|init|run|analyze|report|view|label|rescore|diff|import|
cache|doctor`."""

from __future__ import annotations

import os

# Arrow picks its memory pool once, when pyarrow loads: the C library's malloc reuses what a written Parquet part
# freed, where Arrow's default (mimalloc) keeps mapping fresh pages (bench/README.md, "engine run"). Set before any
# command module can load pyarrow; a user's own ARROW_DEFAULT_MEMORY_POOL wins.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

from engine.cli import (  # noqa: F401  (importing registers the commands)
    analysis_cmds,
    cache_cmds,
    doctor,
    import_cmds,
    import_humaneval,
    label_cmd,
    run_cmd,
    suite_cmds,
    view_cmd,
)
from engine.cli.app import app

__all__ = ["app", "fill_optional_values", "main"]


# Options whose value may be left out (`engine run suites/ --ray`), with the value that stands for "none given".
# typer has no optional-value option, so the entry point fills the value in before parsing.
OPTIONAL_VALUES = {"--ray": "local"}


def fill_optional_values(argv: list[str]) -> list[str]:
    """`--ray` with no address (at the end, before another option, or before an existing path) → `--ray local`.

    An address is `host:port`, `ray://...`, `auto` or `local`, never a file or folder, so a following suite path
    is read as the next argument, not as the address.
    """
    import os

    out: list[str] = []
    for i, arg in enumerate(argv):
        out.append(arg)
        default = OPTIONAL_VALUES.get(arg)
        if default is None:
            continue
        following = argv[i + 1] if i + 1 < len(argv) else None
        if following is None or following.startswith("-") or os.path.exists(following):
            out.append(default)
    return out


def main() -> None:
    """Console-script entry point: one command, under the CLI's one garbage-collector setting (engine/_gc.py)."""
    import sys

    from engine._gc import freeze_for_exit, tuned_gc

    sys.argv[1:] = fill_optional_values(sys.argv[1:])
    try:
        with tuned_gc():
            app()   # ends with SystemExit, as a click command does
    finally:
        freeze_for_exit()   # the interpreter's exit then walks no heap (engine/_gc.py)
