"""What `engine view` serves, computed by engine.analysis: the runs under a folder, one run's analysis, a page of
its tests × models grid, one test's attempts, two runs' flips, and the human labels.

Every figure comes from the functions `engine analyze` calls (`summary.analyze`, or `large.grid_from_parquet` and
`summary.analyze_grid` past memory; `compare.diff`), computed once per run and kept beside it (engine.view.cache).
Only aggregates are held in memory: the grid has one row per test, the rows of a page are built for that page
alone, and a test's attempts or a text search are filtered scans of the Parquet files, so a run of millions of
rows opens without loading its rows.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.analysis.items import FALLBACK_LEFT_OUT
from engine.analysis.labels import KEY, append_labels, latest_labels, read_labels
from engine.analysis.summary import json_safe
from engine.errors import ResultsError
from engine.results.folder import MANIFEST, read_manifest
from engine.view import cache

if TYPE_CHECKING:
    import pyarrow.dataset as ds

    from engine.analysis.cells import Cells

# The grid's class filter: the statuses `per_test` classes a test by, and "disagree".
CLASSES = ("discriminating", "saturated", "floor", FALLBACK_LEFT_OUT, "uninformative", "disagree")
MAX_PAGE = 200
# The longest text of one field sent to the page; a model's answer can be any size.
MAX_TEXT = 200_000
MAX_SEARCH = 200
MAX_ATTEMPTS = 500


def find_runs(root: Path) -> dict[str, Path]:
    """Run folders under `root` (itself, when it is one), by their path relative to `root`.

    A run folder holds `_manifest.json` or `part-*.parquet`; a sharded run's shards are inside it and are not
    runs of their own. Symlinks (`latest`) are not followed, so no run is listed twice.

    Raises:
        ResultsError: `root` is not a folder, or holds no run.
    """
    root = Path(root)
    if not root.is_dir():
        raise ResultsError(f"{root}: not a folder; pass a run folder (results/<run>) or a folder of runs")
    runs: dict[str, Path] = {}
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        if MANIFEST in files or any(f.startswith("part-") and f.endswith(".parquet") for f in files):
            name = here.relative_to(root).as_posix()
            runs[root.resolve().name if name == "." else name] = here
            dirs.clear()
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
    if not runs:
        raise ResultsError(f"{root}: no run folder found (none holds _manifest.json or part-*.parquet); "
                           f"run `engine run SUITES --out {root}` first")
    return dict(sorted(runs.items()))


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[:MAX_TEXT] + f"… [{len(value) - MAX_TEXT} more characters not shown]"
    if isinstance(value, list):
        return [_clip(v) for v in value]
    if isinstance(value, dict):
        return {k: _clip(v) for k, v in value.items()}
    return value


@dataclass
class Run:
    """One run folder and the snapshot of its analysis (engine.view.cache: computed once, kept beside the run,
    recomputed when its Parquet files change).

    Args:
        name: Its path relative to the folder `engine view` was given.
        folder: The run folder.
    """

    name: str
    folder: Path
    _signature: cache.Signature = field(default_factory=list)
    _snapshot: cache.Snapshot | None = None
    _dataset: ds.Dataset | None = None
    _search: dict[str, set[tuple[str, str, int]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def files(self) -> list[Path]:
        """The run's Parquet files (its shards' too)."""
        from engine.analysis.load import find_parquet_files

        return find_parquet_files(self.folder)

    def snapshot(self) -> cache.Snapshot:
        """The snapshot for the run's files as they are now: held, read from beside the run, or computed."""
        files = self.files()
        signature = cache.signature(self.folder, files)
        with self._lock:
            if self._snapshot is not None and signature == self._signature:
                return self._snapshot
            snapshot = cache.current(self.folder, files, signature)
            self._snapshot, self._signature = snapshot, signature
            self._dataset, self._search = None, {}
            return snapshot

    def dataset(self) -> ds.Dataset:
        """The run's Parquet files as one dataset, kept while they are unchanged (each file's footer is read once
        for all the scans: a test's attempts, a text search)."""
        from engine.analysis.load import open_dataset

        self.snapshot()
        with self._lock:
            if self._dataset is None:
                self._dataset = open_dataset(self.files())
            return self._dataset

    def grid_cells(self) -> Cells:
        """The run's tests × models grid (what `compare.diff` pairs)."""
        return self.snapshot().grid_cells()

    def manifest(self) -> dict[str, Any]:
        """The run's `_manifest.json` (an interrupted run has none: {})."""
        return read_manifest(self.folder) or {}

    def overview(self) -> dict[str, Any]:
        """One line of the runs page: date, models with pass rates, tests, cost, errors (from the snapshot's
        summary alone when the run has one beside it: the runs page does not load every run's tables)."""
        signature = cache.signature(self.folder, self.files())
        # Read without the lock (a snapshot being read or computed does not hold the runs page up): the snapshot
        # is assigned before its signature, so a pair read in between never matches.
        held, held_signature = self._snapshot, self._signature
        figures = (held.overview if held is not None and held_signature == signature else None) \
            or cache.read_overview(self.folder, signature) or self.snapshot().overview
        manifest = self.manifest()
        return {"run": self.name, "started_at": json_safe(manifest.get("started_at")),
                "complete": json_safe(manifest.get("complete")), **figures}

    def summary(self) -> dict[str, Any]:
        """The models with their intervals, the paired comparisons, notes, and the grid's filter choices."""
        snapshot = self.snapshot()
        manifest = self.manifest()
        return json_safe({
            "run": self.name, "manifest": {k: manifest.get(k) for k in ("run_id", "started_at", "ended_at",
                                                                        "complete", "engine_version")},
            **{k: snapshot.summary.get(k) for k in ("interval", "notes", "models", "comparisons", "agents", "suites",
                                                    "tags")},
            "classes": list(CLASSES),
        })

    def grid(self, *, suite: str | None = None, tag: str | None = None, klass: str | None = None,
             failed: bool = False, errors: bool = False, query: str | None = None, offset: int = 0,
             limit: int = 50) -> dict[str, Any]:
        """One page of the tests × models grid after the filters, models in ranking order.

        Args:
            suite, tag: Keep the tests of this suite / with this tag.
            klass: One of CLASSES: a test status of `per_test`, or "disagree" (some model's attempts disagree).
            failed: Keep tests where some model's scored attempt failed.
            errors: Keep tests with an error row (a row recorded unscored, `eval: {none: true}`, is none).
            query: Keep tests whose prompt or answer holds this text (case-insensitive).
            offset, limit: The page (limit at most MAX_PAGE).
        """
        if klass and klass not in CLASSES:
            raise ValueError(f"class {klass!r}: use one of {', '.join(CLASSES)}")
        snapshot = self.snapshot()
        cells = snapshot.cells
        keep = np.ones(snapshot.tests.num_rows, dtype=bool)
        if suite:
            keep &= snapshot.column("suite") == suite
        if tag:
            keep &= _has_tag(snapshot, tag)
        if klass:
            keep &= snapshot.column("mixed_models") != "" if klass == "disagree" else \
                snapshot.column("status") == klass
        if failed:
            keep &= (cells["n_passed"] < cells["n_scored"]).any(axis=1)
        if errors:
            keep &= (cells["n_rows"] > cells["n_scored"] + cells["n_unscored"]).any(axis=1)
        if query:
            found = self.search(query)
            index = snapshot.derived("key index", lambda: _key_index(snapshot))
            hits = np.zeros(len(keep), dtype=bool)
            hits[[index[key] for key in found if key in index]] = True
            keep &= hits
        chosen = np.nonzero(keep)[0]
        limit = max(1, min(int(limit), MAX_PAGE))
        offset = max(0, int(offset))
        ranked = [m for m in snapshot.ranking if m in snapshot.models]
        order = [snapshot.models.index(m) for m in ranked]
        page = chosen[offset:offset + limit]
        shown = snapshot.tests.select(["suite", "test_id", "case_index", "tags", "status", "difficulty", "reason"])
        rows = []
        for i, t in zip(page, shown.take(page).to_pylist(), strict=True):
            rows.append({
                "suite": t["suite"], "test_id": t["test_id"], "case_index": int(t["case_index"]),
                "tags": list(t["tags"] or []), "status": t["status"], "difficulty": t["difficulty"],
                "reason": t["reason"],
                "cells": [{"passed": int(cells["n_passed"][i, j]), "scored": int(cells["n_scored"][i, j]),
                           "rows": int(cells["n_rows"][i, j]), "unscored": int(cells["n_unscored"][i, j]),
                           "score": float(cells["score"][i, j]) if cells["n_scored"][i, j] else None} for j in order],
            })
        return json_safe({"total": len(chosen), "offset": offset, "limit": limit, "models": ranked,
                          "rows": rows})

    def search(self, query: str) -> set[tuple[str, str, int]]:
        """The tests whose prompt or answer holds `query` (case-insensitive): a streaming scan of two columns."""
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        from engine.analysis.load import read_table

        query = query[:MAX_SEARCH]
        cached = self._search.get(query)
        if cached is not None:
            return cached
        where = (pc.match_substring(ds.field("prompt"), query, ignore_case=True)
                 | pc.match_substring(ds.field("answer"), query, ignore_case=True))
        table = read_table(self.dataset(), columns=["suite", "test_id", "case_index"], where=where)
        found = {(str(s), str(t), -1 if c is None else int(c)) for s, t, c in zip(
            table["suite"].to_pylist(), table["test_id"].to_pylist(), table["case_index"].to_pylist(), strict=True)}
        self._search[query] = found
        return found

    def attempts(self, suite: str, test_id: str, case_index: int) -> dict[str, Any]:
        """Every model's attempts at one test (case), with their labels, models in ranking order."""
        import pyarrow.dataset as ds

        from engine.analysis.load import read_table

        snapshot = self.snapshot()
        where = (ds.field("suite") == suite) & (ds.field("test_id") == test_id)
        where &= ds.field("case_index").is_null() if case_index < 0 else ds.field("case_index") == case_index
        table = read_table(self.dataset(), where=where)
        rows = table.slice(0, MAX_ATTEMPTS).to_pylist()
        rank = {m: i for i, m in enumerate(snapshot.ranking)}
        rows.sort(key=lambda r: (rank.get(r["model"], len(rank)), str(r["model"]), r.get("variant") or "",
                                 r.get("attempt") or 0))
        labels: dict[tuple[Any, ...], dict[str, Any]] = {}
        for label in latest_labels(read_labels(self.folder)):
            labels[tuple(label[k] for k in KEY)] = label
        index = snapshot.derived("key index", lambda: _key_index(snapshot)).get((suite, test_id, case_index))
        test = None
        if index is not None:
            test = snapshot.tests.slice(index, 1).to_pylist()[0]
            for name in [k for k in test if k.startswith("item_")]:
                del test[name]
        out = []
        for row in rows:
            row.pop("fallback", None)
            given = labels.get(tuple(row.get(k) for k in KEY))
            row["review"] = None if given is None else {k: given[k] for k in ("label", "note", "reviewer", "at")}
            out.append(_clip(row))
        return json_safe({
            "suite": suite, "test_id": test_id, "case_index": case_index, "total": table.num_rows,
            "shown": len(out), "test": test, "attempts": out,
        })

    def add_label(self, record: dict[str, Any]) -> int:
        """Append one label to the run's `_labels.parquet` (engine.analysis.labels)."""
        return append_labels(self.folder, [record])


