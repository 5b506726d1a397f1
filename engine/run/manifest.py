"""The run manifest (`_manifest.json`): written last, it says what a run folder holds and how it was made."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.model.model_config import ModelConfig
from engine.model.test import Test
from engine.redact import mask_url, public_params
from engine.suite.stored_tests import keys_of

if TYPE_CHECKING:
    from engine.run.run_config import Invocation


def build_manifest(invocation: Invocation, run_id: str, journal: Any, models: list[ModelConfig], tests: Sequence[Test],
                   rows: int, errors: int, stopped: str | None, seconds: float,
                   until_decided: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's `_manifest.json`: what ran, from which suites (hashes, git), on which models (no credentials).

    `until_decided` is the stopping decision of `engine run --until-decided` (`DecisionGate.summary`), kept
    through later resumes; `stopped: "decided"` marks the session it stopped.
    """
    from engine import __version__

    suites: dict[str, dict[str, Any]] = {}
    for test in keys_of(tests):
        entry = suites.setdefault(test.suite, {"file": test.file, "tests": 0, "hashes": []})
        entry["tests"] += 1
        entry["hashes"].append(test.hash)
    for entry in suites.values():
        try:
            entry["sha256"] = hashlib.sha256(Path(entry["file"]).read_bytes()).hexdigest()
        except OSError:
            entry["sha256"] = None
        entry["tests_sha256"] = hashlib.sha256("\n".join(sorted(entry.pop("hashes"))).encode()).hexdigest()
    return {
        "run_id": run_id,
        "schema_version": _schema_version(),
        "engine_version": __version__,
        "started_at": journal.get_meta("started_at"),
        "ended_at": now_iso(),
        "seconds_this_session": round(seconds, 3),
        "interrupted": stopped == "interrupted",
        "stopped": stopped,
        "complete": stopped is None,
        "suites_git": _git_commit(invocation.paths),
        "suites": suites,
        "models": [_public_model(m) for m in models],
        "invocation": dataclasses.asdict(invocation),
        "argv": sys.argv[1:],
        "shard": invocation.shard,
        "counts": {"rows": rows, "errors": errors, "parts": len(journal.parts())},
        **({"until_decided": until_decided} if until_decided is not None else {}),
    }


def _schema_version() -> int:
    from engine.results.version import SCHEMA_VERSION

    return SCHEMA_VERSION


def _public_model(model: ModelConfig) -> dict[str, Any]:
    """A model config fit for the manifest: the key's variable name, no credentials (`engine.redact`)."""
    data = dataclasses.asdict(model)
    data["params"] = public_params(model.params)
    data["base_url"] = mask_url(model.base_url)
    data["base_urls"] = [mask_url(url) for url in model.base_urls]
    return data


def _git_commit(paths: list[str]) -> dict[str, Any] | None:
    if not paths:
        return None
    where = Path(paths[0])
    folder = where if where.is_dir() else where.parent
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5, check=False)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, timeout=5, check=False)
        return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return None


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
