"""Shards: `engine run --shard I/N` runs a fixed slice of the jobs, so N processes split a run with no coordinator.

A job belongs to shard `1 + blake2b(row key) mod N`: a hash of the row key (model, suite, test, case,
attempt), the same in every process and on every machine (Python's `hash()` is salted per process). A
sharded run is one folder holding one ordinary run folder per shard:

    results/<run-id>/
        _manifest.json          the combined view, rewritten by each shard as it finishes (written last)
        _shards.lock            serialises those rewrites
        shard-1-of-3/           a complete run folder: _lock, _journal.sqlite, part-*.parquet, _manifest.json
        shard-2-of-3/
        shard-3-of-3/

Each shard folder has its own writer lock, journal and parts, so the crash-safe recovery of
`engine.results.writer` (which adopts every `part-*.parquet` of its folder) never touches another
shard's files, and resuming one shard is resuming its folder. Readers walk subfolders: pandas/pyarrow
and `engine analyze` read every shard's parts as one table, and every row carries the shared run id.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import UsageError

COMBINED_LOCK = "_shards.lock"
MANIFEST = "_manifest.json"
_SHARD_DIR = re.compile(r"^shard-(\d+)-of-(\d+)$")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`I/N` with 1 <= I <= N.

        Raises:
            UsageError: Anything else (exit 2).
        """
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if match is None:
            raise UsageError(f"--shard {text}: expected I/N, shard I of N (1-based), e.g. --shard 2/8")
        index, count = int(match[1]), int(match[2])
        if count < 1 or not 1 <= index <= count:
            raise UsageError(f"--shard {text}: in I/N, I must be between 1 and N (N >= 1), "
                             f"e.g. --shard 1/{max(count, 1)}")
        return cls(index, count)

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def folder(self) -> str:
        """The shard's run folder inside the run's folder."""
        return f"shard-{self.index}-of-{self.count}"

    def owns(self, key: str) -> bool:
        """Whether the job with row key `key` is this shard's."""
        return shard_of(key, self.count) == self.index


def shard_of(key: str, count: int) -> int:
    """The 1-based shard of a row key among `count`: stable across processes, machines and Python versions."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return 1 + int.from_bytes(digest, "big") % count


def check_run_id(run_id: str) -> str:
    """A `--run-id` fit for a folder name readers do not skip (no leading `_` or `.`, no `/`).

    Raises:
        UsageError: It is not.
    """
    if not _RUN_ID.fullmatch(run_id) or run_id == "latest":
        raise UsageError(f"--run-id {run_id!r}: use letters, digits, '.', '_' or '-' (at most 128, starting with "
                         f"a letter or digit, not 'latest'), e.g. --run-id sweep-2026-12-02")
    return run_id


def shard_folders(run_dir: Path) -> dict[Shard, Path]:
    """The shard folders under a run's folder (empty for an unsharded run)."""
    found: dict[Shard, Path] = {}
    with contextlib.suppress(OSError):
        for path in run_dir.iterdir():
            match = _SHARD_DIR.fullmatch(path.name)
            if match and path.is_dir() and 1 <= int(match[1]) <= int(match[2]):
                found[Shard(int(match[1]), int(match[2]))] = path
    return found


