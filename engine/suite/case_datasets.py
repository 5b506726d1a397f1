"""Case rows from a Hugging Face dataset: `cases_from: {dataset: owner/name, split: test, config: ..., revision: ...}`.

Needs the optional extra (`pip install '.[datasets]'`); the engine imports `datasets` only here, only when a
suite names a dataset. A `dataset:` that is a folder (relative to the suite, or absolute) is read with
`datasets.load_from_disk` (what `Dataset.save_to_disk` wrote); any other value is a Hub name, loaded with
`datasets.load_dataset`, which answers from the local cache and, with `HF_DATASETS_OFFLINE=1`, never touches
the network. Rows are read from the memory-mapped Arrow files one at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from engine.suite.case_readers import RawRow, Sink

__all__ = ["read_dataset"]

_INSTALL = "pip install '.[datasets]'"


def read_dataset(name: str, options: Mapping[str, Any], suite_dir: Path, sink: Sink) -> Iterator[RawRow]:
    """Stream the rows of one split of a dataset.

    Args:
        name: A folder written by `save_to_disk`, or a Hub dataset name (owner/name).
        options: `split` (default: `test` when there is one, else the only split), `config`, `revision`.
        suite_dir: Where a relative folder is looked for.
        sink: Where problems go (the dataset name is the "file" of its messages).
    """
    try:
        import datasets
    except ImportError:
        sink.error(0, 0, f"reading cases from a dataset needs the Hugging Face `datasets` package: {_INSTALL}")
        return
    folder = Path(name) if Path(name).is_absolute() else suite_dir / name
    try:
        if folder.is_dir():
            loaded: Any = datasets.load_from_disk(str(folder))
        else:
            loaded = datasets.load_dataset(name, options.get("config"), split=options.get("split"),
                                           revision=options.get("revision"))
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds (not found, offline, bad config)
        offline = (" (offline: only the local cache is read)"
                   if getattr(datasets.config, "HF_HUB_OFFLINE", False) else "")
        sink.error(0, 0, f"cannot load this dataset{offline}: {type(exc).__name__}: {exc}; give a Hub name that "
                         f"is in the local cache, or a folder written by Dataset.save_to_disk (tried {folder} "
                         "as a folder)")
        return
    table = _split(loaded, options.get("split"), sink)
    if table is None:
        return
    sink.positions = {column: i + 1 for i, column in enumerate(table.column_names)}
    if len(table) == 0:
        sink.error(0, 0, "this split has no rows")
        return
    for number, values in enumerate(table, 1):
        yield RawRow(dict(values), 0, number)


def _split(loaded: Any, split: str | None, sink: Sink) -> Any:
    """The chosen split of a DatasetDict (a plain Dataset is its own one split), or None (reported)."""
    if not hasattr(loaded, "keys"):
        return loaded
    names = list(loaded.keys())
    if split is None:
        if "test" in names:
            return loaded["test"]
        if len(names) == 1:
            return loaded[names[0]]
        sink.error(0, 0, f"this dataset has the splits {', '.join(names)}; choose one with `split:`")
        return None
    if split not in names:
        sink.error(0, 0, f"this dataset has no split '{split}'; its splits are: {', '.join(names)}")
        return None
    return loaded[split]
