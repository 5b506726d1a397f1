"""Reviewers' labels as judge calibration examples: `engine validate --judges --labels RUN`.

A label says whether an attempt's overall verdict was right. It is an example for one judge node of the
attempt only where it fixes the grade that judge should have given:

- the label is about the test as the suites have it now (same test_hash) and the run holds its scored row;
- the reviewers of the attempt agree (each reviewer's last label counts);
- the judge grades `pass_fail` (right/wrong fixes pass or fail, never a grade of 1-5, 0-10 or labels);
- the judge decided the verdict (`labels.expected_grade`, the rule `engine analyze` uses for every check too):
  the test's tree, replayed over the row's recorded checks with the run's own composition rule, gives one
  verdict with the judge's pass and the other with its fail. The expected grade is then the one whose verdict
  is the true one. A judge whose grade changes nothing is skipped: the label says nothing about it.

Every label not used is counted with its reason. Definitions: docs/evaluators.md ("Labelled attempts").
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.analysis.labels import (
    KEY,
    NO_REPLAY,
    NOT_DECIDED,
    expected_grade,
    labelled_rows,
    labelled_runs,
    latest_labels,
    read_labels,
)
from engine.evaluators.judge import JudgeScorer, JudgeSpec
from engine.evaluators.judge_examples import Example
from engine.model.test import Test

__all__ = ["NOT_DECIDED", "NO_REPLAY", "LabelExamples", "NodeKey", "expected_grade", "label_examples", "node_key"]

#: A judge node as written: (suite, file, line, path), the key calibration_targets groups cases by.
NodeKey = tuple[str, str, int, str]

# Why a labelled attempt, or one of its judge nodes, gave no example (the counts' wording in the report).
STALE = "the test changed since it was labelled (test_hash differs)"
NOT_IN_SUITES = "the test is not in the suites given"
NO_JUDGE = "the test has no judge"
NO_ROW = "no scored row in the run (an error row, or not in the results)"
DISAGREE = "the reviewers disagree"
SCALE = "the judge's scale is not pass_fail (right/wrong fixes no grade)"


@dataclass
class LabelExamples:
    """The examples labelled attempts give, and the count of what was left out.

    Args:
        examples: Per judge node, (the case's test, its judge spec, the example) in label order.
        runs: The labelled run folders read.
        attempts: Labelled attempts read (an attempt several reviewers labelled counts once).
        skipped: Reason -> labelled attempts (or judge nodes of one) that gave no example.
    """

    examples: dict[NodeKey, list[tuple[Test, JudgeSpec, Example]]] = field(default_factory=dict)
    runs: list[Path] = field(default_factory=list)
    attempts: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def used(self) -> int:
        """The examples made."""
        return sum(len(v) for v in self.examples.values())

    def report(self) -> list[str]:
        """What was read, used and skipped, one line each."""
        lines = [f"labels: {self.attempts} labelled attempt(s) in {len(self.runs)} run(s): {self.used} used as "
                 f"judge calibration examples"]
        lines += [f"labels: skipped {count}: {reason}" for reason, count in sorted(self.skipped.items())]
        return lines


def node_key(test: Test, path: str) -> NodeKey:
    """The judge node `path` of `test` as written (its cases share it)."""
    return test.suite, test.file, test.line, path


def label_examples(paths: Sequence[Path], tests: Sequence[Test]) -> LabelExamples:
    """The calibration examples the labels in `paths` (run folders, or folders of runs) give for `tests`.

    Raises:
        ResultsError: A path holds no labels file, or a run's files cannot be read.
    """
    from engine.analysis.load import find_parquet_files

    by_id = {(t.suite, t.id): t for t in tests}
    out = LabelExamples(runs=labelled_runs(paths))
    for folder in out.runs:
        attempts: defaultdict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for label in latest_labels(read_labels(folder)):
            attempts[tuple(label[k] for k in KEY)].append(label)
        out.attempts += len(attempts)
        labels = [given[0] for given in attempts.values()]
        rows = {tuple(r[k] for k in KEY): r for r in labelled_rows(find_parquet_files(folder), labels, ("answer",))}
        for key, given in attempts.items():
            label = given[0]
            test = by_id.get((label["suite"], label["test_id"]))
            judges = _judges(test) if test is not None else []
            row = rows.get(key)
            if len({g["label"] for g in given}) > 1:
                out.skipped[DISAGREE] += 1
            elif test is None:
                out.skipped[NOT_IN_SUITES] += 1
            elif test.hash != label["test_hash"]:
                out.skipped[STALE] += 1
            elif not judges:
                out.skipped[NO_JUDGE] += 1
            elif row is None or row.get("passed") is None:
                out.skipped[NO_ROW] += 1
            else:
                _add(out, folder, label, test, row, judges)
    return out


def _judges(test: Test) -> list[tuple[str, JudgeSpec]]:
    """(path, spec) of each judge node of the test's tree."""
    from engine.judge.calibrate import verdict_paths

    if test.evaluator is None:
        return []
    found = []
    for path, node in verdict_paths(test.evaluator):
        if isinstance(node.scorer, JudgeScorer):
            found.append((path, node.scorer.spec))
    return found


def _add(out: LabelExamples, folder: Path, label: Mapping[str, Any], test: Test, row: Mapping[str, Any],
         judges: list[tuple[str, JudgeSpec]]) -> None:
    """The examples one labelled attempt gives its judge nodes (or the reasons it gives none)."""
    passed = bool(row["passed"])
    truth = passed if label["label"] == "right" else not passed
    case = "" if label["case_index"] is None else f"#{label['case_index']}"
    where = f"label {folder.name}: {label['model']} {label['test_id']}{case} attempt {label['attempt']}"
    for path, spec in judges:
        if spec.scale.name != "pass_fail":
            out.skipped[SCALE] += 1
            continue
        expect, why = expected_grade(test, path, row.get("evaluators") or [], passed, truth)
        if expect is None:
            out.skipped[why] += 1
            continue
        example = Example(row.get("answer") or "", expect, where=where, source="labels")
        out.examples.setdefault(node_key(test, path), []).append((test, spec, example))
