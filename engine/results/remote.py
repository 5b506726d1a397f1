"""Results on any filesystem: `--out s3://bucket/prefix` (or gs://, file://...) through `pyarrow.fs`.

Why `pyarrow.fs` and not fsspec: pyarrow is already a dependency and ships S3, GCS, HDFS and local
filesystems in its wheels, so remote results need no extra package (fsspec would need s3fs, aiobotocore and
a pinned botocore, heavy and often in conflict); its S3 client is the one the Parquet reader uses anyway.

How a run writes to a URL (the journal is never remote; SQLite needs a local disk):

    staging   <cache>/staging/<sha256(URL)[:16]>/<run-id>/   journal, lock, parts, manifest
    remote    URL/<run-id>/part-*.parquet, then URL/<run-id>/_manifest.json   (shards: URL/<run-id>/shard-I-of-N/)

`<cache>` is `$ENGINE_REMOTE_CACHE` when set, else `$XDG_CACHE_HOME/llm-eval-engine` (`~/.cache/...`). The run
runs in its staging folder exactly as a local run; when the session ends (complete, stopped or failed) its parts
are uploaded, each manifest last, so a remote manifest means its parts are there. The staging folder of a
complete run is deleted once everything is uploaded; a run that stopped keeps it, and `--resume URL/<run-id>` continues
from it, or, on a machine without it, downloads the parts and manifest and rebuilds the journal from them
(the crash recovery of `engine.results.folder`).

Readers (`engine analyze`, `report`, `rescore`, `engine.analysis.load`) take a URL run folder: its Parquet
parts and manifests are copied to `<cache>/read/<sha256(URL)[:16]>/` and read from there.

Credentials come from the filesystem's own environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_ENDPOINT_URL, AWS_DEFAULT_REGION for S3; GOOGLE_APPLICATION_CREDENTIALS for GCS). A URL that carries
them (`?access_key=...`, `user:pass@`) is refused: the URL is stored in the journal and manifest.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from engine.errors import StorageError, UsageError

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/+(.*)$")
_SECRET_PARAMS = {"access_key", "secret_key", "session_token", "password", "token"}
# What a run folder keeps remotely: parts and manifests; never the journal, lock or server logs.
_KEPT = re.compile(r"(^|/)(part-[^/]*\.parquet|_manifest\.json|_ray\.json)$")


def is_url(location: str | os.PathLike[str] | None) -> bool:
    """Whether `location` names a filesystem URL (`s3://...`; also as a Path mangled it, `s3:/...`)."""
    return location is not None and _URL.match(str(location)) is not None


def normalize(location: str | os.PathLike[str]) -> str:
    """The URL in its canonical form (`pathlib.Path` turns `s3://b/p` into `s3:/b/p`; this undoes it).

    Raises:
        UsageError: The URL carries credentials.
    """
    match = _URL.match(str(location))
    if match is None:
        raise UsageError(f"{location}: not a URL (expected s3://bucket/prefix, gs://bucket/prefix, file:///path)")
    scheme, rest = match[1].lower(), match[2].rstrip("/")
    url = f"file:///{rest}" if scheme == "file" else f"{scheme}://{rest}"
    parts = urlsplit(url)
    if "@" in parts.netloc or {k.lower() for k, _ in parse_qsl(parts.query)} & _SECRET_PARAMS:
        raise UsageError(f"{scheme}:// URL with credentials in it: they would be stored in the run's journal and "
                         f"manifest; give them in the environment instead (AWS_ACCESS_KEY_ID, "
                         f"AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for S3)")
    return url


def join(url: str, *names: str) -> str:
    """`url/name/...`, keeping a query string (`?endpoint_override=...`) at the end."""
    base, _, query = url.partition("?")
    return "/".join([base.rstrip("/"), *names]) + (f"?{query}" if query else "")


def _filesystem(url: str) -> tuple[Any, str]:
    import pyarrow as pa
    import pyarrow.fs as pafs

    try:
        return pafs.FileSystem.from_uri(url)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise UsageError(f"{_shown(url)}: {exc}") from exc


def _shown(url: str) -> str:
    """The URL for messages: without a query string (where endpoint options live)."""
    return url.partition("?")[0]


def _cache_root() -> Path:
    if os.environ.get("ENGINE_REMOTE_CACHE"):
        return Path(os.environ["ENGINE_REMOTE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-eval-engine"


def _key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def staging_dir(out_url: str) -> Path:
    """The local folder runs with `--out out_url` run in (see the module docstring)."""
    return _cache_root() / "staging" / _key(out_url)


def upload_run(local_run: Path, run_url: str) -> int:
    """Copy a run folder's parts (shard folders included), then its manifests, to `run_url`; return files sent.

    A part already there with the same size is not sent again (parts are never rewritten in place).

    Raises:
        StorageError: A write failed (the staging folder keeps everything; upload again by resuming).
    """
    import pyarrow as pa
    import pyarrow.fs as pafs

    fs, root = _filesystem(run_url)
    files = sorted(p.relative_to(local_run).as_posix() for p in local_run.rglob("*")
                   if p.is_file() and _KEPT.search(p.relative_to(local_run).as_posix()))
    ordered = [f for f in files if f.endswith(".parquet")] + [f for f in files if not f.endswith(".parquet")]
    sent = 0
    try:
        existing = {info.path: info.size for info in fs.get_file_info(pafs.FileSelector(root, recursive=True,
                                                                                      allow_not_found=True))}
        for name in ordered:
            local, target = local_run / name, f"{root}/{name}"
            size = local.stat().st_size
            if name.endswith(".parquet") and existing.get(target) == size:
                continue
            fs.create_dir(target.rpartition("/")[0], recursive=True)
            with local.open("rb") as source, fs.open_output_stream(target) as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
            sent += 1
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"could not upload {local_run} to {_shown(run_url)}: {exc}") from exc
    return sent


def holds_run(run_url: str) -> bool:
    """Whether `run_url` already holds a part or a manifest."""
    import pyarrow.fs as pafs

    fs, root = _filesystem(run_url)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise StorageError(f"could not list {_shown(run_url)}: {exc}") from exc
    return any(_KEPT.search(info.path) for info in infos)


def download_run(run_url: str, local: Path) -> int:
    """Copy a remote run folder's parts and manifests into `local`; return how many files.

    Raises:
        UsageError: Nothing of a run is there.
        StorageError: A read failed.
    """
    import pyarrow as pa
    import pyarrow.fs as pafs

    fs, root = _filesystem(run_url)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        names = [info.path[len(root):].lstrip("/") for info in infos if info.type == pafs.FileType.File]
        names = [n for n in names if _KEPT.search(n)]
        if not names:
            raise UsageError(f"{_shown(run_url)}: no run there (no part-*.parquet or _manifest.json)")
        for name in names:
            target = local / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists() and target.stat().st_size == fs.get_file_info(f"{root}/{name}").size:
                continue
            tmp = target.with_name(f".{target.name}.download")
            with fs.open_input_stream(f"{root}/{name}") as source, tmp.open("wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
            os.replace(tmp, target)
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"could not read {_shown(run_url)}: {exc}") from exc
    return len(names)


def localize(location: str | os.PathLike[str]) -> Path:
    """A local path to read `location` from: itself, or for a URL a local copy of its parts and manifests."""
    if not is_url(location):
        return Path(location)
    url = normalize(location)
    local = _cache_root() / "read" / _key(url)
    download_run(url, local)
    return local


def remove_staging(local_run: Path) -> None:
    """Delete a run's staging folder once everything in it is remote (and its parent when empty)."""
    shutil.rmtree(local_run, ignore_errors=True)
    for parent in (local_run.parent, local_run.parent.parent):
        try:
            parent.rmdir()
        except OSError:
            break
