"""The cost of a cluster-wide per-model cap (`engine run --ray`): one `ModelSlots` actor slot per call.

Every model call of a Ray shard enters `RemoteSlot(actor)` (an awaited `acquire` round trip to the model's
actor, a release sent without waiting). Baseline, in the same run: the same loop around a local
`asyncio.Semaphore`, what a run without Ray pays. Sequential (one call at a time: the round-trip latency) and
32 at once (the throughput the actor sustains). Needs the [ray] extra; starts a one-CPU local Ray.
Figures in docs/scale.md.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

CALLS = 2000
PARALLEL = 32


async def _loop(slot: Any, calls: int, parallel: int) -> float:
    async def one(n: int) -> None:
        for _ in range(n):
            async with slot:
                pass

    started = time.perf_counter()
    await asyncio.gather(*(one(calls // parallel) for _ in range(parallel)))
    return (time.perf_counter() - started) / calls


def main() -> None:
    import ray

    from engine.run.ray_dispatch import ModelSlots, RemoteSlot

    ray.init(num_cpus=1, include_dashboard=False, object_store_memory=78_643_200, log_to_driver=False,
             logging_level="ERROR")
    try:
        actor = ray.remote(num_cpus=0)(ModelSlots).remote(PARALLEL)
        ray.get(actor.peak_held.remote())   # started
        for parallel in (1, PARALLEL):
            remote, local = [], []
            for _ in range(3):
                remote.append(asyncio.run(_loop(RemoteSlot(actor), CALLS, parallel)))
                local.append(asyncio.run(_loop(asyncio.Semaphore(PARALLEL), CALLS, parallel)))
            r, b = statistics.median(remote), statistics.median(local)
            print(f"{parallel:>2} at once: actor slot {r * 1e6:8.0f} us/call, "
                  f"asyncio.Semaphore {b * 1e6:6.1f} us/call, overhead {(r - b) * 1e6:8.0f} us/call "
                  f"(median of 3 x {CALLS} calls)")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
