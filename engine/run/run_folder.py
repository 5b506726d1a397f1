"""The folder a run writes: a new one made under `--out` (a shard's inside its run's), the folder `--resume PATH`
names, and `OUT/latest` pointed at the run last started."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import StorageError, UsageError

if TYPE_CHECKING:
    from engine.run.shards import Shard

DEFAULT_OUT = "results"
_LATEST_TEXT_BYTES = 4096   # a `latest` text file holds one run id


def create(run_dir: Path, run_id: str, shard: Shard | None) -> Path:
    """Make the new run's folder (`run_dir/shard-I-of-N` for a shard) and return it.

    Raises:
        UsageError: The folder already exists (say how to resume it).
        StorageError: It could not be created (a full disk said so).
    """
    from engine.run.shards import new_shard_folder

    try:
        if shard is not None:
            return new_shard_folder(run_dir, shard)
        run_dir.mkdir(parents=True, exist_ok=False)
        return run_dir
    except FileExistsError:
        raise UsageError(f"--run-id {run_id}: {run_dir} already exists; continue it with "
                         f"engine run --resume {run_dir}, or give another --run-id") from None
    except OSError as exc:
        raise StorageError(f"could not create the run folder {run_dir}: {exc}",
                           disk_full=exc.errno == errno.ENOSPC) from exc


def named_run(path: Path) -> Path:
    """The run folder `--resume PATH` names: PATH itself, the folder a symlink leads to (`OUT/latest`), or the run
    a `latest` text file names (written where symlinks cannot be made)."""
    if path.is_symlink():
        return Path(os.path.realpath(path))
    try:
        if path.is_file() and path.stat().st_size <= _LATEST_TEXT_BYTES:
            name = path.read_text(encoding="utf-8", errors="replace").strip()
            if name and name == Path(name).name and (path.parent / name).is_dir():
                return path.parent / name
    except OSError:
        pass   # not readable: refused by the caller as not a run folder
    return path


def point_latest(run_dir: Path) -> None:
    """Make `<out>/latest` name this run: a relative symlink, or a text file holding the run id.

    Left as it is when it already names the run (a resumed run, `--resume OUT/latest`)."""
    latest = run_dir.parent / "latest"
    if os.path.realpath(named_run(latest)) == os.path.realpath(run_dir):
        return
    tmp = run_dir.parent / f".latest-{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        os.symlink(run_dir.name, tmp)
        os.replace(tmp, latest)
    except OSError:
        with contextlib.suppress(OSError):   # a convenience: never what stops a run (a full disk does that)
            tmp.unlink(missing_ok=True)
            if latest.is_symlink() or latest.is_file():
                latest.unlink()
            if not latest.exists():
                latest.write_text(run_dir.name + "\n")
