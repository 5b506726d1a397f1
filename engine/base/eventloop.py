"""The event loop a command's calls run on: uvloop's where it is installed, asyncio's otherwise.

uvloop (libuv, transports in C) takes a share of the per-call cost of aiohttp's request path: the
socket reads and writes, the callbacks and timers every call schedules (bench/README.md, "Issue #22",
paired rounds with and without it). Nothing in the engine depends on which loop runs: both implement
the same asyncio API (signal handlers, `call_at` timers, `to_thread`, subprocesses).
`ENGINE_EVENT_LOOP=asyncio` chooses asyncio's own loop (to rule uvloop out when something misbehaves).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["ENV", "loop_factory", "run"]

ENV = "ENGINE_EVENT_LOOP"
T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's `new_event_loop` when it is installed and not turned off by `$ENGINE_EVENT_LOOP`; else None."""
    if os.environ.get(ENV, "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:   # not installed (Windows has none): asyncio's loop
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)` on the loop `loop_factory` chooses."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(coro)
