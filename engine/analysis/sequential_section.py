"""The `engine analyze` section of a run `engine run --until-decided A,B` stopped (docs/analysis.md).

The decision itself is made during the run (engine/run/until_decided.py) and recorded in the run folder's
`_manifest.json` under `until_decided`; this module only reads it back, states it, and labels the other tables:
on a folder stopped by the sequential test they describe the tests that ran, a sample whose size depended on
the answers, so their fixed-sample intervals are not anytime-valid and a difference looks larger than on the
full suite (the run stopped when it looked large). A folder completed later by `--resume` says so instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.base.sequential import describe
from engine.results.folder import read_manifest


def decisions(files: Iterable[Path]) -> list[dict[str, Any]]:
    """The `until_decided` record of each run folder holding `files`, with `folder` and `completed` added."""
    found: list[dict[str, Any]] = []
    seen: set[Path] = set()
    for file in files:
        folder = Path(file).parent
        if folder in seen:
            continue
        seen.add(folder)
        manifest = read_manifest(folder)
        if manifest is None:
            continue   # no manifest (a bare Parquet file, a run still going): nothing recorded
        record = manifest.get("until_decided")
        if isinstance(record, dict) and "verdict" in record:
            found.append({**record, "folder": str(folder), "completed": bool(manifest.get("complete"))
                          and manifest.get("stopped") is None})
    return found


def _rows(record: dict[str, Any]) -> list[list[str]]:
    alpha = record["alpha"]
    full, made = record["jobs_full_run"], record["jobs_made"]
    mean = record["mean_diff"]
    return [
        ["verdict", f"{record['verdict']} ({record['reason']})"],
        ["e-value against no difference (decides at ≥ 1/α)", f"{record['e_value']:.4g} (1/α = {1 / alpha:g})"],
        [f"{1 - alpha:.0%} confidence sequence of mean({record['model_a']} − {record['model_b']})",
         ("-" if mean is None else f"{mean:+.3f} ") + f"[{record['cs_lo']:+.3f}, {record['cs_hi']:+.3f}]"],
        ["tests used / read / in suite", f"{record['tests_used']} / {record['tests_read']} / {record['tests_in_suite']}"
         + (f" ({record['tests_excluded']} left out: no scored attempt for a model)" if record["tests_excluded"]
            else "")],
        ["tests dispatched / not run", f"{record['tests_dispatched']} / {record['tests_not_run']}"],
        ["calls made / full run (saved)",
         f"{made} / {full} ({record['jobs_saved']} saved, {record['jobs_saved'] / full:.0%})" if full else "-"],
        ["order seed, α", f"{record['seed']}, {alpha:g}"],
    ]


def _note(record: dict[str, Any]) -> str:
    if record["completed"]:
        return (f"note: {record['folder']} was first stopped by --until-decided ({record['verdict']} after "
                f"{record['tests_used']} tests) and later completed by --resume: the tables use every test")
    return (f"note: the tables of {record['folder']} are based on a sequentially stopped sample: "
            f"{record['tests_dispatched']} of {record['tests_in_suite']} tests in a random order (seed "
            f"{record['seed']}), stopped when the paired test decided; their intervals and verdicts are "
            f"fixed-sample ones on that sample (not anytime-valid; a difference reads larger than on the whole "
            f"suite). engine run --resume {record['folder']} runs the rest")


def with_sequential(text: str, fmt: str, files: Iterable[Path]) -> str:
    """`engine analyze` output with the until-decided section first, when a run folder has one.

    Args:
        text: The rendered analysis.
        fmt: table | markdown | json | csv (csv is one table: left as is).
        files: The Parquet files analysed.
    """
    records = decisions(files)
    if not records or fmt == "csv":
        return text
    if fmt == "json":
        from engine.analysis.render import dumps_json

        payload = json.loads(text)
        payload["until_decided"] = records
        return dumps_json(payload)
    from engine.analysis.render import tables_as_markdown, tables_as_text

    notes = [_note(r) for r in records] + [describe(r) for r in records]
    tables = [(f"Sequential stop (engine run --until-decided {r['model_a']},{r['model_b']}; anytime-valid "
               f"betting test, docs/analysis.md)", ["", "value"], _rows(r)) for r in records]
    section = tables_as_markdown(notes, tables) + "\n" if fmt == "markdown" else tables_as_text(notes, tables)
    return section + text
