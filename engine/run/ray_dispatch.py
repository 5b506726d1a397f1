"""`engine run --ray [ADDRESS]`: the shards of one run as Ray tasks across a Ray cluster.

The driver (this process) splits the run into N shards (`engine.run.shards`, N = `--shards`, default the
cluster's CPU count) and submits one Ray task per shard, one CPU each, spread over the nodes. A task is an
ordinary `engine run --run-id RUN --shard I/N` inside a Ray worker: it writes `OUT/RUN/shard-I-of-N/`
and rewrites the combined `OUT/RUN/_manifest.json` as it finishes, exactly as a hand-started shard does,
so OUT must be one filesystem every node sees (NFS, a shared disk, or a results URL). Exec scoring runs in
the task, on the node that holds it: sandboxed programs spread with the shards.

Per-model caps hold cluster-wide: the driver starts one `ModelSlots` actor per model, the rate-limit
authority holding `concurrency` slots; every worker of every shard acquires one around each model call
(`RunConfig.model_slots`, entered before the shard's own `--concurrency` slot) and releases it after. The
release is not awaited (Ray keeps one caller's actor calls in order), so a call costs one actor round trip
more; docs/scale.md has the measured figure. Judge calls keep per-shard caps.

API keys are never shipped: each task reads the model's `api_key_env` from its own node's environment (set
it where `ray start` runs), as a job array would. Paths (suites, models file, OUT) are made absolute and
must exist at the same place on every node.

`--ray` with no address calls `ray.init()`: it joins the cluster named by `RAY_ADDRESS`, else starts a
local one-machine Ray that ends with the driver. The driver writes `OUT/RUN/_ray.json` (which node ran each
shard, its exit code and seconds) and exits like `engine run`: 0 when every shard completed, else the worst
shard's code (3 storage, 2 usage, 1 stopped or failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from engine.errors import EngineError, UsageError
from engine.model.model_config import ceiling_of
from engine.run.run_config import Invocation
from engine.run.run_folder import DEFAULT_OUT

INSTALL_HINT = "pip install '.[ray]'"
_SEVERITY = {3: 4, 2: 3, 1: 2, 0: 0}   # exit code -> how bad, for the driver's own code


def import_ray() -> Any:
    """Ray, or a UsageError naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"--ray needs Ray, an optional extra: {INSTALL_HINT}") from None
    return ray


class ModelSlots:
    """The cluster-wide cap of one model: `cap` slots, acquired around each call (a Ray async actor)."""

    def __init__(self, cap: int) -> None:
        self._slots = asyncio.Semaphore(max(1, cap))
        self._held = 0
        self.peak = 0

    async def acquire(self) -> None:
        await self._slots.acquire()
        self._held += 1
        self.peak = max(self.peak, self._held)

    async def release(self) -> None:
        self._held -= 1
        self._slots.release()

    async def peak_held(self) -> int:
        """The most slots ever held at once (a test and `_ray.json` read it)."""
        return self.peak