def new_shard_folder(run_dir: Path, shard: Shard) -> Path:
    """Create `run_dir/shard-I-of-N` (and `run_dir` when it is the first shard to start).

    Raises:
        UsageError: This shard already started (resume it instead), or the folder holds shards of another N.
        OSError: The folders could not be created.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    others = sorted({s.count for s in shard_folders(run_dir)} - {shard.count})
    if others:
        raise UsageError(f"{run_dir} holds shards of a {others[0]}-way split; every shard of a run must use the "
                         f"same N (--shard I/{others[0]}), or give another --run-id")
    path = run_dir / shard.folder
    try:
        path.mkdir()
    except FileExistsError:
        raise UsageError(f"shard {shard.label} of {run_dir} has already started; continue it with: "
                         f"engine run --resume {run_dir} --shard {shard.label}") from None
    return path


def resume_folder(resume: Path, shard: Shard | None) -> Path:
    """The folder `--resume RESUME [--shard I/N]` continues.

    `--resume RUN --shard I/N` is RUN's shard folder; `--resume RUN/shard-I-of-N` works too.

    Raises:
        UsageError: A sharded run resumed without `--shard`, or a shard that never started.
    """
    shards = shard_folders(resume)
    if shard is None:
        if shards and not (resume / "_journal.sqlite").exists():
            first = min(shards, key=lambda s: (s.count, s.index))
            raise UsageError(f"--resume {resume}: a sharded run; resume each shard that is not complete, e.g. "
                             f"engine run --resume {resume} --shard {first.label}")
        return resume
    if resume.name == shard.folder:
        return resume
    named = _SHARD_DIR.fullmatch(resume.name)
    if named:
        raise UsageError(f"--resume {resume} --shard {shard.label}: that folder is shard {named[1]}/{named[2]}; "
                         f"give the run's folder: engine run --resume {resume.parent} --shard {shard.label}")
    if shard in shards:
        return shards[shard]
    raise UsageError(f"--resume {resume} --shard {shard.label}: no folder {resume / shard.folder}; that shard "
                     f"never started: start it with the run's command and --run-id {resume.name} "
                     f"--out {resume.parent} --shard {shard.label}")


def combine(run_dir: Path, count: int) -> dict[str, Any]:
    """Write `run_dir/_manifest.json`, the combined view of the shards' manifests, and return it.

    Every shard calls this after writing its own manifest, under an exclusive lock, so the last writer
    has read every manifest written before it: the combined manifest says `complete` exactly when all
    `count` shards' manifests do (and they agree on the run's settings).
    """
    from engine.results.journal import storage_error
    from engine.results.writer import write_atomic

    try:
        lock = open(run_dir / COMBINED_LOCK, "a+")  # noqa: SIM115 - closed below, after the write
    except OSError as exc:
        raise storage_error(exc, str(run_dir / COMBINED_LOCK)) from exc
    with lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)   # held for the read-all-then-write below
        combined = combined_manifest(run_dir, count)
        text = json.dumps(combined, indent=2, ensure_ascii=False, default=str) + "\n"
        write_atomic(run_dir / MANIFEST, text.encode())
    return combined


def combined_manifest(run_dir: Path, count: int) -> dict[str, Any]:
    """The combined view of a sharded run's `count` shard manifests (see docs/results.md)."""
    shards: list[dict[str, Any]] = []
    manifests: list[dict[str, Any]] = []
    problems: list[str] = []
    for index in range(1, count + 1):
        shard = Shard(index, count)
        entry: dict[str, Any] = {"shard": shard.label, "folder": shard.folder, "complete": False}
        manifest: dict[str, Any] | None = None
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads((run_dir / shard.folder / MANIFEST).read_text())
            manifest = loaded if isinstance(loaded, dict) else None
        if manifest is None:
            entry["state"] = "running or not started" if (run_dir / shard.folder).is_dir() else "not started"
        else:
            manifests.append(manifest)
            entry.update(state="complete" if manifest.get("complete") else f"stopped: {manifest.get('stopped')}",
                         complete=bool(manifest.get("complete")), counts=manifest.get("counts"))
        shards.append(entry)
    settings = {json.dumps(_unsharded(m.get("invocation")), sort_keys=True) for m in manifests}
    if len(settings) > 1:
        problems.append("the shards were run with different settings (suites, models or options): their rows "
                        "do not make one run; see each shard's _manifest.json `invocation`")
    others = sorted({s.count for s in shard_folders(run_dir)} - {count})
    if others:
        problems.append(f"the folder also holds shards of a {others[0]}-way split: their rows would be read too")
    first = manifests[0] if manifests else {}
    totals = {name: sum(int((m.get("counts") or {}).get(name) or 0) for m in manifests)
              for name in ("rows", "errors", "parts")}
    ended = [m["ended_at"] for m in manifests if m.get("ended_at")]
    started = [m["started_at"] for m in manifests if m.get("started_at")]
    return {
        "run_id": first.get("run_id", run_dir.name),
        "sharded": True,
        "complete": all(e["complete"] for e in shards) and not problems,
        "shards": shards,
        "problems": problems,
        "counts": totals,
        "started_at": min(started, default=None),
        "ended_at": max(ended, default=None),
        **{k: first[k] for k in ("schema_version", "engine_version", "suites_git", "suites", "models")
           if k in first},
        "invocation": _unsharded(first.get("invocation")),
    }


def _unsharded(invocation: Any) -> Any:
    """A shard's stored settings without its own shard number (what all shards must share)."""
    if not isinstance(invocation, dict):
        return invocation
    return {k: v for k, v in invocation.items() if k != "shard"}
