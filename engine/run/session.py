"""One `engine run` invocation end to end: load, select, start builtin servers, run, finalize.

Exit codes: 0 the run completed (failing tests included), 1 suite errors, a stopped run (Ctrl-C,
`--max-cost`), a run folder in use by another run, or a fatal error, 2 a usage error (bad option,
unknown model, missing API key), 3 the run folder could not be written (disk full, I/O error): spending
stopped, committed rows are kept, `--resume` continues once the cause is fixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import EngineError, StorageError, UsageError
from engine.model.model_config import ModelConfig
from engine.model.test import Test
from engine.run import inputs, remote_run, run_folder
from engine.run.manifest import build_manifest, now_iso

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.run.run_config import Invocation
    from engine.run.until_decided import UntilDecided

def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_session(invocation: Invocation, *, dry_run: bool = False, resume: Path | None = None,
                retry_errors: bool = False, quiet: bool = False, model_slots: Any = None,
                until_decided: UntilDecided | None = None, complete: bool = False,
                finished: Callable[[Path], None] | None = None) -> int:
    """Run one invocation and return the exit code.

    Args:
        invocation: The settings from the command line.
        dry_run: Print the requests instead of calling.
        resume: A run folder to continue.
        retry_errors: Re-run only the error rows of `resume`.
        quiet: No progress output.
        model_slots: `RunConfig.model_slots`: caps shared with other processes (`engine.run.ray_dispatch`).
        until_decided: `--until-decided A,B`: stop once A vs B is decided (`engine.run.until_decided`). The
            journal keeps it and its seed: a later `--resume` continues the decision.
        complete: `--complete`, with `resume` of an `--until-decided` run: run every test left instead.
        finished: Called with the run folder once a local, unsharded run has written its manifest, the folder
            still locked (the command line prepares the viewer's snapshot there).
    """
    try:
        return _run(invocation, dry_run=dry_run, resume=resume, retry_errors=retry_errors, quiet=quiet,
                    model_slots=model_slots, until_decided=until_decided, complete=complete, finished=finished)
    except UsageError as exc:
        _err(f"error: {exc}")
        return 2
    except StorageError as exc:
        _err(f"{'disk full' if exc.disk_full else 'error'}: {exc}")
        return 3
    except EngineError as exc:
        _err(f"error: {exc}")
        return 1


def _run(invocation: Invocation, *, dry_run: bool, resume: Path | None, retry_errors: bool, quiet: bool,
         model_slots: Any = None, until_decided: UntilDecided | None = None, complete: bool = False,
         finished: Callable[[Path], None] | None = None) -> int:
    from engine.run.shards import Shard, check_run_id, resume_folder

    journal = None
    held = None   # the run folder's lock, released when this process ends
    invocation = invocation.absolute()
    shard = Shard.parse(invocation.shard) if invocation.shard is not None else None
    if invocation.run_id is not None:
        check_run_id(invocation.run_id)
    if retry_errors and resume is None:
        raise UsageError("--retry-errors needs --resume RUN_DIR (the run whose error rows to re-run)")
    if until_decided is not None and (resume is not None or shard is not None):
        raise UsageError("--until-decided starts a new, unsharded run (the decision needs both models' rows in one "
                         "process); `engine run --resume RUN_DIR` without it continues a stopped run's decision, "
                         "and `--resume RUN_DIR --complete` runs every test it left")
    if complete and resume is None:
        raise UsageError("--complete goes with --resume RUN_DIR of an --until-decided run (it runs every test the "
                         "decision left)")
    remote_out = None   # --out or --resume is a URL: the run runs in a local staging folder (engine.results.remote)
    if resume is not None and remote_run.is_url(resume):
        resume, remote_out = remote_run.stage_resume(str(resume))
    elif invocation.out is not None and remote_run.is_url(invocation.out) and resume is None:
        from engine.results import remote

        remote_out = remote.normalize(invocation.out)
        invocation = dataclasses.replace(invocation, out=remote_out)
    if resume is not None:
        from engine.results import folder

        resume = resume_folder(run_folder.named_run(resume), shard)
        if not folder.is_run_folder(resume):
            raise UsageError(f"--resume {resume}: not a run folder (no _journal.sqlite, _manifest.json or "
                             f"part-*.parquet there); give a run folder such as results/<run-id>")
        if not dry_run:
            held = folder.lock(resume)
        journal, notes = folder.open_journal(resume, replace_errors=retry_errors)
        for note in notes:
            _err(f"note: {note}")
        stored = journal.get_meta("invocation")
        if stored is None and not invocation.paths:
            journal.close()
            raise UsageError(f"--resume {resume}: the journal lost the run's settings and there is no "
                             f"_manifest.json; give them again: engine run --resume {resume} SUITES "
                             f"--models FILE --model NAME ...")
        invocation = invocation.over(stored or {})
        if shard is not None and stored is not None and stored.get("shard") != shard.label:
            journal.close()
            raise UsageError(f"--resume {resume} --shard {shard.label}: that folder holds "
                             f"{'shard ' + str(stored.get('shard')) if stored.get('shard') else 'an unsharded run'}")
        shard = Shard.parse(invocation.shard) if invocation.shard is not None else None
        until_decided = _resumed_decision(journal, resume, complete=complete, retry_errors=retry_errors)
    elif shard is not None and invocation.run_id is None:
        raise UsageError(f"--shard {shard.label} needs --run-id NAME, the same for every shard, so they all write "
                         f"into OUT/NAME/ (e.g. --run-id sweep-2026-12-02)")
    if remote_out is None and resume is not None and invocation.out and remote_run.is_url(invocation.out):
        # its staging folder resumed by path: upload all the same
        from engine.results.remote import normalize

        remote_out = normalize(invocation.out)
    if not invocation.paths:
        raise UsageError("no suites given: engine run SUITE_PATH... (a file or a folder of *.yaml)")

    tests = inputs.load_tests(invocation)
    if tests is None:
        return 1
    models, every_model, model_defaults = inputs.load_models(invocation)
    if until_decided is not None:
        until_decided.check_models(models)
    if _image_conflicts(tests, models):
        return 1
    judges = inputs.judges(invocation, tests, every_model, model_defaults)
    api_keys = inputs.api_keys(models + [m for m in judges.models.values() if m not in models] if judges else models)

    if dry_run:
        from engine.run.dry_run import print_requests

        print_requests(models, tests, invocation, shard)
        if until_decided is not None:
            _err("dry run: with --until-decided these are the most calls the run makes (it stops once decided)")
        return 0
    from engine.suite.stored_tests import definition_samples

    inputs.isolation_notice(definition_samples(tests))   # a program-running check is one of a definition's kinds

    if journal is None:
        from engine.results import folder
        from engine.results.journal import Journal

        run_id = invocation.run_id or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)
        run_dir = Path(invocation.out or run_folder.DEFAULT_OUT) / run_id
        if remote_out is not None:
            run_dir = remote_run.new_staged_run(remote_out, run_id, shard)
        run_dir = run_folder.create(run_dir, run_id, shard)
        held = folder.lock(run_dir)
        journal = Journal(run_dir / "_journal.sqlite")
        journal.set_meta("run_id", run_id)
        journal.set_meta("started_at", now_iso())
        journal.set_meta("invocation", dataclasses.asdict(invocation))
    else:
        assert resume is not None
        run_dir = resume
        run_id = journal.get_meta("run_id") or run_dir.name
    run_folder.point_latest(run_dir.parent if shard is not None else run_dir)
    try:
        code = _execute(invocation, run_id, run_dir, journal, models, tests, api_keys,
                        retry_errors=retry_errors, quiet=quiet, judges=judges, model_slots=model_slots,
                        until_decided=until_decided)
        if finished is not None and shard is None and remote_out is None:
            finished(run_dir)
    except StorageError as exc:
        code = _storage_failed(exc, run_dir, journal)
    finally:
        with contextlib.suppress(StorageError):   # already reported; committed rows are safe
            journal.close()
        if held is not None:
            held.close()
    if remote_out is not None:
        code = remote_run.publish(run_dir, shard, remote_out, code)
    return code


def _resumed_decision(journal: Any, resume: Path, *, complete: bool, retry_errors: bool) -> UntilDecided | None:
    """The `--until-decided` option of a resumed run, which continues it; None with `--complete` (every test
    left runs), `--retry-errors` (only error rows run again) or a run without one.

    Raises:
        UsageError: `--complete` for a run that was not an `--until-decided` one.
    """
    from engine.run.until_decided import SPEC_KEY, UntilDecided

    found = UntilDecided.from_meta(journal.get_meta(SPEC_KEY))
    if found is None and complete:
        journal.close()
        raise UsageError(f"--complete: {resume} is not an --until-decided run; `engine run --resume {resume}` "
                         f"runs every test it left")
    return None if found is None or complete or retry_errors else found[0]


def _storage_failed(exc: StorageError, run_dir: Path, journal: Any) -> int:
    """One message for a run stopped by a failed write: what is kept and what to do (exit 3)."""
    try:
        rows = f"{journal.count()[0]} rows saved"
    except Exception:  # noqa: BLE001 - the message must come out whatever state the journal is in
        rows = "the committed rows are kept"
    if exc.disk_full:
        _err(f"disk full: {rows} in {run_dir}; free space and resume with: engine run --resume {run_dir}")
    else:
        _err(f"the run folder could not be written ({exc}): {rows} in {run_dir}; fix that and resume with: "
             f"engine run --resume {run_dir}")
    return 3


def _image_conflicts(tests: Sequence[Test], models: list[ModelConfig]) -> bool:
    """Print an error at each image a completions-API model would be sent; True when there is one."""
    from engine.suite.content_parts import completions_conflicts

    problems = completions_conflicts(tests, models)
    for problem in problems:
        _err(str(problem))
    if problems:
        _err(f"{len(problems)} image(s) cannot go to a completions-API model: nothing was run")
    return bool(problems)


def _execute(invocation: Invocation, run_id: str, run_dir: Path, journal: Any, models: list[ModelConfig],
             tests: Sequence[Test], api_keys: dict[str, str | None], *, retry_errors: bool, quiet: bool,
             judges: Any = None, model_slots: Any = None, until_decided: UntilDecided | None = None) -> int:
    from engine.results.writer import ResultsWriter
    from engine.run.jobs import count_jobs, iter_jobs, runs_on
    from engine.run.progress import Progress, print_summary
    from engine.run.run_config import PollPlan
    from engine.run.runner import SPARE_WORKERS, RunConfig, Runner
    from engine.run.shards import Shard, combine
    from engine.suite.stored_tests import keys_of

    shard = Shard.parse(invocation.shard) if invocation.shard is not None else None
    writer = ResultsWriter(run_dir, journal)
    for note in writer.recover():
        _err(f"note: {note}")
    only = journal.keys(errors_only=True) if retry_errors else None
    skip = set() if retry_errors else journal.keys()
    started = time.monotonic()
    interrupted = False
    stats = None
    responses = None
    gate = None
    with contextlib.ExitStack() as servers:
        try:
            if judges is not None:   # an embedded judge model is started like an answering one
                extra = [m for m in judges.models.values() if m not in models]
                everyone = _start_builtins(models + extra, run_dir, servers)
                models = everyone[:len(models)]
                by_name = {m.name: m for m in everyone}
                judges = dataclasses.replace(judges, models={n: by_name[n] for n in judges.models})
            else:
                models = _start_builtins(models, run_dir, servers)
            total = count_jobs(models, tests, invocation.repeat, skip=skip, only=only, shard=shard)
            left_out = [(m.name, t.id) for m in models for t in keys_of(tests) if not runs_on(m, t)]
            if left_out:
                names = sorted({name for name, _ in left_out})
                agent_tests = len({test_id for _, test_id in left_out})
                _err(f"note: {agent_tests} agent test(s) left out on the completions-API model(s) "
                     f"{', '.join(names)}: an agent test needs tools, which /completions cannot send")
            progress = Progress(quiet=quiet)
            responses = servers.enter_context(_response_cache(invocation.cache))
            config = RunConfig(run_id=run_id, concurrency=invocation.concurrency,
                               settings=invocation.request_settings(), max_cost=invocation.max_cost, judges=judges,
                               response_cache=responses, cache=invocation.cache, repeat=invocation.repeat,
                               model_slots=model_slots, batch_poll=PollPlan.from_env())
            if until_decided is not None:
                from engine.run.until_decided import SPEC_KEY, DecisionGate, UntilDecided

                stored = UntilDecided.from_meta(journal.get_meta(SPEC_KEY))   # a resumed run's own seed
                seed = stored[1] if stored is not None else (
                    invocation.seed if invocation.seed is not None else secrets.randbits(32))
                journal.set_meta(SPEC_KEY, until_decided.to_meta(seed))   # before any call: --resume continues
                gate = DecisionGate(until_decided, models, tests, invocation.repeat, seed=seed,
                                    concurrency=min(1 + SPARE_WORKERS, invocation.concurrency or 1 + SPARE_WORKERS))
                total = gate.total_jobs() - (_replay(gate, writer, journal) if skip else 0)
            runner = Runner(config, journal, writer, on_progress=progress.update, gate=gate)
            progress.watch(runner.stats)
            if gate is not None:
                jobs = {m.name: (m, gate.jobs(m, skip)) for m in models}
            else:
                jobs = {m.name: (m, iter_jobs(m, tests, invocation.repeat, skip=skip, only=only, shard=shard))
                        for m in models}
            try:
                stats = asyncio.run(_run_with_signals(runner, jobs, total, api_keys))
            finally:
                progress.close()
        except KeyboardInterrupt:
            interrupted = True
    writer.flush()
    rows, errors = journal.count()
    stopped = "interrupted" if interrupted else (stats.stopped if stats else None)
    decision = journal.get_meta("until_decided")   # a resumed run keeps the record of how it was first stopped
    if gate is not None:
        before = decision
        decision = gate.summary(stopped)
        if isinstance(before, dict) and isinstance(before.get("lookahead"), int):   # the widest over every part
            decision["lookahead"] = max(decision["lookahead"], before["lookahead"])
        if stopped is None and gate.decided_at is not None and decision["tests_not_run"]:
            stopped = "decided"   # the tests left are not a failure: the manifest says `complete: false`
        journal.set_meta("until_decided", decision)
    manifest = build_manifest(invocation, run_id, journal, models, tests, rows, errors, stopped,
                              time.monotonic() - started, until_decided=decision)
    writer.write_manifest(manifest)
    if shard is not None:   # the run's combined view, after this shard's own manifest (engine.run.shards)
        combined = combine(run_dir.parent, shard.count)
        done = sum(1 for s in combined["shards"] if s["complete"])
        print(f"shard {shard.label}: run {run_dir.parent} has {done} of {shard.count} shards complete"
              + ("" if not combined["problems"] else f"; problems: {'; '.join(combined['problems'])}"))
    if stats is not None and not quiet:
        print_summary(stats)
    print(f"results: {run_dir} ({rows} rows, {errors} errors)" + (f"; stopped: {stopped}" if stopped else ""))
    if responses is not None and responses.hits:
        print(f"response cache: {responses.hits} call(s) answered from {responses.path} (no call made, nothing "
              f"paid; engine run --no-cache asks again)")
    if gate is not None and decision is not None:
        from engine.base.sequential import describe

        print(describe(decision))
        if decision["tests_not_run"]:
            print(f"the {decision['tests_not_run']} test(s) not run are absent from {run_dir}; run them with: "
                  f"engine run --resume {run_dir} --complete")
    if stats is not None and stats.batches_submitted > stats.batches_done:
        _err(f"{stats.batches_submitted - stats.batches_done} batch(es) holding {stats.batch_rows_held} rows are "
             f"still with the provider (sent and paid, not cancelled): engine run --resume {run_dir} collects them")
    if stopped and stopped != "decided":
        _err(f"the run stopped early ({stopped}); continue it with: engine run --resume {run_dir}")
        return 1
    return 0


def _replay(gate: Any, writer: Any, journal: Any) -> int:
    """Feed the rows a stopped `--until-decided` run committed to its rebuilt gate; how many were its jobs.

    Read a Parquet part's rows at a time from the journal (the writer first gives every row a part).
    """
    import orjson

    writer.flush()
    replayed = 0
    for part in sorted(journal.parts()):
        _, lines = journal.json_lines_of_part(part)
        replayed += gate.replay(orjson.loads(line) for line in lines.split(b"\n") if line)
    return replayed


@contextlib.contextmanager
def _response_cache(mode: bool | None) -> Any:
    """The response cache for the run (None with --no-cache, or when it cannot be opened: warned, run goes on)."""
    if mode is False:
        yield None
        return
    from engine.client.response_cache import ResponseCache, default_path

    cache = ResponseCache(default_path())
    if not cache.usable:
        _err(f"warning: {cache.problem}; running without the response cache (delete the file, or engine cache "
             f"clear, to start a new one)")
        yield None
        return
    try:
        yield cache
    finally:
        cache.close()
        if cache.problem:
            _err(f"warning: {cache.problem}; the calls after that were made without the response cache")


def _start_builtins(models: list[ModelConfig], run_dir: Path, stack: contextlib.ExitStack) -> list[ModelConfig]:
    """Start one embedded server per distinct (builtin, model id) pair; the stack stops them.

    A server answers under one alias (its served model), so two entries of one builtin with different
    `model:` ids each get their own server; otherwise every row of the second would look like a fallback.
    """
    from engine.local.registry import is_scripted

    # `builtin: golden` needs no server: the runner answers for it in-process
    needed = {(m.builtin, m.model) for m in models if m.builtin and not m.base_url and not is_scripted(m.builtin)}
    if not needed:
        return models
    from engine.local import cache_identity
    from engine.local.server import serve_builtins

    wanted = sorted(needed)   # started together: their model loads overlap
    logs = [run_dir / (f"_{b}.server.log" if alias == b else f"_{b}.{alias}.server.log") for b, alias in wanted]
    servers = [(str(b), alias, log) for (b, alias), log in zip(wanted, logs, strict=True)]
    started = stack.enter_context(serve_builtins(servers))
    urls: dict[tuple[str | None, str], str] = dict(zip(wanted, started, strict=True))
    return [dataclasses.replace(m, base_url=urls[(m.builtin, m.model)], cache_identity=cache_identity(m.builtin))
            if m.builtin is not None and (m.builtin, m.model) in urls else m for m in models]


async def _run_with_signals(runner: Any, jobs: Any, total: int, api_keys: dict[str, str | None]) -> Any:
    loop = asyncio.get_running_loop()
    presses = 0

    def on_signal(sig: signal.Signals) -> None:
        nonlocal presses
        presses += 1
        if presses == 1 and sig == signal.SIGINT:
            _err("\nstopping: no new calls; finishing the calls in flight (press Ctrl-C again to cancel them)"
                 + ("; the batches sent stay with the provider, recorded: engine run --resume collects them"
                    if runner.stats.batches_submitted > runner.stats.batches_done else ""))
            runner.stop("interrupted")
        else:   # SIGTERM ends the run now: sandboxed programs stop at once, committed rows are kept
            from engine.harness.interrupt import interrupt

            _err("\ncancelling the calls in flight; finished rows are kept")
            runner.cancel()
            interrupt()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal, sig)
    return await runner.run(jobs, total, api_keys)
