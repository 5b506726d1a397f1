"""Where each value of a loaded YAML document starts: the position tree the loader records.

`engine.base.yaml` builds it and exports `Positions`; the schema checks and hints ask it for a path's place.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from engine.base.diagnostic import Diagnostic

__all__ = ["START", "Entry", "Path_", "Positions", "at"]

Path_ = tuple[Any, ...]


class _Mark(NamedTuple):
    """Where something starts, 0-based, as the parser's marks say it (`line`, `column`)."""

    line: int
    column: int


# One recorded value: (its key's mark or None, its own mark, the entries inside it or None for a scalar: key ->
# entry for a mapping, a list of entries for a list). Positions are a tree of these, one per built value. The
# marks are the parser's own (anything with 0-based `line` and `column`), turned into 1-based (line, col) only
# when a position is asked for, so a load makes no tuple per value.
Entry = tuple[Any, Any, "dict[str, Entry] | list[Entry] | None"]
START = _Mark(0, 0)


def at(mark: Any) -> tuple[int, int]:
    """A mark's 1-based (line, column)."""
    return (mark.line + 1, mark.column + 1)


class Positions:
    """Where each value (and each mapping key) starts in the file, 1-based, by path.

    Kept as a tree that follows the document (a mapping's entries by key, a list's by index), so the builder
    makes no path tuple per value and hashes none; `values` and `keys` give the path-keyed view when asked.

    Args:
        root: The document's entry, or None when nothing was built (then every path is at 1:1).
        raw: path -> the source text of a plain scalar that became a number/bool/null (for hints).
        count: How many values were built (the document's size in YAML nodes).
    """

    def __init__(self, root: Entry | None = None, raw: dict[Path_, str] | None = None, count: int = 0) -> None:
        self._root = root
        self.raw: dict[Path_, str] = raw if raw is not None else {}
        self.count = count

    def of(self, path: Path_, *, key: bool = False) -> tuple[int, int]:
        """The position of `path` (its key when `key` and there is one), else of its nearest ancestor."""
        entry = self._root
        if entry is None:
            return (1, 1)
        for step in path:
            inner = entry[2]
            if inner is None:
                return at(entry[1])
            if isinstance(inner, dict):
                found = inner.get(step) if isinstance(step, str) else None
            else:
                found = inner[step] if isinstance(step, int) and 0 <= step < len(inner) else None
            if found is None:
                return at(entry[1])
            entry = found
        if key and entry[0] is not None:
            return at(entry[0])
        return at(entry[1])

    def diagnostics(self, file: str, said: Iterable[tuple[Path_, bool, str]]) -> list[Diagnostic]:
        """Each (path, at its key rather than its value, message) as a diagnostic at its place in `file`: one per
        place and message, in file order (how the schema checks of suites, models and harnesses report)."""
        seen: set[tuple[int, int, str]] = set()
        out: list[Diagnostic] = []
        for path, on_key, message in said:
            line, col = self.of(path, key=on_key)
            if (line, col, message) not in seen:
                seen.add((line, col, message))
                out.append(Diagnostic(file, line, col, message))
        out.sort(key=lambda d: (d.line, d.col))
        return out

    @property
    def values(self) -> dict[Path_, tuple[int, int]]:
        """path -> (line, col) of the value at that path (built from the tree when asked)."""
        return {path: at(entry[1]) for path, entry in self._walk()}

    @property
    def keys(self) -> dict[Path_, tuple[int, int]]:
        """path -> (line, col) of the mapping key whose value is at that path (built from the tree when asked)."""
        return {path: at(entry[0]) for path, entry in self._walk() if entry[0] is not None}

    def _walk(self) -> Iterator[tuple[Path_, Entry]]:
        stack: list[tuple[Path_, Entry]] = [((), self._root)] if self._root is not None else []
        while stack:
            path, entry = stack.pop()
            yield path, entry
            inner = entry[2]
            if isinstance(inner, dict):
                stack.extend((path + (k,), e) for k, e in inner.items())
            elif inner is not None:
                stack.extend((path + (i,), e) for i, e in enumerate(inner))
