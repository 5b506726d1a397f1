"""`engine validate --judges`: grade every calibration example, report agreement per judge node, write the
calibration file `engine analyze` reads, and say whether each judge meets its `min_agreement`. With
`--labels RUN`, reviewers' labels of a run's attempts are examples too (engine.analysis.label_examples).

The only part of `engine validate` that calls a model, hence opt-in. Judge calls go through the run's
judge caller and cache (engine.judge.calibrate), so a judgement paid here is not paid by a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.base.heartbeat import HEARTBEAT_S, Heartbeat
from engine.errors import UsageError
from engine.judge.trust import calibration_summary, write_calibration
from engine.model.model_config import ModelConfig
from engine.model.test import Test

__all__ = ["JudgeValidation", "validate_judges"]

PROGRESS_S = HEARTBEAT_S   # a progress line at least this often while the judges grade (small local models are slow)


@dataclasses.dataclass
class JudgeValidation:
    """What `validate --judges` found.

    Args:
        lines: The report, one line per judge node (and its problems).
        failed: A judge is under its min_agreement, has too few examples for one, or has unreadable examples.
        records: The calibration records written.
        calls: Judge calls paid (cache hits are free).
    """

    lines: list[str]
    failed: bool
    records: list[dict[str, Any]]
    calls: int


def validate_judges(tests: Sequence[Test], models_file: Path | None, calibration_out: Path,
                    judge_cache: Path | None = None, labels: Sequence[Path] = (),
                    progress: Callable[[str], None] | None = None) -> JudgeValidation:
    """Grade the calibration examples of the tests' judges and compare them with the labels.

    Args:
        tests: The loaded tests (only their judges with `calibration:`, or with labelled attempts, are graded).
        models_file: The models file the judges are found in; None for the default (embedded) models, as
            `engine run` without `--models` (engine.local.default_models and helper_models).
        calibration_out: Where the calibration records are written.
        judge_cache: The judge cache file (default: the user's).
        labels: Run folders (or folders of runs) whose labelled attempts are examples as well.
        progress: Receives a line when grading starts and every PROGRESS_S while it goes on (None: silent).

    Raises:
        UsageError: the models file has errors, lacks a judge's model, or a judge's API key is not set.
        ResultsError: a labels folder holds no labels file, or its results cannot be read.
    """
    from engine.analysis.label_examples import label_examples, node_key
    from engine.judge.cache import JudgeCache, default_path
    from engine.judge.calibrate import Tally, calibration_targets, grade_calibrations
    from engine.judge.caller import resolve_judges
    from engine.suite.models_file import load_models_file

    labelled = label_examples(labels, tests) if labels else None
    head = labelled.report() if labelled else []
    targets = calibration_targets(tests, every_judge=labelled is not None)
    if labelled is not None:
        targets = [t for t in targets if t[2].calibration is not None or node_key(t[0], t[1]) in labelled.examples]
    extra = [labelled.examples.get(node_key(t[0], t[1]), []) if labelled else [] for t in targets]
    if not targets:
        return JudgeValidation([*head, "judges: no judge has `calibration:` examples"
                                + (" or labelled attempts" if labelled else "") + "; nothing to grade"],
                               False, [], 0)
    if models_file is None:
        from engine.local import default_models, helper_models

        configs = {**default_models(), **helper_models()}
        defaults: dict[str, Any] = {}
        where = "the default models (no --models file)"
    else:
        configs, defaults, diagnostics = load_models_file(models_file)
        if any(d.severity == "error" for d in diagnostics):
            raise UsageError(f"{models_file} has errors:\n" + "\n".join(str(d) for d in diagnostics))
        where = str(models_file)
    judges = resolve_judges([t for t, *_ in targets], configs, defaults.get("judge"), where)
    assert judges is not None
    cache = JudgeCache(judge_cache or default_path())
    with contextlib.ExitStack() as stack:
        # only the judges the examples need: the suites' `similar` models (resolved beside them) grade nothing here
        graders = {spec.model if spec.model is not None else judges.default for _, _, spec, _ in targets}
        models = _start_builtins([m for name, m in judges.models.items() if name in graders], stack)
        judges = dataclasses.replace(judges, models={**judges.models, **{m.name: m for m in models}})
        keys = _api_keys(models)
        tally = Tally()
        say = progress or (lambda line: None)
        say(f"judges: grading the examples of {len(targets)} judge node(s) with {', '.join(sorted(map(str, graders)))}")
        try:
            with Heartbeat(lambda seconds: say(f"judges: {tally.graded} of {tally.total} examples graded "
                                               f"({seconds:.0f} s)"), PROGRESS_S):
                runs, calls = asyncio.run(grade_calibrations(targets, judges, cache, keys, extra=extra, tally=tally))
        finally:
            cache.close()
    lines: list[str] = list(head)
    failed = False
    records = []
    for run in runs:
        record = dataclasses.asdict(run)
        summary = calibration_summary(record)
        records.append({**record, "summary": summary})
        where = f"{run.site}: {run.suite}/{run.test_id} {run.path} (judge {run.judge_model}, {run.scale})"
        from_labels = sum(item.source == "labels" for item in run.items)
        figures = _figures(summary) + (f", {from_labels} from labels" if from_labels else "")
        lines.append(f"{where}: {figures} - {summary['verdict']}: {summary['note']}")
        for problem in run.problems:
            lines.append(f"{run.site}: error: calibration: {problem}")
        for item in run.items:
            if item.grade is None:
                lines.append(f"    {item.where}: the judge gave no grade ({item.error})")
        failed = failed or bool(run.problems) or summary["verdict"] == "fail" or (
            summary["verdict"] == "too few" and run.min_agreement is not None)
    write_calibration(calibration_out, records)
    lines.append(f"judges: {len(runs)} judge node(s), {sum(len(r.items) for r in runs)} examples, "
                 f"{calls} judge calls paid; calibration written to {calibration_out}")
    return JudgeValidation(lines, failed, records, calls)


def _figures(summary: dict[str, Any]) -> str:
    def fmt(value: Any) -> str:
        return "-" if value is None else f"{value:.3f}"

    parts = [f"n={summary['n']}", f"agreement {fmt(summary['agreement'])}"]
    if summary.get("within_one") is not None or summary.get("weighted_kappa") is not None:
        parts += [f"within one {fmt(summary['within_one'])}", f"weighted κ {fmt(summary['weighted_kappa'])}",
                  f"α ordinal {fmt(summary['alpha_ordinal'])}"]
    else:
        parts.append(f"κ {fmt(summary['kappa'])}")
    if summary["errors"]:
        parts.append(f"{summary['errors']} without a grade")
    return ", ".join(parts)


def _api_keys(models: list[ModelConfig]) -> dict[str, str | None]:
    """Each judge model's API key from its environment variable (the value never reaches a message)."""
    keys: dict[str, str | None] = {}
    for model in models:
        value = os.environ.get(model.api_key_env) if model.api_key_env else None
        if model.api_key_env and not value:
            raise UsageError(f"judge model {model.name} reads its API key from ${model.api_key_env}, which is not "
                             "set; export it, or remove api_key_env for a server without keys")
        keys[model.name] = value
    return keys


def _start_builtins(models: list[ModelConfig], stack: contextlib.ExitStack) -> list[ModelConfig]:
    """Start an embedded server for each builtin judge (as `engine run` does); the stack stops them."""
    from engine.local.registry import is_scripted

    needed = {(m.builtin, m.model) for m in models if m.builtin and not m.base_url and not is_scripted(m.builtin)}
    scripted = [m.name for m in models if m.builtin and not m.base_url and is_scripted(m.builtin)]
    if scripted:
        raise UsageError(f"judge model(s) {', '.join(scripted)} are scripted builtins that answer no judge prompt")
    if not needed:
        return models
    from engine.local import cache_identity
    from engine.local.server import serve_builtins

    logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="engine-judges-")))
    wanted = sorted(needed, key=str)   # started together: their model loads overlap
    started = stack.enter_context(serve_builtins([(str(b), alias, logs / f"{b}.{alias}.log") for b, alias in wanted]))
    urls: dict[tuple[str | None, str], str] = dict(zip(wanted, started, strict=True))
    return [dataclasses.replace(m, base_url=urls[(m.builtin, m.model)], cache_identity=cache_identity(m.builtin))
            if m.builtin is not None and (m.builtin, m.model) in urls else m for m in models]