class RemoteSlot:
    """`async with` one slot of a `ModelSlots` actor (what `RunConfig.model_slots` returns)."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    async def __aenter__(self) -> None:
        ref = self._actor.acquire.remote()
        try:
            await ref
        except asyncio.CancelledError:
            # the grant may still come: hand it back once it does, so a cancelled call never leaks a slot
            if await _granted(ref):
                self._actor.release.remote()
            raise

    async def __aexit__(self, *exc: Any) -> None:
        self._actor.release.remote()   # fire and forget: ordered after our acquire by Ray


async def _granted(ref: Any) -> bool:
    with contextlib.suppress(Exception):
        await asyncio.shield(ref)
        return True
    return False


def run_shard(invocation: dict[str, Any], label: str, resume: str | None,
              actors: dict[str, Any]) -> dict[str, Any]:
    """One shard, inside a Ray worker: the `engine run --shard` session, its output captured and returned."""
    import ray

    from engine.run.session import run_session

    started, started_at = time.monotonic(), time.time()
    out, err = io.StringIO(), io.StringIO()
    inv = Invocation(**invocation)
    inv.shard = label

    def slots(name: str) -> RemoteSlot | None:
        return RemoteSlot(actors[name]) if name in actors else None

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run_session(inv, resume=Path(resume) if resume else None, quiet=True, model_slots=slots)
        except Exception as exc:  # noqa: BLE001 - reported to the driver as this shard's failure
            print(f"error: shard {label} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = 1
    return {"shard": label, "code": code, "node": ray.get_runtime_context().get_node_id(),
            "host": os.uname().nodename, "seconds": round(time.monotonic() - started, 3),
            "started_at": started_at, "ended_at": time.time(),
            "stdout": out.getvalue()[-4000:], "stderr": err.getvalue()[-4000:]}


def run_on_ray(invocation: Invocation, address: str | None, shards: int | None, *, resume: Path | None = None,
               quiet: bool = False) -> int:
    """Run `invocation` as shards on Ray and return the exit code (see the module docstring)."""
    try:
        return _drive(invocation, address, shards, resume=resume, quiet=quiet)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _drive(invocation: Invocation, address: str | None, shards: int | None, *, resume: Path | None,
           quiet: bool) -> int:
    from engine.results import remote
    from engine.run.inputs import load_models
    from engine.run.shards import check_run_id, combine, shard_folders

    if invocation.shard is not None:
        raise UsageError("--ray runs every shard of the run; drop --shard (give --shards N for how many)")
    resume_url = remote.normalize(resume) if resume is not None and remote.is_url(resume) else None
    if resume is not None:
        if resume_url is not None:   # a run in a results URL: read its shards' manifests from a local copy
            resume = remote.localize(resume_url)
        found = shard_folders(resume)
        if not found:
            raise UsageError(f"--resume {resume} --ray: not a sharded run folder (no shard-I-of-N folders)")
        counts = {s.count for s in found}
        if shards is not None and shards not in counts:
            raise UsageError(f"--shards {shards}: {resume} was split {min(counts)} ways")
        shards = min(counts)
        where, name = (resume_url.partition("?")[0].rpartition("/")[::2] if resume_url is not None
                       else (str(resume.parent), resume.name))
        if resume_url is not None and "?" in resume_url:
            where += "?" + resume_url.partition("?")[2]
        invocation = dataclasses.replace(invocation, out=where, run_id=name)
    ray = import_ray()
    invocation = invocation.absolute()
    out = invocation.out or DEFAULT_OUT
    out = remote.normalize(out) if remote.is_url(out) else os.path.abspath(out)
    run_id = check_run_id(invocation.run_id or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
                          + "-" + secrets.token_hex(3))
    invocation = dataclasses.replace(invocation, out=out, run_id=run_id)
    if resume is not None:   # the run's settings as its shards stored them, for the models' caps
        invocation = Invocation(**{**_stored_invocation(resume), **{
            k: v for k, v in dataclasses.asdict(invocation).items() if v not in (None, [])}})
    models, _, _ = load_models(invocation)
    run_url = remote.join(out, run_id) if remote.is_url(out) else None

    def view() -> Path:
        """The run's folder to read shard manifests from: itself, or a local copy of the URL's."""
        if run_url is None:
            return Path(out) / run_id
        try:
            return remote.localize(run_url)
        except UsageError:   # nothing uploaded yet
            return Path(os.devnull) / run_id

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        if shards is None:
            shards = max(1, int(ray.cluster_resources().get("CPU", 1)))
        slots_actor = ray.remote(num_cpus=0)(ModelSlots)
        actors = {m.name: slots_actor.remote(ceiling_of(m)) for m in models}
        task = ray.remote(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")(run_shard)
        run_dir = view()
        existing = shard_folders(run_dir)
        stored = dataclasses.asdict(invocation)
        pending = {}
        for index in range(1, shards + 1):
            label = f"{index}/{shards}"
            folder = next((p for s, p in existing.items() if s.label == label), None)
            if folder is not None and _complete(folder):
                continue
            resume_from = None if folder is None else run_url or str(run_dir)
            pending[task.remote(stored, label, resume_from, actors)] = label
        if not quiet:
            print(f"ray: {len(pending)} shard(s) of {run_id} on {len(ray.nodes())} node(s); results: "
                  f"{(run_url or '').partition('?')[0] or run_dir}",
                  flush=True)
        reports: list[dict[str, Any]] = []
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            label = pending.pop(done[0])
            try:
                report = ray.get(done[0])
            except Exception as exc:  # noqa: BLE001 - a lost node or worker: that shard failed, resume runs it
                report = {"shard": label, "code": 1, "node": None, "stderr": f"{type(exc).__name__}: {exc}"}
            reports.append(report)
            if not quiet or report["code"]:
                print(f"shard {label}: exit {report['code']} on node {str(report['node'])[:12]} "
                      f"({len(reports)} finished, {len(pending)} running)", flush=True)
            if report["code"] and report.get("stderr"):
                print(report["stderr"].rstrip(), file=sys.stderr, flush=True)
        peaks = {name: ray.get(actor.peak_held.remote()) for name, actor in actors.items()}
    finally:
        ray.shutdown()
    run_dir = view()
    _write_report(run_dir, reports, peaks, {m.name: ceiling_of(m) for m in models})
    combined = combine(run_dir, shards)   # every shard's manifest, wherever each shard ran
    if run_url is not None:
        remote.upload_run(run_dir, run_url)
        run_dir = Path(run_url.partition("?")[0])
    counts = combined["counts"]
    shown = run_url.partition("?")[0] if run_url is not None else run_dir
    print(f"results: {shown} ({counts['rows']} rows, {counts['errors']} errors); "
          f"{sum(1 for s in combined['shards'] if s['complete'])} of {shards} shards complete")
    code = max((r["code"] for r in reports), key=lambda c: _SEVERITY.get(c, 2), default=0)
    if code == 0 and not combined["complete"]:
        code = 1
    if code:
        print(f"the run is not complete; continue it with: engine run --resume {shown} --ray"
              + (f" {address}" if address else ""), file=sys.stderr)
    return code


def _stored_invocation(run_dir: Path) -> dict[str, Any]:
    """The settings a sharded run's shards stored (journal meta, else a manifest), minus the shard number.

    Raises:
        UsageError: No shard kept them.
    """
    import sqlite3

    from engine.run.shards import shard_folders

    for folder in shard_folders(run_dir).values():
        stored: Any = None
        with contextlib.suppress(sqlite3.Error, ValueError, TypeError):
            db = sqlite3.connect(f"file:{folder / '_journal.sqlite'}?mode=ro", uri=True, timeout=5)
            try:
                found = db.execute("SELECT v FROM meta WHERE k = 'invocation'").fetchone()
                stored = json.loads(found[0]) if found else None
            finally:
                db.close()
        if not isinstance(stored, dict):
            with contextlib.suppress(OSError, ValueError):
                stored = json.loads((folder / "_manifest.json").read_text()).get("invocation")
        if isinstance(stored, dict):
            known = {f.name for f in dataclasses.fields(Invocation)}
            return {k: v for k, v in stored.items() if k in known and k != "shard"}
    raise UsageError(f"--resume {run_dir}: no shard kept the run's settings; give them again: engine run "
                     f"--resume {run_dir} --ray ... SUITES --models FILE")


def _complete(folder: Path) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return bool(json.loads((folder / "_manifest.json").read_text()).get("complete"))
    return False


def _write_report(run_dir: Path, reports: list[dict[str, Any]], peaks: dict[str, int],
                  caps: dict[str, int]) -> None:
    """`RUN/_ray.json`: where each shard ran and how it ended, and each model's peak of calls in flight."""
    from engine.results.writer import write_atomic

    kept = ("shard", "code", "node", "host", "seconds", "started_at", "ended_at")
    data = {"shards": [{k: r.get(k) for k in kept} for r in reports],
            "models": {name: {"cap": caps[name], "peak_in_flight": peaks.get(name)} for name in caps}}
    with contextlib.suppress(OSError):
        write_atomic(run_dir / "_ray.json", (json.dumps(data, indent=2) + "\n").encode())
