"""`engine run`: call every selected model on every selected test and record the results.

Heavy modules (pyarrow, the HTTP client, the suite loader) are imported inside the command so
`engine --help` stays fast. The work is in `engine.run.session`; this module only parses options.
"""

from __future__ import annotations

import functools
from pathlib import Path

import typer

# engine.base.limits, not engine.suite.schema_source: importing anything of engine.suite loads the suite
# loader, the evaluators and jsonschema, which every command (`engine analyze`, `--help`) then paid for at start.
from engine.base.limits import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    MAX_CONCURRENCY,
    MAX_REPEAT,
    MAX_RESPONSE_MB,
    MAX_RETRIES,
)
from engine.cli.app import app


@app.command("run")
def run_command(
    paths: list[Path] = typer.Argument(None, help="Suite files or folders (default on --resume: the run's own)."),
    models: Path | None = typer.Option(None, "--models", help="models.yaml (default: the builtin local model)."),
    model: list[str] = typer.Option([], "--model", help="Run only this model (repeatable)."),
    out: Path | None = typer.Option(None, "--out", help="Results folder (default: results/)."),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, max=MAX_CONCURRENCY,
                                           help="Calls in flight at most, over all models (default: no cap; each "
                                                "model's window finds its own number under its `concurrency`)."),
    repeat: int | None = typer.Option(None, "--repeat", min=1, max=MAX_REPEAT,
                                      help="Attempts per test (overrides the suites)."),
    seed: int | None = typer.Option(None, "--seed", min=INT64_MIN, max=INT64_MAX,
                                    help="The run's order seed (--until-decided's random order; a 64-bit "
                                         "integer). Never sent: a request's seed is the model's params.seed "
                                         "plus the attempt index."),
    temperature: float | None = typer.Option(None, "--temperature", min=0, max=2,
                                             help="Used when a test sets none (default 0)."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, max=INT32_MAX,
                                             help="max_tokens floor (default: the model's params.max_tokens, "
                                                  "else 1024); a test may raise it."),
    filters: list[str] = typer.Option([], "--filter", help="Keep tests with this tag or id glob (repeatable)."),
    filter_file: Path | None = typer.Option(None, "--filter-file", help="Run exactly the tests this file lists "
                                            "(suite/test_id a line, # comments; `engine analyze --subset` writes it)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print every request without calling anything."),
    resume: Path | None = typer.Option(None, "--resume", help="Continue this run folder (or a symlink to one, "
                                       "such as results/latest): skip finished rows."),
    retry_errors: bool = typer.Option(False, "--retry-errors", help="With --resume: re-run only error rows."),
    max_cost: float | None = typer.Option(None, "--max-cost", "--budget", min=0,
                                          help="Stop dispatch past this priced spend (a batch counts its "
                                               "estimated cost when it is sent)."),
    batch: bool = typer.Option(False, "--batch", help="Send single-turn calls through each provider's batch API "
                               "(half the price, answered within 24 h; agent tests stay live, judges unless their "
                               "entry says batch:); --resume collects the batches sent (docs/running.md, Batch runs)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
    no_stream: bool = typer.Option(False, "--no-stream", help="Ask for whole JSON responses instead of SSE."),
    max_retries: int | None = typer.Option(None, "--max-retries", min=0, max=MAX_RETRIES,
                                           help="Retries per call (default 2)."),
    max_response_mb: float | None = typer.Option(None, "--max-response-mb", min=0.001, max=MAX_RESPONSE_MB,
                                                 help="The most one reply may take, MiB (default: the model's "
                                                      "max_response_mb, else 32)."),
    run_id: str | None = typer.Option(None, "--run-id", help="Name the run folder OUT/RUN_ID (default: the start "
                                                             "time and a random suffix)."),
    shard: str | None = typer.Option(None, "--shard", help="Run only shard I of N (I/N, 1-based, by row key) "
                                                           "into OUT/RUN_ID/shard-I-of-N; needs --run-id."),
    cache: bool | None = typer.Option(None, "--cache/--no-cache",
                                      help="Answer identical requests from the response cache (default: only "
                                           "at temperature 0 without repeats; --cache with repeats keys each "
                                           "attempt by its index); --no-cache makes every call."),
    ray: str | None = typer.Option(None, "--ray", metavar="ADDRESS",
                                   help="Run the shards as Ray tasks on the cluster at ADDRESS (host:port, "
                                        "ray://..., auto), or `local` for ray.init(); needs the [ray] extra."),
    shards: int | None = typer.Option(None, "--shards", min=1, max=100_000,
                                      help="With --ray: how many shards (default: the cluster's CPUs)."),
    until_decided: str | None = typer.Option(None, "--until-decided", metavar="A,B",
                                             help="Run tests in a random order (--seed) and stop once an anytime-"
                                                  "valid paired test decides whether model A or B is better "
                                                  "(docs/running.md); --resume continues it, --resume --complete runs "
                                                  "the rest."),
    alpha: float = typer.Option(0.05, "--alpha", min=0.0001, max=0.5,
                                help="With --until-decided: the false 'better' rate it keeps (default 0.05)."),
    complete: bool = typer.Option(False, "--complete", help="With --resume of an --until-decided run: run every "
                                  "test left (plain --resume continues the decision)."),
) -> None:
    """Run suites against models; results go to OUT/<run-id>/ (Parquet + _manifest.json)."""
    from engine.run.run_config import Invocation
    from engine.run.session import run_session

    invocation = Invocation(
        paths=[str(p) for p in paths or []], models_file=None if models is None else str(models),
        model_names=list(model), out=None if out is None else str(out), concurrency=concurrency, repeat=repeat,
        seed=seed, temperature=temperature, max_tokens=max_tokens, filters=list(filters),
        filter_file=None if filter_file is None else str(filter_file),
        stream=None if not no_stream else False, max_retries=max_retries, max_cost=max_cost,
        max_response_mb=max_response_mb, run_id=run_id, shard=shard, cache=cache, batch=batch or None)
    decide = None
    if until_decided is not None:
        from engine.errors import UsageError
        from engine.run.until_decided import UntilDecided

        try:
            decide = UntilDecided.parse(until_decided, alpha)
        except UsageError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        if ray is not None:
            typer.echo("error: --until-decided with --ray: the decision needs both models' rows in one process; "
                       "drop --ray", err=True)
            raise typer.Exit(2)
        if batch:
            typer.echo("error: --until-decided with --batch: the decision reads each answer as it comes, and a "
                       "batch's answers come within a day; drop one of them", err=True)
            raise typer.Exit(2)
    if ray is not None and not dry_run:   # docs/scale.md
        from engine.run.ray_dispatch import run_on_ray

        if retry_errors:
            raise typer.BadParameter("--retry-errors with --ray: resume each shard by hand (docs/scale.md)")
        raise typer.Exit(run_on_ray(invocation, None if ray == "local" else ray, shards, resume=resume, quiet=quiet))
    code = run_session(invocation, dry_run=dry_run, resume=resume, retry_errors=retry_errors, quiet=quiet,
                       until_decided=decide, complete=complete, finished=functools.partial(_finished, quiet=quiet))
    raise typer.Exit(code)


def _finished(run_dir: Path, *, quiet: bool) -> None:
    """A finished run (not one the user stopped): its viewer's snapshot, when the run is large."""
    from engine.cli.view_cmd import prepare_snapshot
    from engine.results.folder import read_manifest

    manifest = read_manifest(run_dir) or {}
    rows = (manifest.get("counts") or {}).get("rows")
    if not manifest.get("interrupted") and isinstance(rows, int):
        prepare_snapshot(run_dir, rows, quiet=quiet)
