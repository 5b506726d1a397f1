"""Human review labels: the `_labels.parquet` file `engine view` writes, and how well the evaluators agree with it.

A reviewer marks an attempt's verdict `right` or `wrong`. The label fixes the attempt's true outcome: the
verdict's pass when `right`, its opposite when `wrong`. The verdict is compared with that truth; each check
(per evaluator kind, and per judge model and scale) with the outcome it should have had for the verdict to be
true (`expected_grade`: the test's tree replayed with the check passing and failing; a check whose outcome
changes nothing is skipped, the label says nothing about it). Agreement and Cohen's κ over the pairs, under
`judges.MIN_N` pairs marked "too few" (the rule of the judges section). Definitions: docs/analysis.md ("Human
labels"). Labels never change results: the file sits beside the parts and `load` skips it (its name starts
with `_`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ResultsError
from engine.evaluators.compose import combine, finish
from engine.evaluators.trajectory import final_answer_verdict
from engine.judge.trust import MIN_N, _figures, _judge_name, _pair_stats
from engine.model.test import Test
from engine.model.verdict import Verdict

if TYPE_CHECKING:
    import pyarrow as pa

    from engine.model.tree import Node

LABELS_FILE = "_labels.parquet"
LABELS = ("right", "wrong")
# The attempt a label is about: the results row key without the run.
KEY = ("model", "suite", "test_id", "case_index", "attempt", "test_hash")
MAX_NOTE = 4000
MAX_REVIEWER = 200
_COMPOSITIONS = frozenset({"all", "any", "not"})
# Why a labelled check gives no pair (the wording of the reports).
NOT_DECIDED = "did not decide the verdict (the other checks did)"
NO_REPLAY = "the row's checks do not replay to its verdict"
NO_TREE = "the test as it ran is not in the run's suite files (moved, or changed since)"
_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def label_schema() -> pa.Schema:
    """The columns of `_labels.parquet`, one row per label given (a later label of the same attempt by the
    same reviewer replaces the earlier one when read)."""
    import pyarrow as pa

    return pa.schema([
        ("model", pa.string()), ("suite", pa.string()), ("test_id", pa.string()), ("case_index", pa.int32()),
        ("attempt", pa.int32()), ("test_hash", pa.string()), ("label", pa.string()), ("note", pa.string()),
        ("reviewer", pa.string()), ("at", pa.timestamp("us", tz="UTC")),
    ])


def check_label(record: Mapping[str, Any]) -> dict[str, Any]:
    """One label as the file stores it, its fields type-checked and capped.

    Raises:
        ValueError: A field missing or of the wrong type, or a label other than right / wrong.
    """
    out: dict[str, Any] = {}
    for name in ("model", "suite", "test_id", "test_hash"):
        value = record.get(name)
        if not isinstance(value, str) or not value or len(value) > 4096:
            raise ValueError(f"label: `{name}` must be a non-empty string")
        out[name] = value
    for name in ("case_index", "attempt"):
        value = record.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31):
            raise ValueError(f"label: `{name}` must be a whole number ≥ 0 or null")
        out[name] = value
    if out["attempt"] is None:
        raise ValueError("label: `attempt` is required")
    if record.get("label") not in LABELS:
        raise ValueError("label: `label` must be 'right' or 'wrong'")
    out["label"] = record["label"]
    note = record.get("note")
    if note is not None and not isinstance(note, str):
        raise ValueError("label: `note` must be text")
    out["note"] = (note or "")[:MAX_NOTE] or None
    reviewer = record.get("reviewer")
    if not isinstance(reviewer, str) or not reviewer.strip():
        raise ValueError("label: `reviewer` must be a name")
    out["reviewer"] = reviewer.strip()[:MAX_REVIEWER]
    at = record.get("at")
    out["at"] = at if isinstance(at, dt.datetime) else dt.datetime.now(dt.UTC)
    return out


def read_labels(run_dir: Path) -> pa.Table:
    """Every label given in a run folder (an empty table when none was).

    Raises:
        ResultsError: The file exists but cannot be read as a labels file.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(run_dir) / LABELS_FILE
    if not path.is_file():
        return label_schema().empty_table()
    try:
        table = pq.read_table(path)
        return table.select(list(label_schema().names)).cast(label_schema())
    except (OSError, KeyError, pa.ArrowException) as exc:
        raise ResultsError(f"{path}: not a labels file ({exc}); move it aside to start the labels again") from exc


def _lock_for(path: Path) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(path.resolve(), threading.Lock())


