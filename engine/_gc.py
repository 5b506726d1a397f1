"""One setting of CPython's cyclic garbage collector for one CLI command, entered only by the CLI.

Loading a suite builds millions of small objects and no cycles worth collecting, and a run allocates a few
dozen containers per call; with CPython's default young-generation threshold (700) the collector ran a
young collection every ~50 calls and full ones that walked every loaded test. Inside `tuned_gc()` the
objects alive at the start (the imports) are left out of collections, and young collections run every
10,000 allocations. Nothing leaks: reference counting
frees rows as before, and cycles are still collected, only less often. Library code never touches the
collector; bench/README.md has the figures that justify this.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

__all__ = ["YOUNG_THRESHOLD", "freeze_for_exit", "prefer_system_allocator", "tuned_gc"]

#: Young-generation threshold inside `tuned_gc` (CPython's default is 700).
YOUNG_THRESHOLD = 10_000


@contextlib.contextmanager
def tuned_gc(*, collect: bool = True) -> Iterator[None]:
    """Fewer, cheaper collections for the length of one command; the previous settings come back after.

    Args:
        collect: False for a command that only reads files and exits (`validate`, `list`): the collector is
            off while it runs, since loading a suite makes no cycles worth collecting and the collector's
            full passes over the growing heap cost a fifth of the load (bench/README.md).
    """
    saved = gc.get_threshold()
    was_enabled = gc.isenabled()
    gc.freeze()
    gc.set_threshold(max(saved[0], YOUNG_THRESHOLD), *saved[1:])
    if not collect:
        gc.disable()
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        gc.unfreeze()
        if was_enabled:
            gc.enable()



def freeze_for_exit() -> None:
    """Leave every object alive now out of the collections the interpreter makes as it exits.

    Called by the CLI once its command is over. Finalisation collects the oldest generation as it clears
    the modules (`_PyGC_CollectNoFail`), walking every object a command leaves: the imports (pyarrow,
    numpy, the HTTP client, the suite) and what the command built. After `engine run` of 2,000 calls that was
    0.13-0.15 s of CPU, 0.015 s with this: whole process 0.95x (10 paired rounds, bench/README.md "Issue
    #22 item 2, third pass"). What it gives up: a reference cycle still alive at exit is not collected,
    so its objects' finalizers do not run; CPython never promises they run at exit, `atexit` handlers and
    `weakref.finalize` callbacks still run, and reference counting still frees every object outside a
    cycle as the modules are cleared. The CLI closes its own files, journal and caches.
    """
    gc.freeze()


def prefer_system_allocator() -> None:
    """Arrow's default memory pool = the C library's malloc in this process (unless the user chose one).

    Arrow's default (mimalloc) maps fresh memory the first time anything uses it - the Parquet writer of a
    results part does, even with another pool passed - and the kernel backs it with zeroed huge pages:
    +10 MB of peak RSS for `engine run` of 2,000 calls (141 -> 131 MB, bench/README.md "Issue #22"). It
    is read when Arrow first needs its default pool, so this is called by the CLI before any command runs
    (and is inherited by the processes a command starts). Library code never calls it.
    """
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
