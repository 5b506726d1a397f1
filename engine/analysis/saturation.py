"""Saturation over time: the tests every model passed in every run since a date, and what they cost.

A *run* is one `run_id` (a sharded run's shards share it). Its start is the `started_at` of its
`_manifest.json` (the journal's start, kept across `--resume`), else the earliest `started_at` of its rows. A
test is listed when it was `saturated` (docs/analysis.md: not discriminating, and every model passes by the
strict-majority rule; not a test whose failing rows a fallback model served and were left out) in every run
since the date that scored it, and in at least one. Runs whose rows of the
test are all errors, and runs that did not run it, are neither for nor against it: `runs` says in how many of
the runs since the date it was saturated.

Calls: each row is one model call (a conversation its `turns`), none when answered from the response cache,
plus its judge calls; cost: `cost` + `judge_cost` over the rows (null when nothing was priced).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.analysis.cells import ITEM_KEY, build_cells
from engine.analysis.items import DEFAULT_ALPHA, DEFAULT_CORRECTION, per_test
from engine.analysis.models import failed_fallbacks, fallback_rows
from engine.results.folder import read_manifest

if TYPE_CHECKING:
    import pandas as pd

EXTRA_COLUMNS = ("started_at", "judge_calls", "judge_cost")


@dataclass
class Saturation:
    """The tests saturated in every run since a date.

    Args:
        since: The date (UTC midnight) runs are counted from.
        runs: One row per run since then, oldest first: run_id, started_at (ISO, UTC), dated_by ("manifest"
            or "rows"), models, tests.
        tests: One row per saturated test, most calls first: suite, test_id, case_index, runs (saturated in),
            runs_since (runs since the date), rows, calls, cost, cost_per_run.
        keep: The newest run's tests that are not listed, as `suite/test_id` (the filter that drops them).
        newest: The newest run's id.
        notes: What limits the list.
    """

    since: dt.datetime
    runs: pd.DataFrame
    tests: pd.DataFrame
    keep: list[str]
    newest: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: NaN as None."""
        from engine.analysis.summary import _records

        return {"since": self.since.date().isoformat(), "newest_run": self.newest, "notes": self.notes,
                "runs": _records(self.runs), "tests": _records(self.tests), "keep": len(self.keep)}


def parse_since(text: str) -> dt.datetime:
    """`--saturated-since` as a UTC datetime: YYYY-MM-DD (midnight) or an ISO date and time.

    Raises:
        ValueError: Not such a date; the message says the form.
    """
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--saturated-since {text}: give a date as YYYY-MM-DD (e.g. 2026-11-01)") from None
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def _manifest_starts(files: list[Path]) -> dict[str, dt.datetime]:
    """run_id -> the earliest `started_at` of the `_manifest.json` files beside (or one folder above) `files`."""
    starts: dict[str, dt.datetime] = {}
    for folder in {f.parent for f in files}:
        for run_dir in (folder, folder.parent):   # a shard's parts: the combined manifest is one folder up
            data = read_manifest(run_dir)
            if data is None:
                continue
            try:
                when = parse_since(str(data["started_at"]))
                run_id = str(data["run_id"])
            except (ValueError, KeyError, TypeError):
                continue
            starts[run_id] = min(when, starts.get(run_id, when))
    return starts


def _run_table(df: pd.DataFrame, files: list[Path]) -> pd.DataFrame:
    import pandas as pd

    manifest = _manifest_starts(files)
    rows_start = pd.to_datetime(df["started_at"], utc=True, errors="coerce").groupby(df["run_id"].astype(str)).min()
    runs = []
    for run_id, group in df.groupby(df["run_id"].astype(str), sort=False):
        start = manifest.get(run_id)
        dated_by = "manifest"
        if start is None:
            first = rows_start.get(run_id)
            start, dated_by = (None, "") if first is None or pd.isna(first) else (first.to_pydatetime(), "rows")
        runs.append({"run_id": run_id, "started": start, "dated_by": dated_by,
                     "models": group["model"].nunique(), "tests": group[list(ITEM_KEY)].drop_duplicates().shape[0]})
    return pd.DataFrame(runs)


