"""Stopping sandboxed programs at once: a run being cancelled ends its programs now, not at their deadlines.

Whatever waits on a sandboxed program (a one-shot run's supervision, a workspace session's command) watches a
wake-up pipe it holds while it waits (`interruptible`); `interrupt` writes to the pipes of a group.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_live_lock = threading.Lock()
_live: dict[int, tuple[str | None, int]] = {}    # a program being waited on -> (its group, its wake-up pipe)
_serial = iter(range(1, 2**63))


def interrupt(group: str | None = None) -> None:
    """Stop every supervised program of `group` (every one when None) now; each ends as `interrupted`."""
    with _live_lock:
        wakes = [fd for g, fd in _live.values() if group is None or g == group]
        for fd in wakes:
            try:
                os.write(fd, b"x")
            except OSError:   # its pipe is full (already woken) or just closed: it is stopping anyway
                pass


@contextmanager
def interruptible(group: str | None) -> Iterator[int]:
    """While inside, `interrupt(group)` makes the yielded fd readable (select on it beside the program's)."""
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    serial = next(_serial)
    with _live_lock:
        _live[serial] = (group, wake_write)
    try:
        yield wake_read
    finally:
        with _live_lock:
            _live.pop(serial, None)
        os.close(wake_read)
        os.close(wake_write)
