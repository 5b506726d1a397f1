"""How a model's batcher waits: between two polls of a batch, the poll plan's growing pause (`PollPlan`); before a
failed batch call is tried again, the wait the server asked for (a `retry-after`, Gemini's RetryInfo: read as the
live calls read them, `ClientError.retry_after_s`) up to the model's `rate_limit_deadline_s`, else the plan's
pause. Every wait ends early once the run stops waiting (the first Ctrl-C)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from engine.errors import ClientError

if TYPE_CHECKING:
    from engine.run.run_config import PollPlan

__all__ = ["Waits"]


class Waits:
    """One batcher's waits.

    Args:
        plan: The pause between polls.
        most_s: The longest wait a server's asking is honoured for (the model's `rate_limit_deadline_s`).
        sleep: Waits that many seconds (tests pass one that records them).
    """

    def __init__(self, plan: PollPlan, most_s: float, sleep: Callable[[float], Awaitable[None]]) -> None:
        self._plan = plan
        self._most_s = most_s
        self._sleep = sleep
        self.stopped = asyncio.Event()   # set: nothing more is waited for

    def pauses(self) -> Iterator[float]:
        """The plan's pauses, one per poll (or try), without end."""
        return self._plan.pauses()

    def after(self, error: ClientError, pause: float) -> float:
        """The pause before a failed batch call is tried again: the wait the server asked for, as a live call's
        retry honours it, up to `most_s`; else the plan's `pause`."""
        asked = error.retry_after_s
        return pause if asked is None or asked <= 0 else min(asked, self._most_s)

    async def pause(self, seconds: float) -> bool:
        """Wait `seconds`; False when the run stopped waiting meanwhile."""
        if self.stopped.is_set():
            return False
        sleeping = asyncio.ensure_future(self._sleep(seconds))
        stopped = asyncio.ensure_future(self.stopped.wait())
        try:
            await asyncio.wait((sleeping, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeping.cancel()
            stopped.cancel()
        return not self.stopped.is_set()