def _has_tag(snapshot: cache.Snapshot, tag: str) -> np.ndarray:
    """Tests carrying `tag` (the tags column is a list per test)."""
    import pyarrow.compute as pc

    tags = snapshot.tests["tags"]
    flat = pc.list_flatten(tags).to_numpy(zero_copy_only=False)
    parents = pc.list_parent_indices(tags).to_numpy()
    out = np.zeros(snapshot.tests.num_rows, dtype=bool)
    out[parents[flat == tag]] = True
    return out


def _key_index(snapshot: cache.Snapshot) -> dict[tuple[str, str, int], int]:
    """Each test's row by its key (suite, test_id, case_index)."""
    return {(str(s), str(t), int(c)): i for i, (s, t, c) in enumerate(zip(
        snapshot.column("suite"), snapshot.column("test_id"), snapshot.column("case_index"), strict=True))}


class Store:
    """The runs under the folder `engine view` serves."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._runs: dict[str, Run] = {}
        self.refresh()

    def refresh(self) -> None:
        """Find the runs again (a run written since the server started appears)."""
        found = find_runs(self.root)
        self._runs = {name: self._runs.get(name) or Run(name, folder) for name, folder in found.items()}

    def names(self) -> list[str]:
        """Run names, newest first by name (run ids start with their UTC time)."""
        return sorted(self._runs, reverse=True)

    def run(self, name: str) -> Run:
        """A run by name (only names found under the root: a path of the client's choosing is never opened).

        Raises:
            KeyError: No such run.
        """
        if name not in self._runs:
            self.refresh()
        return self._runs[name]

    def warm(self) -> None:
        """Prepare the newest run while the browser opens the page: its snapshot read, or computed and written
        (a run that cannot be read is left for its page to report)."""
        names = self.names()
        if names:
            with contextlib.suppress(ResultsError, OSError, ValueError):
                self._runs[names[0]].snapshot()

    def runs(self) -> list[dict[str, Any]]:
        """The runs page: each run's overview (a run that cannot be read says why)."""
        self.refresh()
        out = []
        for name in self.names():
            try:
                out.append(self._runs[name].overview())
            except ResultsError as exc:
                out.append({"run": name, "error": str(exc)})
        return out

    def diff(self, a: str, b: str) -> dict[str, Any]:
        """Run `a` (the base) against run `b`: the tests whose verdict changed, and the verdict per model."""
        from engine.analysis.compare import diff

        result = diff(self.run(a).grid_cells(), self.run(b).grid_cells())
        return json_safe({"a": a, "b": b, "summary": result.summary.to_dict(orient="records"),
                          "flips": result.flips.to_dict(orient="records")})
