"""How far each judge can be trusted: calibration agreement, judge vs judge, self-consistency, and agreement
with the deterministic evaluators on the same rows. Definitions: docs/analysis.md ("Judges").

    calibration_summary(run)          one judge node's calibration (validate --judges): n, agreement, κ / α
    write_calibration / read_calibration_records   the calibration file analyze reads back
    judge_report(df, records)         the `judges` section of `engine analyze`

A *judge* here is a judge model with a scale (`grader`, `pass_fail`): the run's judge nodes that use it are
pooled, because one node alone is graded only once per model and attempt - too few rows for any agreement
figure. Calibration records are kept per node and pooled the same way. Every figure carries its n; under
`MIN_N` pairs it is shown with the note "too few" and no verdict is drawn from it.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.judge.agreement import agreement, cohen_kappa, krippendorff_alpha, weighted_kappa, within_one

__all__ = ["CALIBRATION_FILE", "MIN_N", "calibration_summary", "default_calibration_path", "judge_report",
           "read_calibration_records", "render_judges", "write_calibration"]

#: Fewer pairs than this: figures are shown, marked "too few", and `validate --judges` draws no verdict
#: (a min_agreement check then fails: a threshold cannot be certified on so few examples).
MIN_N = 10
CALIBRATION_FILE = "judge-calibration.json"
_COMPOSITIONS = frozenset({"all", "any", "not"})
_NUMERIC_ORDER = {"1-5": list(range(1, 6)), "0-10": list(range(11))}


def default_calibration_path() -> Path:
    """The calibration file: beside the judge cache (`$ENGINE_JUDGE_CACHE`'s folder, else the user cache)."""
    from engine.judge.cache import default_path

    return default_path().parent / CALIBRATION_FILE


# -- calibration ---------------------------------------------------------------------------------------------

def calibration_summary(run: Mapping[str, Any]) -> dict[str, Any]:
    """The agreement of one judge with its calibration labels.

    Args:
        run: A calibration record: scale, order, numeric, min_agreement and items [{expect, grade}]
            (grade None: the judge gave none - a failed call or a reply unreadable twice).

    Returns:
        n (examples), graded, errors, agreement (exact; an error counts as a disagreement), within_one
        (numeric scales), kappa (nominal scales: Cohen's κ), weighted_kappa and alpha_ordinal (numeric
        scales), verdict (pass | fail | too few | no threshold) and a note.
    """
    items = list(run.get("items") or [])
    expect = [i["expect"] for i in items]
    given = [i["grade"] for i in items]
    graded = [(e, g) for e, g in zip(expect, given, strict=True) if g is not None]
    n = len(items)
    out: dict[str, Any] = {"n": n, "graded": len(graded), "errors": n - len(graded),
                           "agreement": agreement(expect, given), "within_one": None, "kappa": None,
                           "weighted_kappa": None, "alpha_ordinal": None}
    a = [e for e, _ in graded]
    b = [g for _, g in graded]
    if run.get("numeric"):
        order = list(run.get("order") or sorted(set(a) | set(b)))
        out["within_one"] = (sum(abs(e - g) <= 1 for e, g in graded) / n) if n else None
        out["weighted_kappa"] = weighted_kappa(a, b, order)
        out["alpha_ordinal"] = krippendorff_alpha(list(zip(a, b, strict=True)), "ordinal", order)
    else:
        out["kappa"] = cohen_kappa(a, b)
    threshold = run.get("min_agreement")
    if n < MIN_N:
        out["verdict"] = "too few"
        out["note"] = f"n={n} < {MIN_N}: too few examples to certify this judge; add labelled examples"
    elif threshold is None:
        out["verdict"] = "no threshold"
        out["note"] = "no min_agreement set"
    else:
        passed = out["agreement"] is not None and out["agreement"] >= threshold
        out["verdict"] = "pass" if passed else "fail"
        out["note"] = f"agreement {out['agreement']:.3f} {'>=' if passed else '<'} min_agreement {threshold:g}"
    return out


def write_calibration(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Merge records into the calibration file (one per suite/test/path; the newest wins), written atomically."""
    existing = {_record_key(r): r for r in read_calibration_records(path)}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for record in records:
        existing[_record_key(record)] = {**record, "made_at": stamp}
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"version": 1, "records": list(existing.values())}, indent=1,
                                    ensure_ascii=False, default=str), encoding="utf-8")
    os.replace(temporary, path)


def read_calibration_records(path: Path) -> list[dict[str, Any]]:
    """The records of a calibration file ([] when it does not exist or cannot be read)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    records = data.get("records") if isinstance(data, dict) else None
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def _record_key(record: Mapping[str, Any]) -> tuple[str, str, str]:
    return str(record.get("suite")), str(record.get("test_id")), str(record.get("path"))


# -- the run's judges ----------------------------------------------------------------------------------------

def _grade(text: Any) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def _judge_name(node: Mapping[str, Any]) -> tuple[str, str]:
    return str(node.get("judge_model") or "(default judge)"), str(node.get("judge_scale") or "?")


def _metric(scale: str) -> tuple[str, list[Any] | None]:
    return ("ordinal", _NUMERIC_ORDER[scale]) if scale in _NUMERIC_ORDER else ("nominal", None)


def _pair_stats(a: Sequence[Any], b: Sequence[Any], scale: str | None) -> dict[str, Any]:
    """n, agreement, Cohen's κ; on a numeric scale also within-one, weighted κ and ordinal α."""
    out: dict[str, Any] = {"n": len(a), "agreement": agreement(a, b)}
    if scale in _NUMERIC_ORDER:
        order = _NUMERIC_ORDER[scale]
        out.update(within_one=within_one(a, b), weighted_kappa=weighted_kappa(a, b, order),
                   alpha_ordinal=krippendorff_alpha(list(zip(a, b, strict=True)), "ordinal", order))
    else:
        out["kappa"] = cohen_kappa(a, b)
    if len(a) < MIN_N:
        out["note"] = f"too few (n < {MIN_N})"
    return out


def judge_report(df: Any, records: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Per judge: rows graded, errors, pass rate, self-consistency across samples, agreement with the
    deterministic evaluators on the same rows and with its calibration labels; and judge-vs-judge pairs.

    Args:
        df: Results rows with suite, test_id, test_hash and evaluators (the judge_* node fields).
        records: Calibration records (`read_calibration_records`); matched to the run's judge nodes by
            suite, test id and path, and used only when the test's hash is unchanged since.

    Returns:
        {"min_n": MIN_N, "judges": [...], "pairs": [...]} (empty lists when the run has no judge).
    """
    per_judge: dict[tuple[str, str], dict[str, Any]] = {}
    versus: dict[tuple[str, str, str], list[tuple[bool, bool]]] = defaultdict(list)
    pairs: dict[tuple[str, str, str, str], list[tuple[Any, Any]]] = defaultdict(list)
    nodes_seen: dict[tuple[str, str], set[tuple[str, str, str, str]]] = defaultdict(set)
    for row in df[["suite", "test_id", "test_hash", "evaluators"]].itertuples(index=False):
        nodes = [n for n in (row.evaluators if row.evaluators is not None else []) if n is not None]
        judges = [n for n in nodes if n.get("kind") == "judge"]
        if not judges:
            continue
        leaves = [n for n in nodes if n.get("kind") not in _COMPOSITIONS and n.get("kind") != "judge"
                  and not n.get("error")]
        for node in judges:
            name = _judge_name(node)
            stats = per_judge.setdefault(name, {"judge_model": name[0], "scale": name[1], "rows": 0, "errors": 0,
                                                "passed": 0, "samples": [], "calls": 0, "cost": None})
            nodes_seen[name].add((str(row.suite), str(row.test_id), str(node.get("path")), str(row.test_hash)))
            stats["rows"] += 1
            stats["calls"] += int(node.get("judge_calls") or 0)
            if node.get("judge_cost") is not None:
                stats["cost"] = (stats["cost"] or 0.0) + float(node["judge_cost"])
            if node.get("error"):
                stats["errors"] += 1
                continue
            stats["passed"] += bool(node.get("passed"))
            samples = [_grade(g) for g in (node.get("judge_grades") if node.get("judge_grades") is not None else [])]
            if len(samples) >= 2:
                stats["samples"].append(samples)
            for leaf in leaves:
                versus[(*name, str(leaf.get("kind")))].append((bool(node.get("passed")), bool(leaf.get("passed"))))
        graded = [n for n in judges if not n.get("error")]
        for i, first in enumerate(graded):
            for second in graded[i + 1:]:
                one, two = _judge_name(first), _judge_name(second)
                if one[1] == two[1]:
                    pairs[(one[0], two[0], one[1], "grade")].append((_grade(first.get("judge_grade")),
                                                                      _grade(second.get("judge_grade"))))
                else:
                    pairs[(one[0], two[0], f"{one[1]} vs {two[1]}", "passed")].append(
                        (bool(first.get("passed")), bool(second.get("passed"))))
    judges_out = []
    for name, stats in sorted(per_judge.items()):
        graded_rows = stats["rows"] - stats["errors"]
        entry = {"judge_model": stats["judge_model"], "scale": stats["scale"], "rows": stats["rows"],
                 "errors": stats["errors"], "pass_rate": stats["passed"] / graded_rows if graded_rows else None,
                 "judge_calls": stats["calls"], "judge_cost": stats["cost"],
                 "self_consistency": _self_consistency(stats["samples"], stats["scale"]),
                 "vs_deterministic": [
                     {"evaluator": kind, **_pair_stats([a for a, _ in got], [b for _, b in got], None)}
                     for (model, scale, kind), got in sorted(versus.items()) if (model, scale) == name],
                 "calibration": _calibration_for(nodes_seen[name], records)}
        judges_out.append(entry)
    pairs_out = [{"judge_a": a, "judge_b": b, "scale": scale, "compared": what,
                  **_pair_stats([x for x, _ in got], [y for _, y in got], scale if what == "grade" else None)}
                 for (a, b, scale, what), got in sorted(pairs.items())]
    return {"min_n": MIN_N, "judges": judges_out, "pairs": pairs_out}


def _self_consistency(samples: list[list[Any]], scale: str) -> dict[str, Any] | None:
    """Rows asked several times: the mean share of samples on the row's modal grade, the share of rows whose
    samples all agree, and Krippendorff's α with the samples as coders and the rows as units."""
    if not samples:
        return None
    modal = [Counter(s).most_common(1)[0][1] / len(s) for s in samples]
    metric, order = _metric(scale)
    out = {"rows": len(samples), "modal_share": statistics.fmean(modal),
           "unanimous": sum(m == 1.0 for m in modal) / len(modal),
           "alpha": krippendorff_alpha(samples, metric, order), "alpha_metric": metric}
    if len(samples) < MIN_N:
        out["note"] = f"too few (n < {MIN_N})"
    return out


def _calibration_for(nodes: set[tuple[str, str, str, str]], records: Sequence[Mapping[str, Any]]) -> Any:
    """The pooled calibration of the run's nodes of one judge: each record once (a table-driven test's cases
    share one), used when a node's test hash is the one it was made for, else counted as stale."""
    used: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    stale: set[tuple[str, str, str]] = set()
    for suite, test_id, path, test_hash in sorted(nodes):
        for record in records:
            if str(record.get("suite")) != suite or str(record.get("path")) != path:
                continue
            members = {tuple(map(str, m)) for m in record.get("members") or []} or {
                (str(record.get("test_id")), str(record.get("test_hash")))}
            ids = {m[0] for m in members}
            if test_id not in ids:
                continue
            if (test_id, test_hash) in members:
                used[_record_key(record)] = record
            else:
                stale.add(_record_key(record))
    stale -= set(used)
    if not used:
        return {"nodes": 0, "stale": len(stale)} if stale else None
    items = [item for record in used.values() for item in record.get("items") or []]
    template = next(iter(used.values()))
    summary = calibration_summary({**template, "items": items, "min_agreement": None})
    summary.pop("verdict", None)
    if summary["n"] >= MIN_N:
        summary.pop("note", None)
    return {"nodes": len(used), "stale": len(stale), "made_at": template.get("made_at"), **summary}


# -- rendering -----------------------------------------------------------------------------------------------

def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def render_judges(report: Mapping[str, Any], fmt: str) -> str:
    """The judges section as text (table and markdown alike: short labelled lines)."""
    if not report.get("judges"):
        return ""
    head = "## Judges" if fmt == "markdown" else "JUDGES"
    lines = ["", head, f"(figures over fewer than {report['min_n']} pairs are marked 'too few'; "
                       "definitions in docs/analysis.md)"]
    for judge in report["judges"]:
        lines.append(f"- {judge['judge_model']} ({judge['scale']}): {judge['rows']} verdicts, "
                     f"{judge['errors']} errors, pass rate {_fmt(judge['pass_rate'])}, "
                     f"{judge['judge_calls']} paid calls, cost "
                     + ("-" if judge["judge_cost"] is None else f"{judge['judge_cost']:.6g}"))
        calibration = judge["calibration"]
        if calibration is None:
            lines.append("    calibration: none (run `engine validate --judges` on a suite with calibration:)")
        elif not calibration.get("nodes"):
            lines.append(f"    calibration: {calibration['stale']} record(s) stale (the test changed since); "
                         "run `engine validate --judges` again")
        else:
            lines.append("    calibration: " + _figures(calibration) + (f"; {calibration['stale']} stale"
                                                                          if calibration["stale"] else ""))
        consistency = judge["self_consistency"]
        if consistency is not None:
            lines.append(f"    self-consistency: {consistency['rows']} rows sampled, modal share "
                         f"{_fmt(consistency['modal_share'])}, unanimous {_fmt(consistency['unanimous'])}, "
                         f"α ({consistency['alpha_metric']}) {_fmt(consistency['alpha'])}"
                         + (f" - {consistency['note']}" if consistency.get("note") else ""))
        for other in judge["vs_deterministic"]:
            lines.append(f"    vs {other['evaluator']}: " + _figures(other))
    for pair in report["pairs"]:
        lines.append(f"- {pair['judge_a']} vs {pair['judge_b']} ({pair['scale']}, on {pair['compared']}): "
                     + _figures(pair))
    return "\n".join(lines) + "\n"


def _figures(stats: Mapping[str, Any]) -> str:
    parts = [f"n={stats['n']}", f"agreement {_fmt(stats.get('agreement'))}"]
    shown = [f"{label} {_fmt(stats[key])}" for key, label in (
        ("within_one", "within one"), ("kappa", "κ"), ("weighted_kappa", "weighted κ"),
        ("alpha_ordinal", "α ordinal")) if stats.get(key) is not None]
    parts.extend(shown)
    if not any(key in stats and stats[key] is not None for key in ("kappa", "weighted_kappa", "alpha_ordinal")):
        parts.append("κ undefined (no variation beyond chance to measure)")
    if stats.get("errors"):
        parts.append(f"{stats['errors']} judge errors")
    if stats.get("note"):
        parts.append(str(stats["note"]))
    return ", ".join(parts)
