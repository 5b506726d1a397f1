"""The CLI's settings of CPython's cyclic garbage collector: fewer collections while a command runs, none at exit.

Loading a suite and running calls make many small objects and few cycles worth collecting, so CPython's
default young-generation threshold (700) collected far more often than it freed anything. Reference counting
still frees rows as before and cycles are still collected, only less often. Library code never touches the
collector.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["YOUNG_THRESHOLD", "freeze_for_exit", "tuned_gc"]

#: Young-generation threshold inside `tuned_gc` (CPython's default is 700).
YOUNG_THRESHOLD = 10_000


@contextlib.contextmanager
def tuned_gc(*, collect: bool = True) -> Iterator[None]:
    """Fewer, cheaper collections for the length of one command; the previous settings come back after.

    Args:
        collect: False for a command that only reads files and exits (`validate`, `list`): the collector is
            off while it runs, since loading a suite makes no cycles worth collecting and the collector's
            full passes over the growing heap are a large part of the load.
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

    Called by the CLI once its command is over. Finalisation collects the oldest generation as it clears the
    modules, walking every object a command leaves (the imports, the suite, what the command built). What it
    gives up: a reference cycle still alive at exit is not collected, so its objects' finalizers do not run;
    CPython never promises they run at exit, `atexit` handlers and `weakref.finalize` callbacks still run, and
    reference counting still frees every object outside a cycle as the modules are cleared.
    """
    gc.freeze()
