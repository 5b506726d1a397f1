"""`engine run --out URL` / `--resume URL`: a run staged in a local folder, published to a results URL.

The storage side (pyarrow.fs, uploads, downloads, the staging folder's place) is `engine.results.remote`; this
module is the session's use of it: where a new or resumed run is staged, and what is uploaded when the session
ends (docs/scale.md, section 3).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import StorageError, UsageError

if TYPE_CHECKING:
    from engine.run.shards import Shard


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def is_url(location: str | Path) -> bool:
    from engine.results.remote import is_url

    return is_url(location)


def stage_resume(location: str) -> tuple[Path, str]:
    """`--resume URL/RUN`: (the run's staging folder, downloaded from URL when this machine has none; URL)."""
    from engine.results import folder, remote

    run_url = remote.normalize(location)
    base, _, query = run_url.partition("?")
    parent, _, name = base.rpartition("/")
    remote_out = parent + (f"?{query}" if query else "")
    local = remote.staging_dir(remote_out) / name
    if not (folder.is_run_folder(local) or local.is_dir()):
        remote.download_run(run_url, local)
    return local, remote_out


def new_staged_run(remote_out: str, run_id: str, shard: Shard | None) -> Path:
    """The staging folder of a new run into `remote_out`; refuses one whose remote folder already holds results."""
    from engine.results import remote

    name = run_id if shard is None else f"{run_id}/{shard.folder}"
    if not remote.holds_run(remote.join(remote_out, *name.split("/"))):
        return remote.staging_dir(remote_out) / run_id   # nothing there yet: the usual case
    raise UsageError(f"--run-id {run_id}: {remote_out.partition('?')[0]}/{name} already holds results; continue "
                     f"it with engine run --resume {remote_out.partition('?')[0]}/{run_id}"
                     + (f" --shard {shard.label}" if shard else "") + ", or give another --run-id")


def publish(run_dir: Path, shard: Shard | None, remote_out: str, code: int) -> int:
    """Upload the staged run (parts first, manifests last); drop the staging folder of a complete unsharded run."""
    from engine.results import remote

    root = run_dir.parent if shard is not None else run_dir
    url = remote.join(remote_out, root.name)
    shown = url.partition("?")[0]
    try:
        sent = remote.upload_run(root, url)
    except StorageError as exc:
        _err(f"error: {exc}; everything is kept in {root}; upload it by resuming: engine run --resume {shown}"
             + (f" --shard {shard.label}" if shard else ""))
        return 3
    print(f"uploaded {sent} file(s) to {shown}")
    if code == 0 and shard is None:
        remote.remove_staging(root)
    elif code:
        _err(f"the journal stays in {root}; continue with: engine run --resume {shown}"
             + (f" --shard {shard.label}" if shard else ""))
    return code
