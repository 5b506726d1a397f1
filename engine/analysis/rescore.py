"""`engine rescore`: score stored answers again with the current evaluators, calling no model.

A suite author who fixes a golden or an evaluator sees the effect for free: the new run folder holds
the same answers with new verdicts, and `engine diff OLD NEW` shows the flips.

Rows without an answer (a failed call) are copied unchanged; rows whose test is no longer in the
suites are copied unchanged and counted, as are workspace test rows: their checks read the final
workspace, which is gone once the row is written ("not rescorable: the workspace is gone"), so they
never count as changed. Record evaluators (`latency_s`, `cost`, ...) read the stored row's record
(`engine.results.rows.record_of`), as the run did. Each answer is scored as a run scores it (`ScoringPool.score`):
a check that may run long does so in a scoring process under its time limit, so an answer that makes a check slow
gets the run's time-limit error verdict, and rescore goes on. The new folder is written with pyarrow and the results
schema (part file via temporary file + rename, `_manifest.json` last, as `engine.results.writer` does),
without a journal: nothing in it can be resumed. `results/latest` is left alone.

`judge` evaluators are graded from the judge cache (engine.judge.cache), never by a new call: the
judge models' entries key the cache, so suites with judges need `--models FILE`. A judgement not in the
cache (a changed rubric, another judge model) is an error verdict saying so; `engine run` pays for it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import EngineError
from engine.model.answer import Answer, ToolCall
from engine.model.test import Test

if TYPE_CHECKING:
    from engine.evaluators.scoring_pool import ScoringPool

# Error kinds that mean the model gave no answer to score (the call itself failed).
_SCORABLE_ERRORS = {None, "evaluator"}


@dataclass
class RescoreOutcome:
    """What `rescore_run` did.

    Args:
        folder: The new run folder.
        run_id: Its run id.
        rescored: Rows scored again.
        unchanged: Rows copied as they were (no answer, or their test is gone).
        flipped: Rescored rows whose pass/fail verdict changed.
        messages: Lines for the person (missing tests, suite warnings).
    """

    folder: Path
    run_id: str
    rescored: int = 0
    unchanged: int = 0
    flipped: int = 0
    messages: list[str] = field(default_factory=list)


def _answer_of(row: dict[str, Any]) -> Answer:
    calls = tuple(ToolCall.from_raw(str(c.get("name") or ""), c.get("arguments") or "", id=c.get("id"))
                  for c in row.get("tool_calls") or ())
    return Answer(text=row.get("answer") or "", tool_calls=calls, finish_reason=row.get("finish_reason"),
                  reasoning=row.get("reasoning"))


async def _rescore_row(row: dict[str, Any], test: Test, run_id: str, pool: ScoringPool,
                       caller: Any = None) -> dict[str, Any]:
    from engine.agent.stored import transcript_of_row
    from engine.evaluators.scoring import context
    from engine.results.rows import evaluator_nodes, judge_columns, record_of

    transcript = transcript_of_row(row)
    record = record_of(row)
    if transcript is None:
        verdict = await pool.score(test, _answer_of(row), context(test, caller=caller, record=record))
    else:   # an agent row: the final answer, with the stored conversation for trajectory evaluators
        verdict = await pool.score(test, transcript.answer(), context(test, transcript=transcript, caller=caller,
                                                                      record=record))
    nodes, isolation = evaluator_nodes(verdict)
    out = dict(row)
    out.update(run_id=run_id, test_hash=test.hash, threshold=test.threshold, evaluators=nodes, isolation=isolation,
               golden=test.golden_json, **judge_columns(verdict))
    if verdict.error:
        out.update(score=None, passed=None, error_kind="evaluator", error_message=verdict.reason)
    else:
        out.update(score=float(verdict.score), passed=bool(verdict.passed), error_kind=None, error_message=None)
    return out


async def _rescore_rows(work: list[tuple[dict[str, Any], Test]], run_id: str, caller: Any) -> list[dict[str, Any]]:
    """Each (row, its test) scored again, in order: a few at once, so checks that score in scoring processes
    overlap."""
    from engine.evaluators.scoring_pool import ScoringPool

    out: list[dict[str, Any]] = [{} for _ in work]
    queue = iter(enumerate(work))
    pool = ScoringPool()

    async def worker() -> None:
        for index, (row, test) in queue:
            out[index] = await _rescore_row(row, test, run_id, pool, caller)

    try:
        await asyncio.gather(*(worker() for _ in range(min(len(work), 2 * (os.cpu_count() or 1)) or 1)))
    finally:
        pool.close()
    return out


def _judge_caller(tests: list[Test], models_file: Path | None, judge_cache: Path | None) -> tuple[Any, Any]:
    """A cache-only judge caller when the tests have judges (and the open cache, to close), else (None, None).

    Raises:
        EngineError: judges without `--models`, or a models file with errors or without a judge's model.
    """
    from engine.judge.cache import JudgeCache, default_path
    from engine.judge.caller import ModelJudgeCaller, models_named, resolve_judges
    from engine.suite.models_file import load_models_file

    if not models_named(tests).any():
        return None, None
    if models_file is None:
        raise EngineError("the suites have `judge` or `similar` evaluators: give the run's models file with "
                          "--models FILE (the models' entries key the judge cache; rescore calls no model)")
    configs, defaults, diagnostics = load_models_file(models_file)
    if any(d.severity == "error" for d in diagnostics):
        raise EngineError(f"{models_file} has errors:\n" + "\n".join(str(d) for d in diagnostics))
    judges = resolve_judges(tests, configs, defaults.get("judge"), str(models_file),
                            embedding_default=defaults.get("embedding"))
    assert judges is not None
    cache = JudgeCache(judge_cache or default_path())
    return ModelJudgeCaller(judges, cache, None, miss_hint="rescore calls no model: `engine run` pays for new "
                            "judgements"), cache


def rescore_run(results: Path, suites: Sequence[Path], *, out_parent: Path | None = None,
                models_file: Path | None = None, judge_cache: Path | None = None) -> RescoreOutcome:
    """Re-score one run's stored answers into a new run folder.

    Args:
        results: The run folder (or Parquet files' folder) to read.
        suites: Suite files or folders holding the current tests and evaluators.
        out_parent: Where the new run folder goes; default the parent of `results`.
        models_file: The models file naming the judge models (needed when the suites have `judge`).
        judge_cache: The judge cache file; default `engine.judge.cache.default_path()`.

    Raises:
        EngineError: No results, or suites with errors (their diagnostics in the message).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.analysis.load import read_table
    from engine.results.remote import is_url
    from engine.results.schema import SCHEMA
    from engine.results.writer import write_atomic
    from engine.suite import load_suites

    if is_url(results) and out_parent is None:   # read from a URL: the new run needs a local home
        raise EngineError(f"{results}: a results URL; give --out FOLDER for the rescored run")
    table = read_table([results])
    loaded, diagnostics = load_suites([str(p) for p in suites])
    errors = [d for d in diagnostics if d.severity == "error"]
    if errors:
        raise EngineError("the suites have errors; fix them before rescoring:\n" + "\n".join(str(d) for d in errors))
    tests = {(t.suite, t.id, -1 if t.case_index is None else int(t.case_index), t.variant or ""): t
             for s in loaded for t in s.tests}
    caller, cache = _judge_caller(list(tests.values()), models_file, judge_cache)

    run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-rescore-" + secrets.token_hex(3)
    parent = out_parent if out_parent is not None else results.resolve().parent
    folder = parent / run_id
    outcome = RescoreOutcome(folder=folder, run_id=run_id,
                             messages=[str(d) for d in diagnostics if d.severity != "error"])
    missing: set[tuple[str, str, int, str]] = set()
    gone = 0
    rows: list[dict[str, Any]] = []
    work: list[tuple[int, dict[str, Any], Test]] = []   # (place in rows, row, test) to score again
    for row in table.select([c for c in SCHEMA.names]).to_pylist():
        key = (str(row["suite"]), str(row["test_id"]), -1 if row["case_index"] is None else int(row["case_index"]),
               row.get("variant") or "")
        test = tests.get(key)
        if test is None or row.get("error_kind") not in _SCORABLE_ERRORS:
            if test is None:
                missing.add(key)
            rows.append(dict(row, run_id=run_id))
            outcome.unchanged += 1
            continue
        if test.workspace is not None or row.get("workspace_files") is not None:
            gone += 1   # its checks read the final workspace, deleted when the row was written
            rows.append(dict(row, run_id=run_id))
            outcome.unchanged += 1
            continue
        work.append((len(rows), row, test))
        rows.append(row)
    try:
        rescored = asyncio.run(_rescore_rows([(row, test) for _, row, test in work], run_id, caller))
    finally:
        if cache is not None:
            cache.close()
    for (index, row, _), new in zip(work, rescored, strict=True):
        outcome.rescored += 1
        outcome.flipped += int(new["passed"] != row.get("passed"))
        rows[index] = new
    if gone:
        outcome.messages.append(f"{gone} workspace test row(s) not rescorable: the workspace is gone; copied "
                                "unchanged (run them again with `engine run` to score them anew)")
    if missing:
        shown = ", ".join(f"{s}/{t}" + (f"#{c}" if c >= 0 else "") + (f"@{v}" if v else "")
                          for s, t, c, v in sorted(missing)[:10])
        outcome.messages.append(f"warning: {len(missing)} tests of {results} are not in the suites and were copied "
                                f"unchanged: {shown}{' ...' if len(missing) > 10 else ''}")

    folder.mkdir(parents=True, exist_ok=False)
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), buffer, compression="zstd")
    write_atomic(folder / "part-00000.parquet", buffer.getvalue())
    source_runs = sorted({str(r) for r in table.column("run_id").to_pylist() if r is not None})
    manifest = {"run_id": run_id, "kind": "rescore", "rescored_from": source_runs, "source": str(results),
                "suites": [str(p) for p in suites], "rows": len(rows), "rescored": outcome.rescored,
                "unchanged": outcome.unchanged, "flipped": outcome.flipped,
                "created_at": dt.datetime.now(dt.UTC).isoformat()}
    write_atomic(folder / "_manifest.json", (json.dumps(manifest, indent=2) + "\n").encode())
    outcome.messages.append(f"{outcome.flipped} verdicts changed; see them with: engine diff {results} {folder}")
    return outcome
