"""pyarrow without numpy, for an `engine run` process that never hands numpy data to Arrow.

pyarrow imports numpy when it can (`pyarrow/lib.pyx`: `try: import numpy`) and runs without it when it
cannot, which pyarrow supports. A run uses Arrow for one thing, writing results parts from JSON text
(engine/results/writer.py), and needs no numpy for it. numpy's import is 11 MB of peak RSS and ~0.2 s of
CPU in a whole `engine run` of 2,000 calls: peak 108.8 -> 99.3 MB, CPU 0.1-0.2 s less (3-4 whole-process
pairs; bench/README.md, "Issue #22 item 2, fourth pass").

What it costs, and the guard: a pyarrow loaded without numpy keeps `np = None` for the life of the
process, and its pandas conversions (`Table.to_pandas`) then crash the interpreter (SIGSEGV) instead of
raising; the other numpy paths raise (`to_numpy`: ImportError, `pa.array(ndarray)`: ArrowInvalid). So
once it is done, importing pandas in the process raises an ImportError that says why. pyarrow's own
optional pandas checks (`Table.from_pylist` asks whether pandas is there) take that as "no pandas".

It is done only where it is safe to decide: by the run session once the suites are loaded (a
Hugging Face `cases_from` dataset imports numpy and pandas while loading; numpy in the process turns this
off), and only if numpy, pandas and pyarrow are all still unimported. Commands that use pandas
(`engine analyze`) never call it; neither does a process that imported them before (the tests' fork
server, a Ray worker, `--until-decided`, which uses numpy for its statistics).
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["load_pyarrow_without_numpy"]

# What a run imports of Arrow (the writer's JSON reader and Parquet writer), all loaded while numpy is hidden:
# `pyarrow.parquet` would import numpy itself if it could.
_ARROW_MODULES = ("pyarrow", "pyarrow.json", "pyarrow.parquet")

_PANDAS_REFUSED = (
    "pandas cannot be used in this process: `engine run` loaded pyarrow without numpy (engine/_arrow.py), and "
    "pyarrow's pandas conversions would crash it. Code a run needs must not import pandas; analysis runs in "
    "its own command (engine analyze)."
)


class _Refuse(importlib.abc.MetaPathFinder):
    """A finder that makes importing the named top-level packages raise ImportError."""

    def __init__(self, names: frozenset[str], why: str) -> None:
        self.names = names
        self.why = why

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ImportError(self.why, name=fullname)
        return None


def load_pyarrow_without_numpy() -> bool:
    """Import pyarrow with numpy hidden, then refuse pandas, if none of the three is imported yet.

    Returns:
        True if pyarrow is now loaded without numpy; False if the process had imported numpy, pandas or
        pyarrow already, in which case nothing changes.
    """
    if any(name in sys.modules for name in ("numpy", "pandas", "pyarrow")):
        return False
    hidden = _Refuse(frozenset({"numpy"}), "numpy is hidden while pyarrow loads (engine/_arrow.py)")
    sys.meta_path.insert(0, hidden)
    try:
        for name in _ARROW_MODULES:
            importlib.import_module(name)
    finally:
        sys.meta_path.remove(hidden)
    sys.meta_path.insert(0, _Refuse(frozenset({"pandas"}), _PANDAS_REFUSED))
    return True

