"""The committer: a thread that makes finished rows durable while the run's event loop goes on reading replies.

The loop hands each finished row over (`add`: a list append, nothing encoded or written there); the thread
encodes the rows into the journal, commits them every `interval_s` or as soon as `rows` wait, flushes a
Parquet part when enough committed rows wait for one, and tells the loop which rows are durable (`on_commit`,
run on the loop). No scorer runs here and the loop never waits for a disk: a row that finished is committed
whatever a check or a write is doing. A failed write (`StorageError`) is told the same way (`on_failure`) and
ends the thread; what was committed before stays. Other journal writes the run must have durable before it goes
on (a batch of calls recorded before it is sent to a provider) are made here too (`write`), so only this thread
writes to the journal.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.errors import StorageError

if TYPE_CHECKING:
    from engine.results.journal import Journal
    from engine.results.writer import ResultsWriter

__all__ = ["Committer"]


class Committer:
    """Commits handed rows from a thread of its own.

    Args:
        journal: The run's journal (only this thread writes to it until `close` returns).
        writer: The Parquet writer (parts flushed as committed rows accumulate).
        loop: The run's event loop, where `on_commit` and `on_failure` are called.
        on_commit: Called with the `note`s of the rows one commit made durable, in the order they came.
        on_failure: Called with the exception that stopped the writes (a `StorageError`, or a bug).
        interval_s: The longest a handed row waits to be committed.
        rows: Commit as soon as this many rows wait.
    """

    def __init__(self, journal: Journal, writer: ResultsWriter, loop: asyncio.AbstractEventLoop,
                 on_commit: Callable[[list[Any]], None], on_failure: Callable[[BaseException], None], *,
                 interval_s: float, rows: int) -> None:
        self._journal = journal
        self._writer = writer
        self._loop = loop
        self._on_commit = on_commit
        self._on_failure = on_failure
        self._interval = interval_s
        self._rows = rows
        self._ready = threading.Condition()
        self._pending: list[tuple[str, dict[str, Any], Any]] = []
        self._writes: list[tuple[Callable[[Journal], None], asyncio.Future[None]]] = []
        self._closing = False
        self.failed = False
        self._thread = threading.Thread(target=self._run, name="engine-committer", daemon=True)
        self._thread.start()

    def add(self, key: str, row: dict[str, Any], note: Any) -> None:
        """Hand over a finished row (not touched again by the caller); `note` comes back in `on_commit`."""
        with self._ready:
            self._pending.append((key, row, note))
            if len(self._pending) >= self._rows:
                self._ready.notify()

    async def write(self, change: Callable[[Journal], None]) -> None:
        """Make `change` to the journal in the thread, at once; return once it is durable.

        Raises:
            StorageError: The write failed, or an earlier one did (nothing more is written).
        """
        done: asyncio.Future[None] = self._loop.create_future()
        with self._ready:
            if self.failed or self._closing:
                raise StorageError("the journal takes no more writes: the run is ending or a write failed")
            self._writes.append((change, done))
            self._ready.notify()
        await done

    def close(self) -> None:
        """Commit what is left and end the thread (it returns once the last commit is made; its `on_commit` is
        then queued on the loop, to run at the loop's next turn)."""
        with self._ready:
            self._closing = True
            self._ready.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._ready:
                if not self._closing and len(self._pending) < self._rows and not self._writes:
                    self._ready.wait(self._interval)
                batch, self._pending = self._pending, []
                writes, self._writes = self._writes, []
                closing = self._closing
            if batch and not self._commit(batch):
                self._refuse(writes)
                return
            if writes and not self._apply(writes):
                return
            if closing:
                return

    def _commit(self, batch: list[tuple[str, dict[str, Any], Any]]) -> bool:
        try:
            for key, row, _ in batch:
                self._journal.add(key, row)
            self._journal.commit()
            self._writer.maybe_flush()
        except BaseException as exc:  # noqa: BLE001 - a full disk or a bug: the run is told and stops spending
            self.failed = True
            self._tell(self._on_failure, exc)
            return False
        self._tell(self._on_commit, [note for _, _, note in batch])
        return True

    def _apply(self, writes: list[tuple[Callable[[Journal], None], asyncio.Future[None]]]) -> bool:
        for index, (change, done) in enumerate(writes):
            try:
                change(self._journal)
            except BaseException as exc:  # noqa: BLE001 - told to the writer that waits, and to the run
                self.failed = True
                self._tell(self._on_failure, exc)   # queued first: the run knows before the writer's await raises
                self._settle(done, exc)
                self._refuse(writes[index + 1:])
                return False
            self._settle(done, None)
        return True

    def _refuse(self, writes: list[tuple[Callable[[Journal], None], asyncio.Future[None]]]) -> None:
        for _, done in writes:
            self._settle(done, StorageError("an earlier journal write failed; nothing more is written"))

    def _settle(self, done: asyncio.Future[None], exc: BaseException | None) -> None:
        def settle() -> None:
            if done.done():
                return
            if exc is None:
                done.set_result(None)
            else:
                done.set_exception(exc)
        try:
            self._loop.call_soon_threadsafe(settle)
        except RuntimeError:   # the loop is closed: nobody waits
            pass

    def _tell(self, callback: Callable[[Any], None], value: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, value)
        except RuntimeError:   # the loop is closed: the run is over, `close` has what it needs
            pass