def _calls_and_cost(df: pd.DataFrame) -> pd.DataFrame:
    """Per row: the calls it made and what it cost (module docstring)."""
    import pandas as pd

    cached = df["cached"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    turns = pd.to_numeric(df["turns"], errors="coerce").fillna(1).to_numpy()
    judge = pd.to_numeric(df["judge_calls"], errors="coerce").fillna(0).to_numpy()
    cost = pd.to_numeric(df["cost"], errors="coerce")
    judge_cost = pd.to_numeric(df["judge_cost"], errors="coerce")
    priced = (cost.notna() | judge_cost.notna()).to_numpy()
    return pd.DataFrame({"calls": np.where(cached, 0, turns) + judge,
                         "cost": np.where(priced, cost.fillna(0).to_numpy() + judge_cost.fillna(0).to_numpy(), np.nan)})


def saturated_since(df: pd.DataFrame, files: list[Path], since: dt.datetime, *, alpha: float = DEFAULT_ALPHA,
                    correction: str = DEFAULT_CORRECTION) -> Saturation:
    """The tests saturated in every run started on or after `since` (module docstring).

    Args:
        df: Results rows of every run (`load`, with the columns of `EXTRA_COLUMNS` too).
        files: The Parquet files `df` came from (their folders hold the runs' manifests).
        since: Runs that started at or after this count.
        alpha: The per-test rate of the "discriminating" call (a test called discriminating is not saturated).
        correction: "bh" or "holm" (see `per_test`).

    Raises:
        ValueError: No run started on or after `since`, or none can be dated; the message says which runs exist.
    """
    import pandas as pd

    runs = _run_table(df, files)
    undated = runs[runs["started"].isna()]
    runs = runs[runs["started"].notna()]
    if not len(runs):
        raise ValueError("no run can be dated: no _manifest.json with started_at and no started_at in the rows")
    recent = runs[runs["started"] >= since].sort_values("started", kind="stable")
    if not len(recent):
        newest = runs.sort_values("started")["started"].iloc[-1]
        raise ValueError(f"--saturated-since {since.date().isoformat()}: no run started on or after it "
                         f"({len(runs)} run{'s' if len(runs) != 1 else ''}, the newest started "
                         f"{newest.strftime('%Y-%m-%d %H:%M')} UTC)")
    notes = []
    if len(undated):
        notes.append(f"{len(undated)} run(s) without a start time left out: {', '.join(undated['run_id'])}")
    if len(recent) == 1:
        notes.append("one run since the date: this is the saturated list of the tests table, not a trend")

    run_ids = df["run_id"].astype(str)
    spend = _calls_and_cost(df)
    keys = ["suite", "test_id", "case_index"]
    saturated_in: dict[tuple[str, str, int], int] = {}
    seen_in: dict[tuple[str, str, int], int] = {}
    spent: list[pd.DataFrame] = []
    for run_id in recent["run_id"]:
        mask = (run_ids == run_id).to_numpy()
        rows = df[mask]
        tests = per_test(rows, cells=build_cells(rows), alpha=alpha, correction=correction,
                         left_out=failed_fallbacks(fallback_rows(df), run_id))
        scored = tests[tests["status"] != "no-data"]
        for row in scored.itertuples():
            key = (str(row.suite), str(row.test_id), int(row.case_index))
            seen_in[key] = seen_in.get(key, 0) + 1
            saturated_in[key] = saturated_in.get(key, 0) + bool(row.saturated)
        frame = pd.DataFrame({"suite": rows["suite"].astype(str).to_numpy(),
                              "test_id": rows["test_id"].astype(str).to_numpy(),
                              "case_index": rows["case_index"].astype("float64").fillna(-1).astype("int64").to_numpy(),
                              "calls": spend["calls"].to_numpy()[mask], "cost": spend["cost"].to_numpy()[mask]})
        spent.append(frame)
    always = [key for key, count in seen_in.items() if count == saturated_in[key]]
    totals = pd.concat(spent).groupby(keys).agg(rows=("calls", "size"), calls=("calls", "sum"),
                                                 cost=("cost", lambda c: c.sum() if c.notna().any() else np.nan))
    table = pd.DataFrame(always, columns=keys)
    if len(table):
        table = table.join(totals, on=keys)
        table.insert(3, "runs", [saturated_in[k] for k in always])
        table.insert(4, "runs_since", len(recent))
        table["cost_per_run"] = table["cost"] / table["runs"]
        table = table.sort_values(["calls", "suite", "test_id", "case_index"], ascending=[False, True, True, True],
                                  kind="stable").reset_index(drop=True)
    else:
        table = pd.DataFrame(columns=[*keys, "runs", "runs_since", "rows", "calls", "cost", "cost_per_run"])
    newest = str(recent["run_id"].iloc[-1])
    dropped = {f"{s}/{t}" for s, t in zip(table["suite"], table["test_id"], strict=True)}
    latest = df[(run_ids == newest).to_numpy()]
    keep = sorted({f"{s}/{t}" for s, t in zip(latest["suite"].astype(str), latest["test_id"].astype(str),
                                              strict=True)} - dropped)
    notes.append(f"the filter keeps the tests of the newest run ({newest}) that are not listed; a test added to the "
                 f"suites since is not in it")
    shown = recent.assign(started_at=[s.strftime("%Y-%m-%dT%H:%M:%SZ") for s in recent["started"]])
    return Saturation(since=since, runs=shown[["run_id", "started_at", "dated_by", "models", "tests"]]
                      .reset_index(drop=True), tests=table, keep=keep, newest=newest, notes=notes)


def saturation_sections(result: Saturation) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of the runs counted and the saturated tests."""
    def money(value: float) -> str:
        return "-" if value != value else f"{value:.4f}"

    runs = [[str(r.run_id), str(r.started_at), str(r.dated_by), str(r.models), str(r.tests)]
            for r in result.runs.itertuples()]
    tests = [[f"{r.suite}/{r.test_id}", f"{r.runs} of {r.runs_since}", str(r.rows), f"{r.calls:g}", money(r.cost),
              money(r.cost_per_run)] for r in result.tests.itertuples()]
    calls = float(result.tests["calls"].sum()) if len(result.tests) else 0.0
    return [(f"Runs since {result.since.date().isoformat()} (oldest first)",
             ["run", "started (UTC)", "dated by", "models", "tests"], runs),
            (f"Saturated in every run since {result.since.date().isoformat()}: {len(result.tests)} tests, "
             f"{calls:g} calls", ["test", "saturated in", "rows", "calls", "cost", "cost per run"], tests)]


def filter_text(result: Saturation, command: str) -> str:
    """The `--filter-file` text that drops the saturated tests: the newest run's other tests, one a line."""
    dropped = [f"#   {r.suite}/{r.test_id}  (saturated in {r.runs} of {r.runs_since} runs; {r.calls:g} calls)"
               for r in result.tests.itertuples()]
    header = [f"# {command}",
              f"# the tests of run {result.newest} except the {len(result.tests)} saturated in every run since "
              f"{result.since.date().isoformat()} (docs/analysis.md); dropped:", *dropped,
              "# run with: engine run SUITES --filter-file THIS_FILE"]
    return "\n".join([*header, *result.keep]) + "\n"
