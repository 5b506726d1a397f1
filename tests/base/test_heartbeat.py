"""A Heartbeat speaks after every_s of silence, never sooner than every_s after another line, and not after it stops."""

from __future__ import annotations

import itertools
import time

from engine.base.heartbeat import Heartbeat


def _wait_for(condition, limit_s: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_it_speaks_through_a_silence_with_the_seconds_since_it_started() -> None:
    heard: list[float] = []
    with Heartbeat(heard.append, every_s=0.05):
        assert _wait_for(lambda: len(heard) >= 3)
    count = len(heard)
    assert heard == sorted(heard) and heard[0] >= 0.05
    assert all(later - earlier >= 0.04 for earlier, later in itertools.pairwise(heard))   # at most every every_s
    time.sleep(0.2)
    assert len(heard) == count                                 # stopped: silent


def test_a_line_said_another_way_postpones_it() -> None:
    """Whatever the machine's load: every heartbeat comes at least every_s after the last line said another way."""
    heard: list[float] = []
    said: list[float] = []
    beat = Heartbeat(lambda _: heard.append(time.monotonic()), every_s=0.3).start()
    try:
        for _ in range(20):
            beat.said()
            said.append(time.monotonic())                     # just after: a beat before it came before said()
            time.sleep(0.05)
        _wait_for(lambda: bool(heard))                         # then silence: it speaks
    finally:
        beat.stop()
    assert heard
    for moment in heard:
        assert moment - max((t for t in said if t <= moment), default=0.0) >= 0.29
