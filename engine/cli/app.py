"""The typer application every command module registers on.

Command modules import heavy libraries (pandas, pyarrow) inside the command functions, so
`engine --help` and `engine validate` start fast.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="engine",
    help="A declarative LLM evaluation engine: YAML suites in, Parquet results out.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
import_app = typer.Typer(help="Convert public benchmarks (BFCL, HumanEval, IFEval, Terminal-Bench) and promptfoo "
                         "configs into YAML suites.", no_args_is_help=True)
app.add_typer(import_app, name="import")