def append_labels(run_dir: Path, records: Iterable[Mapping[str, Any]]) -> int:
    """Add labels to `<run_dir>/_labels.parquet`: the old rows and the new written to a new file that then
    atomically replaces the old one, so a reader sees the old file or the new one, never half of either.
    Writers in one process are serialised by a lock per file, writers in several by `fcntl.flock`.

    Returns:
        The number of labels in the file afterwards.

    Raises:
        ValueError: A record fails `check_label`.
        ResultsError: The file cannot be read or written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    checked = [check_label(r) for r in records]
    run_dir = Path(run_dir)
    path = run_dir / LABELS_FILE
    with _lock_for(path), open(run_dir / "_labels.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        old = read_labels(run_dir)
        new = pa.Table.from_pylist(checked, schema=label_schema())
        table = pa.concat_tables([old, new])
        temporary = run_dir / f".labels-{os.getpid()}-{threading.get_ident()}.parquet.tmp"
        try:
            pq.write_table(table, temporary)
            with open(temporary, "rb") as written:
                os.fsync(written.fileno())
            os.replace(temporary, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise ResultsError(f"{path}: cannot write the labels ({exc})") from exc
        return table.num_rows


def find_attempt(run_dir: Path, *, model: str, test: str, case_index: int | None = None,
                 attempt: int | None = None) -> dict[str, Any]:
    """The one results row of a run a label given by name is about (`engine label`): its KEY fields, `passed` and
    `error_kind`. `test` is a test id, or `suite/test_id` where ids repeat across suites; `case_index` is needed
    when the id holds several cases, `attempt` when the model ran it more than once. A test run again after an
    edit (two hashes) is the newer row.

    Raises:
        ResultsError: No such row, or the name fits several; the message lists what there is and the option to add.
    """
    import pyarrow.dataset as ds

    from engine.analysis.load import read_table

    run_dir = Path(run_dir)
    suite, _, test_id = test.rpartition("/")
    rows = read_table(run_dir, columns=[*KEY, "passed", "error_kind", "started_at"],
                      where=(ds.field("model") == model) & (ds.field("test_id") == test_id)).to_pylist()
    if suite:
        rows = [r for r in rows if r["suite"] == suite]
    if not rows:
        raise ResultsError(_no_test(run_dir, model, suite, test_id))
    suites = sorted({str(r["suite"]) for r in rows})
    if len(suites) > 1:
        raise ResultsError(f"test {test_id!r} is in suites {', '.join(suites)}: write --test SUITE/{test_id}, e.g. "
                           f"--test {suites[0]}/{test_id}")
    where = f"{model}'s rows of {suites[0]}/{test_id} in {run_dir}"
    cases = sorted({r["case_index"] for r in rows if r["case_index"] is not None})
    if case_index is None and len(cases) > 1:
        raise ResultsError(f"{suites[0]}/{test_id} has cases {_span(cases)}: give --case N")
    if case_index is None and cases:
        case_index = cases[0]   # an id made per case (`id: "country-{{ name }}"`) names its one case
    if case_index is not None and not cases:
        raise ResultsError(f"{suites[0]}/{test_id} has no cases: leave out --case")
    rows = [r for r in rows if r["case_index"] == case_index]
    if not rows:
        raise ResultsError(f"no case {case_index} in {where} (cases {_span(cases)})")
    attempts = sorted({int(r["attempt"]) for r in rows})
    if attempt is None and len(attempts) > 1:
        raise ResultsError(f"{model} ran {suites[0]}/{test_id}{_case(case_index)} {len(attempts)} times (attempts "
                           f"{_span(attempts)}): give --attempt K")
    chosen = [r for r in rows if attempt is None or r["attempt"] == attempt]
    if not chosen:
        raise ResultsError(f"no attempt {attempt} in {where}{_case(case_index)} (attempts {_span(attempts)}, "
                           f"counted from 0)")
    row = max(chosen, key=lambda r: (r["started_at"] is not None, r["started_at"] or 0))
    return {**{k: row[k] for k in KEY}, "passed": row["passed"], "error_kind": row["error_kind"]}


def _case(case_index: int | None) -> str:
    return "" if case_index is None else f"#{case_index}"


def _span(numbers: Sequence[int]) -> str:
    """"0-4" for a run of whole numbers, else them listed (the first ten)."""
    if len(numbers) > 2 and list(numbers) == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}-{numbers[-1]}"
    shown = ", ".join(map(str, numbers[:10]))
    return shown + (f", ... ({len(numbers)} in all)" if len(numbers) > 10 else "")


def _no_test(run_dir: Path, model: str, suite: str, test_id: str) -> str:
    """Why no row matched a model and test: the model or the test is not in the run (with the nearest name)."""
    import pyarrow.compute as pc

    from engine.analysis.load import read_table
    from engine.base.words import did_you_mean

    names = read_table(run_dir, columns=["model", "suite", "test_id"])
    models = sorted(str(m) for m in pc.unique(names["model"]).to_pylist() if m is not None)
    if model not in models:
        guess = did_you_mean(model, models)
        return (f"no model {model!r} in {run_dir}" + (f" - did you mean {guess!r}?" if guess else "")
                + f" (its models: {', '.join(models[:20])})")
    tests = sorted({f"{s}/{t}" for s, t in zip(names["suite"].to_pylist(), names["test_id"].to_pylist(),
                                                strict=True)})
    ids = sorted({t.split("/", 1)[1] for t in tests})
    wanted = f"{suite}/{test_id}" if suite else test_id
    guess = did_you_mean(wanted, tests if suite else ids)
    return (f"no test {wanted!r} for {model} in {run_dir}" + (f" - did you mean {guess!r}?" if guess else "")
            + f" ({len(tests)} tests; `engine analyze {run_dir} --format csv` lists them)")


def latest_labels(table: pa.Table) -> list[dict[str, Any]]:
    """Each reviewer's last label of each attempt, in the order first given."""
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in table.to_pylist():
        key = (*(row[k] for k in KEY), row["reviewer"])
        latest.pop(key, None)
        latest[key] = row
    return list(latest.values())


