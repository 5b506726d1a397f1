"""Per-call deadlines that cost almost nothing when calls finish in time (the usual case).

`asyncio.timeout()` schedules a timer when a call starts and cancels it when the call ends: a
Timeout object, a TimerHandle, a heap push and, later, a heap clean-up per call - about 8 us of CPU
per call in `bench/bench_run.py`, more than scoring. Here each task (a runner worker makes its calls
one after another) keeps one timer that is re-armed lazily: a call only records its deadline; when
the timer fires it either finds no call running (and stops), a later deadline (and re-arms for it),
or an expired call, which it cancels - exactly as `asyncio.timeout` does, and the caller turns the
cancellation into a timeout the same way (`Task.uncancel`, so a cancellation from elsewhere, such as
a second Ctrl-C, still propagates).
"""

from __future__ import annotations

import asyncio


class TaskDeadline:
    """The deadline of the call a task is making, on one lazily re-armed timer.

    Args:
        task: The task making the calls.
    """

    __slots__ = ("_active", "_cancelling", "_deadline", "_handle", "_loop", "_task", "expired")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self._task = task
        self._loop = task.get_loop()
        self._handle: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._active = False
        self._cancelling = 0
        self.expired = False

    def begin(self, delay_s: float) -> None:
        """A call starts: it must end within `delay_s` seconds from now.

        Args:
            delay_s: The call's budget in seconds.
        """
        deadline = self._loop.time() + delay_s
        self._deadline = deadline
        self._active = True
        self.expired = False
        self._cancelling = self._task.cancelling()
        handle = self._handle
        if handle is None or handle.when() > deadline:
            if handle is not None:
                handle.cancel()
            self._handle = self._loop.call_at(deadline, self._fire)

    def end(self) -> None:
        """The call ended (in time or not); the timer, if it fires, finds nothing to do."""
        self._active = False

    def cancelled_by_deadline(self) -> bool:
        """On CancelledError: True when this deadline cancelled the task and nobody else did.

        Undoes this deadline's cancellation request, as `asyncio.timeout` does on its way out.
        """
        if not self.expired:
            return False
        self.expired = False
        return self._task.uncancel() <= self._cancelling

    def close(self) -> None:
        """The task is done: drop the timer."""
        self._active = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        if not self._active:
            return
        if self._loop.time() < self._deadline:   # a later call's deadline: wait for that one
            self._handle = self._loop.call_at(self._deadline, self._fire)
            return
        self._active = False
        self.expired = True
        self._task.cancel()


class Deadlines:
    """One `TaskDeadline` per task that makes calls, dropped when the task ends."""

    def __init__(self) -> None:
        self._by_task: dict[asyncio.Task[object], TaskDeadline] = {}

    def current(self) -> TaskDeadline:
        """The deadline of the running task.

        Raises:
            RuntimeError: outside a task (as `asyncio.timeout` does).
        """
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a call deadline must be used inside a task")
        deadline = self._by_task.get(task)
        if deadline is None:
            deadline = self._by_task[task] = TaskDeadline(task)
            task.add_done_callback(self._forget)
        return deadline

    def _forget(self, task: asyncio.Task[object]) -> None:
        deadline = self._by_task.pop(task, None)
        if deadline is not None:
            deadline.close()
