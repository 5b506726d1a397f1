"""A line at least every few seconds while a long step runs, so a user never watches a silent terminal.

`make run` promises never to be silent for 15 s: installing, starting the model servers, checking goldens in the
sandbox, grading the judges' examples and the run itself each take longer than that on a loaded machine, and
each says how far it is through one `Heartbeat` (engine/local/install.py, which runs before the engine is
installed, keeps its own).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["HEARTBEAT_S", "Heartbeat"]

# The longest silence a heartbeat allows: a step's own start (imports, loading) comes before its heartbeat starts,
# and took 2-4 s on a loaded machine, so 8 s keeps `make run` under 15 s of silence (bench/README.md).
HEARTBEAT_S = 8.0


class Heartbeat:
    """Calls `say(seconds since start)` from a thread of its own whenever nothing was said for `every_s`, until
    stopped; `said()` tells it a line just went out another way. Use as a context manager around the long step.

    Args:
        say: Prints one line (it runs on the heartbeat's thread).
        every_s: The longest silence.
    """

    def __init__(self, say: Callable[[float], None], every_s: float = HEARTBEAT_S) -> None:
        self._say = say
        self.every_s = every_s
        self._began = self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def said(self) -> None:
        """A line just went out: the next heartbeat is `every_s` from now."""
        self._last = time.monotonic()

    def start(self) -> Heartbeat:
        """Start the thread (once)."""
        if self._thread is None:
            self._began = self._last = time.monotonic()
            self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread; nothing is said afterwards."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.every_s / 2)):
            now = time.monotonic()
            if now - self._last >= self.every_s:
                self._last = now
                self._say(now - self._began)

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()