def labelled_runs(paths: Iterable[Path]) -> list[Path]:
    """The run folders holding a labels file: each path itself, or the folders under it (symlinks such as
    `latest` not followed, so no run is found twice), each once.

    Raises:
        ResultsError: A path is not a folder, or holds no labels file.
    """
    found: dict[Path, Path] = {}
    for given in paths:
        path = Path(given)
        if not path.is_dir():
            raise ResultsError(f"{path}: not a folder; pass a run folder (results/<run>) or a folder of runs")
        here = []
        for root, dirs, files in os.walk(path):
            dirs.sort()
            if LABELS_FILE in files:
                here.append(Path(root))
        if not here:
            raise ResultsError(f"{path}: no {LABELS_FILE} in it or under it; label attempts with `engine view "
                               f"{path}` first")
        for folder in here:
            found.setdefault(folder.resolve(), folder)
    return list(found.values())


def labelled_rows(files: Sequence[Path], labels: Sequence[Mapping[str, Any]],
                  extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The results rows the labels are about (a scan filtered to their test ids; every other row stays on disk),
    with the KEY columns, passed, score, evaluators and the `extra` columns."""
    import pyarrow.dataset as ds

    from engine.analysis.load import read_table

    ids = sorted({str(label["test_id"]) for label in labels})
    if not ids:
        return []
    columns = [*KEY, "passed", "score", "evaluators", *extra]
    table = read_table(list(files), columns=columns, where=ds.field("test_id").isin(ids))
    return table.select(columns).to_pylist()


class _NoReplay(Exception):
    """The row's recorded checks do not fit the test's tree."""


def expected_grade(test: Test, check_path: str, recorded: Sequence[Mapping[str, Any]], passed: bool,
                   truth: bool) -> tuple[str | None, str]:
    """The outcome ("pass"/"fail") the check at `check_path` (a judge, or any other leaf) should have had for the
    verdict to be `truth`: the test's tree replayed from the row's recorded checks with the run's own composition
    rule (engine.evaluators.compose), once with the check passing and once failing.

    Args:
        test: The test (its compiled tree and threshold).
        check_path: The check's path in the results' `evaluators` list.
        recorded: The row's `evaluators` entries (path, score, passed, error).
        passed: The row's verdict.
        truth: The verdict the label says is true.

    Returns:
        (grade, "") or (None, why): NOT_DECIDED when the check's outcome does not change the verdict, NO_REPLAY
        when the path is no node of the tree or the recorded checks do not replay to the recorded verdict.
    """
    from engine.judge.calibrate import verdict_paths  # the results' paths (it imports the client: not at load)

    assert test.evaluator is not None
    if check_path not in {path for path, _ in verdict_paths(test.evaluator)}:
        return None, NO_REPLAY
    entries = {str(e.get("path")): e for e in recorded if e is not None}
    try:
        as_run = _replay(test.evaluator, test.evaluator.kind, entries, check_path, None, test.threshold)
        with_pass = _replay(test.evaluator, test.evaluator.kind, entries, check_path, True, test.threshold)
        with_fail = _replay(test.evaluator, test.evaluator.kind, entries, check_path, False, test.threshold)
    except _NoReplay:
        return None, NO_REPLAY
    if as_run.passed != passed:
        return None, NO_REPLAY
    if with_pass.passed == with_fail.passed:
        return None, NOT_DECIDED
    return ("pass" if with_pass.passed == truth else "fail"), ""


def _replay(node: Node, here: str, entries: Mapping[str, Mapping[str, Any]], check_path: str,
            check_passed: bool | None, root_threshold: float | None) -> Verdict:
    """The verdict of `node` from the recorded leaves, with the check's pass/fail set when `check_passed` is
    not None (it scores 1 or 0, as a pass_fail judge does, then its own options apply as in a run)."""
    if here == check_path and check_passed is not None:
        raw = Verdict(score=1.0 if check_passed else 0.0, passed=check_passed, reason="", kind=node.kind)
        return finish(node, raw, root_threshold)
    if node.held is not None and node.kind == "final_answer" and check_path.startswith(f"{here}/"):
        # the check is in the tree final_answer holds: its verdict is final_answer's one child, as in a run
        held = _replay(node.held, f"{here}/0.{node.held.kind}", entries, check_path, check_passed, None)
        return finish(node, final_answer_verdict(held), root_threshold)
    if not node.children:
        entry = entries.get(here)
        if entry is None or (entry.get("score") is None and not entry.get("error")):
            raise _NoReplay(here)
        error = bool(entry.get("error"))
        return Verdict(score=0.0 if error else float(entry["score"]), passed=bool(entry.get("passed")) and not error,
                       reason="", kind=node.kind, name=node.name, weight=node.weight, error=error)
    children = tuple(_replay(child, f"{here}/{index}.{child.kind}", entries, check_path, check_passed, None)
                     for index, child in enumerate(node.children))
    return finish(node, combine(node, children), root_threshold)


def label_agreement(rows: Sequence[Mapping[str, Any]], labels: Sequence[Mapping[str, Any]],
                    tests: Mapping[tuple[str, str, str], Test]) -> dict[str, Any]:
    """Agreement of the verdicts, each evaluator kind and each judge with the human labels (module docstring).

    Args:
        rows: Results rows with the KEY columns, passed and evaluators.
        labels: `latest_labels` output.
        tests: The labelled tests as they ran, by (suite, test_id, test_hash): their trees replay the checks.

    Returns:
        min_n, labels, matched, unmatched (labels of no scored row: the test changed, or the row errored),
        verdict, evaluators [{evaluator, n, agreement, kappa, note?}], judges [{judge_model, scale, ...}],
        skipped {reason: labelled checks given no pair}, disagreements [{model, suite, test_id, case_index,
        attempt, passed, label, note, reviewer, nodes}].
    """
    by_key = {tuple(r[k] for k in KEY): r for r in rows if r.get("passed") is not None}
    verdict: list[tuple[bool, bool]] = []
    kinds: defaultdict[str, list[tuple[bool, bool]]] = defaultdict(list)
    judges: defaultdict[tuple[str, str], list[tuple[bool, bool]]] = defaultdict(list)
    skipped: Counter[str] = Counter()
    disagreements = []
    unmatched = 0
    for label in labels:
        row = by_key.get(tuple(label[k] for k in KEY))
        if row is None:
            unmatched += 1
            continue
        passed = bool(row["passed"])
        truth = passed if label["label"] == "right" else not passed
        verdict.append((passed, truth))
        test = tests.get((str(row["suite"]), str(row["test_id"]), str(row["test_hash"])))
        recorded = row.get("evaluators") or []
        wrong_nodes = []
        for node in recorded:
            if node.get("kind") in _COMPOSITIONS or node.get("error") or node.get("passed") is None:
                continue
            if test is None or test.evaluator is None:
                skipped[NO_TREE] += 1
                continue
            expect, why = expected_grade(test, str(node.get("path")), recorded, passed, truth)
            if expect is None:
                skipped[why] += 1
                continue
            pair = (bool(node["passed"]), expect == "pass")
            kinds[str(node.get("kind"))].append(pair)
            if node.get("kind") == "judge":
                judges[_judge_name(node)].append(pair)
            if pair[0] != pair[1]:
                wrong_nodes.append(str(node.get("path")))
        if label["label"] == "wrong" or wrong_nodes:
            disagreements.append({**{k: label[k] for k in KEY}, "passed": passed, "label": label["label"],
                                  "note": label.get("note"), "reviewer": label.get("reviewer"),
                                  "nodes": wrong_nodes})

    def stats(pairs: list[tuple[bool, bool]]) -> dict[str, Any]:
        return _pair_stats([a for a, _ in pairs], [b for _, b in pairs], None)

    return {
        "min_n": MIN_N, "labels": len(labels), "matched": len(verdict), "unmatched": unmatched,
        "verdict": stats(verdict) if verdict else None,
        "evaluators": [{"evaluator": kind, **stats(pairs)} for kind, pairs in sorted(kinds.items())],
        "judges": [{"judge_model": name[0], "scale": name[1], **stats(pairs)}
                   for name, pairs in sorted(judges.items())],
        "skipped": dict(sorted(skipped.items())),
        "disagreements": disagreements,
    }


def run_tests(folders: Iterable[Path], labels: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], Test]:
    """The labelled tests as they ran, by (suite, test_id, test_hash): loaded from the suite files the run
    folders' manifests name (a file moved or a test changed since gives none: its hash differs)."""
    from engine.results.folder import read_manifest
    from engine.suite import load_suites

    wanted = {(str(x["suite"]), str(x["test_id"]), str(x["test_hash"])) for x in labels}
    names = {suite for suite, _, _ in wanted}
    files = set()
    for folder in folders:
        suites = (read_manifest(folder) or {}).get("suites")
        for name, entry in (suites.items() if isinstance(suites, dict) else ()):
            where = entry.get("file") if isinstance(entry, dict) else None
            if name in names and isinstance(where, str) and Path(where).is_file():
                files.add(where)
    if not files:
        return {}
    loaded, _ = load_suites(sorted(files))
    return {(t.suite, t.id, t.hash): t for suite in loaded for t in suite.tests if (t.suite, t.id, t.hash) in wanted}


def label_report(files: Sequence[Path]) -> dict[str, Any] | None:
    """`label_agreement` over the labels of the run folders holding `files` (the folder of a part, or the one
    above it for a shard), the tests from their manifests' suite files, or None when no run has labels."""
    folders = sorted({f.parent for f in files} | {f.parent.parent for f in files})
    labels = [label for folder in folders for label in latest_labels(read_labels(folder))]
    if not labels:
        return None
    return label_agreement(labelled_rows(files, labels), labels, run_tests(folders, labels))


def render_labels(report: Mapping[str, Any] | None, fmt: str, *, limit: int = 20) -> str:
    """The human-labels section as text (table and markdown alike: short labelled lines)."""
    if not report:
        return ""
    head = "## Human labels" if fmt == "markdown" else "HUMAN LABELS"
    lines = ["", head, f"({report['labels']} labels, {report['matched']} on scored rows, {report['unmatched']} on "
                       f"rows no longer in the results; figures over fewer than {report['min_n']} pairs are marked "
                       "'too few'; definitions in docs/analysis.md)"]
    if report["verdict"] is not None:
        lines.append("- verdict: " + _figures(report["verdict"]))
    for entry in report["evaluators"]:
        lines.append(f"- {entry['evaluator']}: " + _figures(entry))
    for entry in report["judges"]:
        lines.append(f"- judge {entry['judge_model']} ({entry['scale']}): " + _figures(entry))
    for reason, count in report["skipped"].items():
        lines.append(f"- labelled checks skipped: {count} {reason}")
    shown = report["disagreements"][:limit]
    if shown:
        lines.append(f"Disagreements ({len(report['disagreements'])}):")
    for d in shown:
        case = "" if d["case_index"] is None else f"#{d['case_index']}"
        verdict = "pass" if d["passed"] else "fail"
        lines.append(f"  {d['model']} {d['suite']}/{d['test_id']}{case} attempt {d['attempt']}: verdict {verdict}, "
                     f"{d['reviewer']} says {d['label']}"
                     + (f"; evaluators against the label: {', '.join(d['nodes'])}" if d["nodes"] else "")
                     + (f"; note: {d['note']}" if d.get("note") else ""))
    if len(report["disagreements"]) > limit:
        lines.append(f"  ... and {len(report['disagreements']) - limit} more (--format json lists all)")
    return "\n".join(lines) + "\n"
