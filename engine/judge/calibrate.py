"""Grade every judge's calibration examples (`engine validate --judges`) through the run's judge caller.

    tests ─► calibration_targets (one per suite/test/judge node) ─► grade_calibrations
                                                                       └─► JudgeSpec.grade ─► ModelJudgeCaller
                                                                                               (cache, caps, retries)

Each example is graded exactly as a run grades an answer (the same prompt, samples, re-ask and judge cache),
so a judgement made here is never paid again by a run, and the reverse. The statistics over the grades live
in engine.judge.trust; this module only collects (expected, given) pairs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.client.client import ModelClient
from engine.client.session import Sessions
from engine.evaluators.judge import JudgeScorer, JudgeSpec, final_grade, question_of
from engine.evaluators.judge_examples import Example, read_calibration
from engine.judge.cache import JudgeCache
from engine.judge.caller import JudgeModels, ModelJudgeCaller
from engine.model.test import Test
from engine.model.tree import Node

__all__ = ["CalibrationItem", "CalibrationRun", "Tally", "calibration_targets", "grade_calibrations", "verdict_paths"]


@dataclass
class Tally:
    """How far `grade_calibrations` is, for a progress line: examples to grade (known once each target's
    examples are read, at the start) and examples graded."""

    total: int = 0
    graded: int = 0


@dataclass(frozen=True)
class CalibrationItem:
    """One graded example: what the author (or a reviewer's label) expected and what the judge gave (None: the
    judge failed); `source` as the Example's ("calibration" or "labels")."""

    where: str
    expect: Any
    grade: Any
    error: str | None = None
    reason: str = ""
    source: str = "calibration"


@dataclass
class CalibrationRun:
    """The calibration of one judge node of one test.

    Args:
        suite, test_id, test_hash, path: The node (path as in the results' `evaluators` list).
        site: FILE:LINE of the test, for messages.
        judge_model: The judge models file entry used.
        scale: The scale's name; `order` its grades (worst to best for numeric scales).
        numeric: The scale is numeric.
        min_agreement: The author's threshold, or None.
        items: The graded examples.
        problems: Why examples could not be read (a load problem `engine validate` also reports).
        members: [test id, test hash] of every case of the test (a table-driven test's cases share the
            node and its examples: they are graded once, in the first case's context).
    """

    suite: str
    test_id: str
    test_hash: str
    path: str
    site: str
    judge_model: str
    scale: str
    order: list[Any]
    numeric: bool
    min_agreement: float | None
    items: list[CalibrationItem] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    members: list[list[str]] = field(default_factory=list)


#: (the test whose context grades, the node's path, its spec, every case's [test id, test hash])
Target = tuple[Test, str, JudgeSpec, list[list[str]]]
#: An example graded in its own case's context (that case's question, rubric and reference), as its run graded it.
InContext = tuple[Test, JudgeSpec, Example]


def verdict_paths(node: Node, here: str = "") -> Iterator[tuple[str, Node]]:
    """(path, node) with the path a verdict of this node gets in the results ("all/1.judge"); a held tree's
    verdict is its holder's one child ("final_answer/0.judge")."""
    path = here or node.kind
    yield path, node
    if node.held is not None:
        yield from verdict_paths(node.held, f"{path}/0.{node.held.kind}")
    for index, child in enumerate(node.children):
        yield from verdict_paths(child, f"{path}/{index}.{child.kind}")


def calibration_targets(tests: Iterable[Test], *, every_judge: bool = False) -> list[Target]:
    """Every judge node with `calibration:` (with `every_judge`, every judge node), once per node as written
    (suite, file, line, path): the cases of a table-driven test share its examples, graded once in the first
    case's context; the last item lists every case's [test id, test hash]."""
    found: dict[tuple[str, str, int, str], Target] = {}
    for test in tests:
        if test.evaluator is None:
            continue
        for path, node in verdict_paths(test.evaluator):
            if not isinstance(node.scorer, JudgeScorer):
                continue
            spec = node.scorer.spec
            if spec.calibration is None and not every_judge:
                continue
            key = (test.suite, test.file, test.line, path)
            if key not in found:
                found[key] = (test, path, spec, [])
            found[key][3].append([test.id, test.hash])
    return list(found.values())


async def grade_calibrations(targets: list[Target], judges: JudgeModels, cache: JudgeCache,
                             api_keys: Mapping[str, str | None], *, extra: Sequence[Sequence[InContext]] = (),
                             concurrency: int = 8, tally: Tally | None = None) -> tuple[list[CalibrationRun], int]:
    """Grade every example of every target (judge calls through caps, retries and the cache).

    Args:
        targets: From `calibration_targets`.
        judges: The resolved judge models.
        cache: The judge cache.
        api_keys: Model name -> API key (None: none sent).
        extra: Per target (same order), more examples each graded in its own case's context (labelled
            attempts of a run: the same judge request as the run's, so the judge cache answers it).
        concurrency: Calls in flight at most (connections open at once; each judge model's window applies too).
        tally: Counted up as examples are read and graded (None: not counted).

    Returns:
        (one run per target, judge calls paid).
    """
    async with Sessions(concurrency) as sessions:
        caller = ModelJudgeCaller(judges, cache, ModelClient(sessions, api_keys))
        more = list(extra) + [()] * (len(targets) - len(extra))
        runs = await asyncio.gather(*(_grade(test, path, spec, members, judges, caller, added, tally or Tally())
                                      for (test, path, spec, members), added in zip(targets, more, strict=True)))
        return list(runs), caller.calls


async def _grade(test: Test, path: str, spec: JudgeSpec, members: list[list[str]], judges: JudgeModels,
                 caller: ModelJudgeCaller, extra: Sequence[InContext], tally: Tally) -> CalibrationRun:
    config = judges.resolve(spec.model)
    run = CalibrationRun(suite=test.suite, test_id=test.id, test_hash=test.hash, path=path,
                         site=f"{test.file}:{test.line}", judge_model=config.name if config else str(spec.model),
                         scale=spec.scale.name, order=sorted(spec.scale.grades, key=spec.scale.grades.__getitem__),
                         numeric=spec.scale.numeric, min_agreement=spec.min_agreement, members=members)
    examples, problems = read_calibration(spec.calibration, spec.scale.grades, spec.scale.numeric,
                                          Path(test.suite_dir or ".")) if spec.calibration is not None else ([], [])
    run.problems = [message for _, message in problems]
    tally.total += len(examples) + len(extra)

    async def one(example: Example, case: Test, judge: JudgeSpec) -> CalibrationItem:
        verdict = await judge.grade(example.answer, example.prompt or question_of(case), example.reference, caller)
        tally.graded += 1
        grade = final_grade(verdict)
        return CalibrationItem(example.where, example.expect, grade, verdict.reason if grade is None else None,
                               verdict.reason, example.source)

    run.items = list(await asyncio.gather(*(one(e, test, spec) for e in examples),
                                          *(one(e, case, judge) for case, judge, e in extra)))
    return run

