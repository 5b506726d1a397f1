"""`engine analyze`, `engine report`, `engine diff`, `engine rescore`.

Exit codes: 0 ok; 1 a `--fail-under` threshold missed or a regression found; 2 usage (a missing
folder, no results - zero rows counts as none -, a bad option), always with a message, never a traceback.
pandas and pyarrow are imported inside the commands so `engine --help` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from engine.cli.app import app, import_app  # noqa: F401
from engine.errors import EngineError

if TYPE_CHECKING:
    from engine.analysis.cells import Cells

USAGE = 2
FAILED = 1

# Options several commands share.
IncludeFallback = Annotated[bool, typer.Option("--include-fallback", help="Keep rows a fallback model served.")]
Alpha = Annotated[float, typer.Option(
    "--alpha", help="Error rate of the 'discriminating' call: a false-discovery rate (see --correction).")]
Correction = Annotated[str, typer.Option(
    "--correction", help="bh: alpha is a false-discovery rate [default]; holm: a family-wise error rate.")]
ClusterBy = Annotated[str, typer.Option(
    "--cluster-by", help="Interval clusters: test = (suite, test_id) [default]; case = every case independent.")]
Calibration = Annotated[Path | None, typer.Option(
    "--calibration", help="The judges' calibration file `engine validate --judges` wrote (default: "
                          "judge-calibration.json beside the judge cache).")]
Irt = Annotated[bool, typer.Option(
    "--irt", help="Also fit a 2PL IRT model (needs 5+ models): abilities, item a and b.")]


def _fail_usage(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(USAGE)


def _load(paths: list[Path], include_fallback: bool, columns: object = "analysis"):
    from engine.analysis.load import ANALYSIS_COLUMNS, load

    wanted = ANALYSIS_COLUMNS if columns == "analysis" else None
    try:
        df = load(paths, include_fallback=include_fallback, columns=wanted)
    except EngineError as exc:
        raise _fail_usage(str(exc)) from None
    if not len(df):
        shown = ", ".join(str(p) for p in paths)
        dropped = sum(df.attrs.get("fallback_rows", {}).get("rows", {}).values())
        why = (f" ({dropped} rows served by a fallback model were left out; --include-fallback keeps them)"
               if dropped else "")
        raise _fail_usage(f"{shown}: no results: the Parquet files hold zero rows{why}")
    return df


def _check_options(alpha: float, cluster_by: str, correction: str = "bh") -> None:
    from engine.analysis.cells import CLUSTER_KEYS
    from engine.analysis.stats import CORRECTIONS

    if correction not in CORRECTIONS:
        raise _fail_usage(f"--correction {correction}: choose one of {', '.join(CORRECTIONS)}")
    if not 0.0 < alpha < 1.0:
        raise _fail_usage(f"--alpha {alpha}: give a rate between 0 and 1 (0.05 is the default)")
    if cluster_by not in CLUSTER_KEYS:
        raise _fail_usage(f"--cluster-by {cluster_by}: choose one of {', '.join(CLUSTER_KEYS)}")


@app.command()
def analyze(
    results: Annotated[list[Path], typer.Argument(help="Run folders, a results folder, or Parquet files.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | markdown | json | csv")] = "table",
    table: Annotated[
        str | None,
        typer.Option("--table", help="For csv: models | tests | suites | tags | passk | comparisons | agents | "
                                      "variants | variant_comparisons"),
    ] = None,
    fail_under: Annotated[
        float | None,
        typer.Option("--fail-under", help="Exit 1 when any model's mean score is below this (0..1)."),
    ] = None,
    fail_on_regression: Annotated[
        Path | None,
        typer.Option(
            "--fail-on-regression",
            metavar="BASE",
            help="Exit 1 when a model regressed against the BASE run (interval below 0 and McNemar agreeing).",
        ),
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write JUnit XML (one testcase per test × model).")
    ] = None,
    include_fallback: IncludeFallback = False,
    alpha: Alpha = 0.05,
    correction: Correction = "bh",
    cluster_by: ClusterBy = "test",
    ks: Annotated[
        str | None, typer.Option("--k", help="pass@k / pass^k at these k, e.g. 1,5,10 (default 1,2,3,5,10,... ≤ n).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
    ] = None,
    irt: Irt = False,
    engine: Annotated[
        str,
        typer.Option("--engine", help="auto: DuckDB past what memory should hold [default]; pandas; duckdb "
                                      "(the same statistics over sums made out of core; needs the [duckdb] extra)."),
    ] = "auto",
    calibration: Calibration = None,
    full: Annotated[
        bool, typer.Option("--full", help="Every row and column of every table (by default long or all-zero "
                                          "tables are folded, each fold saying what it left out).")
    ] = False,
    subset: Annotated[
        str | None, typer.Option("--subset", metavar="N", help="Choose N tests (or N%) that keep the models' ranking "
                                 "and scores, checked on held-out models (docs/analysis.md).")
    ] = None,
    saturated_since: Annotated[
        str | None, typer.Option("--saturated-since", metavar="DATE", help="List the tests saturated in every run "
                                 "since DATE (YYYY-MM-DD), with the calls and cost they took.")
    ] = None,
    filter_file: Annotated[
        Path | None, typer.Option("--filter-file", help="With --subset: write the chosen tests; with "
                                  "--saturated-since: the newest run's tests without the saturated ones "
                                  "(for `engine run --filter-file`).")
    ] = None,
) -> None:
    """Which tests discriminate, which are saturated, floor or flaky, and which model is better."""
    from engine.analysis.render import FORMATS, TABLES, render

    if fmt not in FORMATS:
        raise _fail_usage(f"--format {fmt}: choose one of {', '.join(FORMATS)}")
    if table is not None and table not in TABLES:
        raise _fail_usage(f"--table {table}: choose one of {', '.join(TABLES)}")
    if fail_under is not None and not 0.0 <= fail_under <= 1.0:
        raise _fail_usage(f"--fail-under {fail_under}: give a score between 0 and 1")
    _check_options(alpha, cluster_by, correction)
    k_values = _parse_ks(ks)
    if irt and fmt == "csv":
        raise _fail_usage("--irt: use --format table, markdown or json (csv holds one table)")
    from engine.cli import analyze_filters

    analyze_filters.check(fmt, subset, saturated_since, filter_file)
    from engine.analysis.cells import build_cells
    from engine.analysis.summary import analyze as run_analysis
    from engine.analysis.summary import analyze_grid

    path, files = _choose_engine(results, engine)
    if path == "duckdb":
        cells = _grid(results, include_fallback, cluster_by)
        grid, rows, agents = cells
        df: Any = grid
        base: Any = _grid([fail_on_regression], include_fallback, cluster_by)[0] \
            if fail_on_regression is not None else None
        analysis = analyze_grid(grid, rows, agents=agents, alpha=alpha, ks=k_values, correction=correction)
    else:
        df = _load(results, include_fallback)
        base = _load([fail_on_regression], include_fallback) if fail_on_regression is not None else None
        analysis = run_analysis(df, alpha=alpha, cluster_by=cluster_by, ks=k_values, correction=correction)
    grid_of = (lambda: df) if path == "duckdb" else (lambda: build_cells(df))
    text = render(analysis, fmt, table=table, full=full)
    from engine.analysis.sequential_section import with_sequential

    text = with_sequential(text, fmt, files)   # a run `engine run --until-decided` stopped: its decision first
    if irt:
        text = _with_irt(text, fmt, grid_of())
    if subset is not None or saturated_since is not None:   # engine/cli/analyze_filters.py
        text = analyze_filters.append(text, fmt, cells=grid_of, files=files, sources=[str(p) for p in results],
                                      subset=subset, since=saturated_since, filter_file=filter_file,
                                      include_fallback=include_fallback, alpha=alpha, correction=correction)
    if fmt != "csv" and path == "duckdb" and _judged_or_varied(files):
        # The judges section reads every row's evaluator list, the variant tables every row: in memory only.
        typer.echo("note: the judges section and the prompt-variant tables are computed in memory only; run "
                   "`--engine pandas` on the runs that have them", err=True)
    elif fmt != "csv":
        text = _with_judges(text, fmt, files, include_fallback, calibration)
    if fmt != "csv":
        text = _with_labels(text, fmt, files)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if junit is not None:
        from engine.analysis.junit import write_junit

        write_junit(None, junit, cells=grid_of())
    code = 0
    if fail_under is not None:
        missed = analysis.models[~(analysis.models["mean_score"] >= fail_under)]
        for row in missed.itertuples():
            shown = "no score" if row.mean_score != row.mean_score else f"{row.mean_score:.3f}"
            typer.echo(f"fail: {row.model} mean score {shown} is below --fail-under {fail_under:g}", err=True)
        code = FAILED if len(missed) else code
    if base is not None:
        from engine.analysis.compare import diff as run_diff

        result = run_diff(base, df, cluster_by=cluster_by)
        for row in result.summary.itertuples():
            typer.echo(
                f"{row.model}: {row.verdict} against {fail_on_regression} "
                f"({row.evidence}; {row.pass_to_fail} pass→fail, {row.fail_to_pass} fail→pass)",
                err=True,
            )
        if result.summary.empty:
            typer.echo(f"warning: no model in common with {fail_on_regression}: nothing to compare", err=True)
        code = FAILED if result.regressed else code
    raise typer.Exit(code)


def _judged_or_varied(files: list[Path]) -> bool:
    """Whether the Parquet files hold judge verdicts or prompt variants (read from their footers)."""
    from engine.analysis.load import has_values

    return has_values(files, "judge_calls") or has_values(files, "variant")


def _choose_engine(paths: list[Path], engine: str) -> tuple[str, list[Path]]:
    """(the analysis path, the Parquet files under `paths`); says on stderr when the path is not the usual one.

    The files are found once here (a URL run is fetched here) and reused by the checks that read only footers.
    """
    from engine.analysis.large import choose_engine
    from engine.analysis.load import find_parquet_files

    try:
        files = find_parquet_files(paths)
        path, why = choose_engine(files, engine)
    except EngineError as exc:
        raise _fail_usage(str(exc)) from None
    if path == "duckdb" or "pip install" in why:
        typer.echo(f"note: analysed with {why}", err=True)
    return path, files


def _grid(paths: list[Path], include_fallback: bool, cluster_by: str) -> tuple:
    """(cells, rows, agents) summed in DuckDB, with the same usage errors as `_load`."""
    from engine.analysis.large import grid_from_parquet

    try:
        cells, rows, agents = grid_from_parquet(paths, include_fallback=include_fallback, cluster_by=cluster_by)
    except EngineError as exc:
        raise _fail_usage(str(exc)) from None
    if not rows.rows.sum():
        shown = ", ".join(str(p) for p in paths)
        raise _fail_usage(f"{shown}: no results: the Parquet files hold zero rows")
    return cells, rows, agents


def _with_irt(text: str, fmt: str, cells: Cells) -> str:
    """Append the 2PL IRT fit (or the note why none was made) to rendered `analyze` output."""
    from engine.analysis.irt import fit_2pl, render_irt

    result = fit_2pl(cells)
    if fmt == "json":
        import json

        from engine.analysis.render import dumps_json

        payload = json.loads(text)
        payload["irt"] = result.to_dict()
        return dumps_json(payload)
    return text + render_irt(result, fmt)


def _with_judges(text: str, fmt: str, files: list[Path], include_fallback: bool, calibration: Path | None) -> str:
    """Append the judges section (engine.judge.trust) when the Parquet files hold `judge` verdicts."""
    from engine.analysis.load import has_values
    from engine.judge.trust import default_calibration_path, judge_report, read_calibration_records, render_judges

    if not has_values(files, "judge_calls"):   # nothing judged: no second, wide load
        return text
    columns = ("model", "suite", "test_id", "test_hash", "evaluators", "judge_calls")
    df = _load(files, include_fallback, columns=columns)
    if df["judge_calls"].isna().all():
        return text
    report = judge_report(df, read_calibration_records(calibration or default_calibration_path()))
    if fmt == "json":
        import json

        from engine.analysis.render import dumps_json

        payload = json.loads(text)
        payload["judges"] = report
        return dumps_json(payload)
    return text + render_judges(report, fmt)


def _with_labels(text: str, fmt: str, files: list[Path]) -> str:
    """Append the human-labels section (engine.analysis.labels) when a run folder holds `_labels.parquet`."""
    from engine.analysis.labels import label_report, render_labels

    try:
        report = label_report(files)
    except EngineError as exc:
        raise _fail_usage(str(exc)) from None
    if report is None:
        return text
    if fmt == "json":
        import json

        from engine.analysis.render import dumps_json

        payload = json.loads(text)
        payload["labels"] = report
        return dumps_json(payload)
    return text + render_labels(report, fmt)


@app.command()
def report(
    results: Annotated[list[Path], typer.Argument(help="Run folders, a results folder, or Parquet files.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path(
        "report.html"
    ),
    include_fallback: IncludeFallback = False,
    alpha: Alpha = 0.05,
    correction: Correction = "bh",
    cluster_by: ClusterBy = "test",
    calibration: Calibration = None,
    irt: Irt = False,
) -> None:
    """Write one self-contained HTML report (opens offline): every section of `engine analyze`, a heatmap, a
    scatter and a per-test drill-down."""
    from engine.analysis.report import write_report
    from engine.judge.trust import default_calibration_path, read_calibration_records

    _check_options(alpha, cluster_by, correction)
    df = _load(results, include_fallback, columns=None)
    path = write_report(df, output, alpha=alpha, correction=correction, cluster_by=cluster_by,
                        sources=[str(p) for p in results],
                        calibration=read_calibration_records(calibration or default_calibration_path()), irt=irt)
    typer.echo(f"report written to {path}")


@app.command("diff")
def diff_cmd(
    base: Annotated[Path, typer.Argument(help="The base run (folder or Parquet).")],
    new: Annotated[Path, typer.Argument(help="The new run.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | json | csv")] = "table",
    include_fallback: IncludeFallback = False,
    cluster_by: ClusterBy = "test",
) -> None:
    """Per model: pass→fail and fail→pass flips by test, and a regression verdict. Exit 1 on a regression."""
    if fmt not in ("table", "json", "csv"):
        raise _fail_usage(f"--format {fmt}: choose table, json or csv")
    _check_options(0.05, cluster_by)
    from engine.analysis.compare import diff as run_diff
    from engine.analysis.render import dumps_json

    result = run_diff(_load([base], include_fallback), _load([new], include_fallback), cluster_by=cluster_by)
    if fmt == "json":
        payload = {
            "cluster_by": cluster_by,
            "summary": result.summary.to_dict(orient="records"),
            "flips": result.flips.to_dict(orient="records"),
        }
        sys.stdout.write(dumps_json(payload))
    elif fmt == "csv":
        sys.stdout.write(result.flips.to_csv(index=False))
    else:
        from rich.console import Console
        from rich.table import Table

        console = Console(width=160)
        summary = Table(
            title="Per model (tests with a changed hash left out of the verdict; a verdict needs the paired "
            "interval and McNemar to agree)",
            title_justify="left",
        )
        for name in (
            "model",
            "tests",
            "pass→fail",
            "fail→pass",
            "changed",
            "mean A",
            "mean B",
            "Δ [95% CI]",
            "McNemar p",
            "verdict",
        ):
            summary.add_column(name)
        for r in result.summary.itertuples():
            summary.add_row(
                str(r.model),
                str(r.tests),
                str(r.pass_to_fail),
                str(r.fail_to_pass),
                str(r.changed_tests),
                _signed(r.mean_a, "{:.3f}"),
                _signed(r.mean_b, "{:.3f}"),
                f"{_signed(r.mean_diff)} [{_signed(r.diff_lo)}, {_signed(r.diff_hi)}]",
                _signed(r.mcnemar_p, "{:.3g}"),
                str(r.verdict),
            )
        console.print(summary)
        flips = Table(title=f"Flips ({len(result.flips)})", title_justify="left")
        for name in ("model", "test", "change", "score A", "score B", "test changed"):
            flips.add_column(name)
        for r in result.flips.itertuples():
            test = f"{r.suite}/{r.test_id}" + (f"#{r.case_index}" if r.case_index >= 0 else "")
            flips.add_row(
                str(r.model),
                test,
                str(r.change),
                _signed(r.score_a, "{:.3f}"),
                _signed(r.score_b, "{:.3f}"),
                "yes" if r.hash_changed else "",
            )
        console.print(flips)
    raise typer.Exit(FAILED if result.regressed else 0)


def _signed(value: float, spec: str = "{:+.3f}") -> str:
    """A number for a table cell; "-" for NaN or None."""
    return "-" if value is None or value != value else spec.format(value)


def _parse_ks(text: str | None) -> list[int] | None:
    """--k "1,5,10" as integers ≥ 1."""
    if text is None:
        return None
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise _fail_usage(f"--k {text}: give whole numbers of attempts ≥ 1, comma-separated (e.g. 1,5,10)")
    return values


@app.command()
def rescore(
    results: Annotated[Path, typer.Argument(help="The run folder whose stored answers to re-score.")],
    suites: Annotated[
        list[Path], typer.Option("--suites", help="Suite files or folders with the current evaluators.")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Parent folder for the new run (default: the parent of RESULTS)."),
    ] = None,
    models: Annotated[
        Path | None,
        typer.Option("--models", help="The models file naming the judge models (suites with `judge` need it: "
                                      "judgements come from the judge cache)."),
    ] = None,
) -> None:
    """Re-score stored answers with the current evaluators, calling no model, into a new run folder."""
    from engine.analysis.rescore import rescore_run

    try:
        outcome = rescore_run(results, suites, out_parent=out, models_file=models)
    except EngineError as exc:
        raise _fail_usage(str(exc)) from None
    for line in outcome.messages:
        typer.echo(line, err=True)
    typer.echo(f"rescored {outcome.rescored} rows into {outcome.folder}")
    from engine.cli.view_cmd import prepare_snapshot

    prepare_snapshot(outcome.folder, outcome.rescored + outcome.unchanged)
