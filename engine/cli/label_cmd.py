"""`engine label`: label one attempt's verdict right or wrong from the command line, into the same
`_labels.parquet` `engine view` writes (engine.analysis.labels), for machines without a browser."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.cli.app import app

USAGE = 2


@app.command()
def label(
    run: Annotated[Path, typer.Argument(help="The run folder (results/latest, results/<run-id>).")],
    verdict: Annotated[str, typer.Argument(metavar="right|wrong", help="Whether the attempt's verdict is right.")],
    model: Annotated[str, typer.Option("--model", help="The model, as the run names it (models.yaml's key).")],
    test: Annotated[str, typer.Option("--test", help="The test id, or SUITE/TEST_ID where ids repeat across "
                                                     "suites.")],
    case: Annotated[int | None, typer.Option("--case", min=0, help="The case index (tests with cases).")] = None,
    attempt: Annotated[int | None, typer.Option("--attempt", min=0, help="The attempt, from 0 (needed when the "
                                                "model ran the test more than once).")] = None,
    note: Annotated[str | None, typer.Option("--note", help="A note kept with the label.")] = None,
    reviewer: Annotated[str | None, typer.Option("--reviewer", help="The name written with the label (default: "
                                                 "your login name).")] = None,
) -> None:
    """Label an attempt's verdict right or wrong, as `engine view` does (RUN/_labels.parquet)."""
    from engine.analysis.labels import (
        KEY,
        LABELS,
        LABELS_FILE,
        append_labels,
        find_attempt,
        latest_labels,
        read_labels,
    )
    from engine.cli.view_cmd import login_name
    from engine.errors import ResultsError
    from engine.view.store import find_runs

    if verdict not in LABELS:
        typer.echo(f"error: {verdict!r}: say whether the verdict is `right` or `wrong`", err=True)
        raise typer.Exit(USAGE)
    name = (reviewer or login_name()).strip() or "reviewer"
    try:
        runs = find_runs(run)
        if list(runs.values()) != [run]:
            shown = ", ".join(str(run / r) for r in list(runs)[:5])
            raise ResultsError(f"{run} is not a run folder but holds {len(runs)} run(s): give one of them ({shown}), "
                               "or results/latest")
        row = find_attempt(run, model=model, test=test, case_index=case, attempt=attempt)
        where = f"{model}'s attempt {row['attempt']} at {row['suite']}/{row['test_id']}" + (
            "" if row["case_index"] is None else f"#{row['case_index']}")
        if row["passed"] is None:
            why = f"an error row ({row['error_kind']})" if row["error_kind"] else "a test without a check"
            typer.echo(f"error: {where} is {why}: it has no verdict to label", err=True)
            raise typer.Exit(USAGE)
        earlier = [given for given in latest_labels(read_labels(run))
                   if given["reviewer"] == name and all(given[k] == row[k] for k in KEY)]
        count = append_labels(run, [{**{k: row[k] for k in KEY}, "label": verdict, "note": note, "reviewer": name}])
    except (ResultsError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(USAGE) from None
    replaced = f", replacing your earlier {earlier[-1]['label']!r}" if earlier else ""
    typer.echo(f"labelled the verdict of {where} ({'passed' if row['passed'] else 'failed'}) {verdict} as "
               f"{name}{replaced}; {count} label(s) in {run / LABELS_FILE}")
