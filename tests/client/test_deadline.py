"""The lazily re-armed per-call deadline behaves as `asyncio.timeout` does."""

from __future__ import annotations

import asyncio

import pytest

from engine.client.deadline import Deadlines


async def _guarded(deadlines: Deadlines, budget_s: float, work_s: float) -> str:
    deadline = deadlines.current()
    try:
        deadline.begin(budget_s)
        try:
            await asyncio.sleep(work_s)
        finally:
            deadline.end()
    except asyncio.CancelledError:
        if not deadline.cancelled_by_deadline():
            raise
        return "timeout"
    return "done"


async def test_calls_in_time_finish_and_a_slow_one_times_out_on_the_same_task() -> None:
    deadlines = Deadlines()
    # the first call arms a timer far ahead; later, shorter budgets re-arm it earlier
    assert await _guarded(deadlines, 5.0, 0.0) == "done"
    assert await _guarded(deadlines, 0.05, 0.0) == "done"
    assert await _guarded(deadlines, 0.05, 1.0) == "timeout"
    assert await _guarded(deadlines, 0.2, 0.01) == "done"    # the task is usable again, not cancelled
    assert asyncio.current_task().cancelling() == 0


async def test_a_timer_armed_by_an_earlier_call_re_arms_for_the_later_deadline() -> None:
    deadlines = Deadlines()
    assert await _guarded(deadlines, 0.05, 0.0) == "done"     # timer due in 0.05 s
    assert await _guarded(deadlines, 0.3, 0.1) == "done"      # it fires mid-call, sees a later deadline
    assert await _guarded(deadlines, 0.05, 0.5) == "timeout"


async def test_a_cancellation_from_elsewhere_still_propagates() -> None:
    deadlines = Deadlines()
    task = asyncio.create_task(_guarded(deadlines, 5.0, 5.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_timer_is_dropped_with_its_task() -> None:
    deadlines = Deadlines()
    assert await asyncio.create_task(_guarded(deadlines, 60.0, 0.0)) == "done"
    await asyncio.sleep(0)
    assert deadlines._by_task == {}
