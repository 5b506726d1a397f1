"""Build tests, models and a runner by hand (no suite files) for runner tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.model.model_config import ModelConfig
from engine.model.test import Test
from engine.results.journal import Journal
from engine.results.writer import ResultsWriter
from engine.run.jobs import count_jobs, iter_jobs
from engine.run.run_config import PollPlan
from engine.run.runner import RunConfig, Runner, RunStats
from tests.factories import make_test as build_test


def make_test(i: int, *, expect: str = "ok", **fields: Any) -> Test:
    base: dict[str, Any] = dict(suite="s", id=f"t{i}", file="s.yaml", line=i,
                                messages=({"role": "user", "content": f"question {i}"},), prompt=f"question {i}",
                                eval={"contains": expect}, hash=f"h{i}", tags=("smoke",))
    base.update(fields)
    return build_test(**base)


def make_model(base_url: str, name: str = "m", **fields: Any) -> ModelConfig:
    return ModelConfig(name=name, model=fields.pop("model", f"{name}-id"), base_url=base_url,
                       timeout_s=fields.pop("timeout_s", 5.0), **fields)


async def run_jobs(run_dir: Path, models: list[ModelConfig], tests: list[Test], *, concurrency: int | None = 8,
                   repeat: int | None = None, max_cost: float | None = None, rows_per_part: int = 5000,
                   replace_errors: bool = False, only_errors: bool = False,
                   batch_poll: PollPlan | None = None) -> RunStats:
    run_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(run_dir / "_journal.sqlite", replace_errors=replace_errors)
    writer = ResultsWriter(run_dir, journal, rows_per_part=rows_per_part)
    writer.recover()
    only = journal.keys(errors_only=True) if only_errors else None
    skip = set() if only_errors else journal.keys()
    runner = Runner(RunConfig(run_id="run-1", concurrency=concurrency, max_cost=max_cost,
                              batch_poll=batch_poll or PollPlan()), journal, writer)
    jobs = {m.name: (m, iter_jobs(m, tests, repeat, skip=skip, only=only)) for m in models}
    total = count_jobs(models, tests, repeat, skip=skip, only=only)
    try:
        return await runner.run(jobs, total, {m.name: None for m in models})
    finally:
        journal.close()
