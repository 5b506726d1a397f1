"""Several endpoints serving one model (`base_urls:` in models.yaml): which replica takes the next try.

`ModelClient.call` asks `ReplicaSet.acquire()` before each try and hands the replica back with
`release(replica, failed=...)` after it::

    acquire:  replicas not cooling down ──► fewest tries in flight ──► ties: round-robin from a cursor
                        │ none left (all cooling down)
                        └──► the one whose cool-down ends first (a call is never refused here)
    release:  the try failed at the replica (`retry.replica_at_fault`: connection, timeout, 5xx)
                        └──► cooling down for `COOL_DOWN_S`; the retry policy retries the call as it
                             always does, and the retry lands on another replica

- In flight counts this run's tries at the replica, so a slow replica takes fewer new calls: least
  in flight, as a load balancer's least-connections. The cursor makes sequential calls alternate evenly.
- Whether a failure is the replica's fault is decided in `retry.py`, with the rest of the
  classification: a 4xx (bad request, rate limit) is the request's or the account's, not the server's,
  and a reply that could not be read is not retried anywhere.
- The per-model concurrency cap (`concurrency:`) holds for the model as a whole (the runner's one home
  for caps): the replicas share it.

Everything runs on the run's one event loop, so no lock is needed. The clock is injected (tests pass
their own, never sleeping through a cool-down).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.redact import mask_url

__all__ = ["COOL_DOWN_S", "Replica", "ReplicaSet"]

#: Seconds a replica is skipped after a try failed at it: long enough for a restarting vLLM or
#: llama.cpp server not to be hammered by every retry, short enough that a run of minutes gets it back.
COOL_DOWN_S = 30.0


@dataclass(slots=True, eq=False)
class Replica:
    """One endpoint of a model.

    Args:
        base: The base URL requests go under (`.../v1`); each request adds its own method's path
            (`PreparedRequest.method`), which follows the request (streamed or whole, chat or embeddings).
        shown: The base URL with any userinfo masked (`engine.redact.mask_url`): the `served_by` column.
        in_flight: Tries sent and not yet finished.
        cool_until: Clock time until which it is skipped (-inf: available).
        tries: Tries sent to it so far.
        failures: Tries that failed at it so far.
    """

    base: str
    shown: str
    in_flight: int = 0
    cool_until: float = -math.inf
    tries: int = 0
    failures: int = 0


class ReplicaSet:
    """The replicas of one model and the choice between them.

    Args:
        base_urls: The model's `base_urls`, in order (the tie-break order).
        clock: Monotonic seconds.
        cool_down_s: How long a failing replica is skipped.
    """

    def __init__(self, base_urls: Sequence[str], *, clock: Callable[[], float] = time.monotonic,
                 cool_down_s: float = COOL_DOWN_S) -> None:
        if not base_urls:
            raise ValueError("a replica set needs at least one base URL")
        self.replicas = tuple(Replica(url, mask_url(url) or url) for url in base_urls)
        self._clock = clock
        self._cool_down_s = cool_down_s
        self._cursor = 0

    def acquire(self) -> Replica:
        """The replica for the next try, counted in flight until `release`."""
        now = self._clock()
        n = len(self.replicas)
        order = [self.replicas[(self._cursor + k) % n] for k in range(n)]
        ready = [r for r in order if r.cool_until <= now]
        # min keeps the first of equals, in the cursor's order: ties go round-robin
        chosen = min(ready, key=lambda r: r.in_flight) if ready else min(order, key=lambda r: r.cool_until)
        self._cursor = (self.replicas.index(chosen) + 1) % n
        chosen.in_flight += 1
        chosen.tries += 1
        return chosen

    def release(self, replica: Replica, *, failed: bool) -> None:
        """A try at `replica` ended; `failed`: it failed at the replica, which then cools down."""
        replica.in_flight -= 1
        if failed:
            replica.failures += 1
            replica.cool_until = self._clock() + self._cool_down_s

    def cooling(self) -> list[str]:
        """The shown URLs of the replicas cooling down now (for messages and tests)."""
        now = self._clock()
        return [r.shown for r in self.replicas if r.cool_until > now]
