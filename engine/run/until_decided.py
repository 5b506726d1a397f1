"""`engine run --until-decided A,B`: dispatch tests in a seeded random order and stop once A vs B is decided.

The unit is the test cluster, (suite, test id) as `engine analyze` clusters: all its cases and attempts, for
every model of the run, are dispatched together, in the order of a seeded permutation of the clusters. When a
cluster has finished for both A and B its paired difference D = mean over its cases of (A's mean score over
scored attempts − B's) goes into the anytime-valid betting test of `engine.base.sequential`, strictly in the
permutation order (a cluster that finishes early waits for those before it): the order the test sees never
depends on which answers came back first, so a model whose failures are slow cannot bias it.

Errors are not losses: an attempt with no score (an error row, or an evaluator that could not judge) is left
out of its model's mean; a case paired only when both models scored it; a cluster with no paired case is left
out of the statistic (counted as `excluded`) and dispatch goes on.

The gate (`DecisionGate`) is what the runner consults: `admit(job)` before each dispatch (it waits while the
job's cluster is more than `lookahead` clusters past the last one the test has read, so the run does not race
ahead of the decision; once decided it admits only the jobs of clusters some model already started, so every
test in the folder has both models' rows) and `record(job, row)` for each finished row. Tests
never dispatched are simply absent from the run folder. What was decided goes to the manifest (`until_decided`)
and the journal.

A stopped run (Ctrl-C, `--max-cost`, a kill) is continued by `engine run --resume DIR`: the option and the seed
are in the journal (`SPEC_KEY`, written before the first call), so the same order is rebuilt, and the rows the
run committed are `replay`ed into the test, which then stands where it stood (the clusters are read in order,
whatever order their rows are replayed in) and goes on from there. `--resume DIR --complete` runs every test
left instead (the run layer then builds no gate).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.base.sequential import DEFAULT_ALPHA, Decision, PairedBettingTest
from engine.errors import UsageError
from engine.model.model_config import ModelConfig
from engine.model.test import Test, TestKey
from engine.results.rows import key_of_row, row_key
from engine.run.jobs import Job, attempts, runs_on
from engine.suite.stored_tests import keys_of

NAMES_KEPT = 1000   # "tests not run" listed by name in the manifest up to this many (the count is always there)
#: The journal key of the option and its seed, so `--resume` rebuilds the same gate.
SPEC_KEY = "until_decided_spec"


@dataclass(frozen=True)
class UntilDecided:
    """The `--until-decided A,B` option.

    Args:
        model_a: The first model's name (a positive difference means A scores higher).
        model_b: The second.
        alpha: The error rate of a "better" verdict.
    """

    model_a: str
    model_b: str
    alpha: float = DEFAULT_ALPHA

    @classmethod
    def parse(cls, text: str, alpha: float = DEFAULT_ALPHA) -> UntilDecided:
        """`A,B` as given on the command line.

        Raises:
            UsageError: Not two distinct names, or alpha outside (0, 1).
        """
        names = [part.strip() for part in text.split(",")]
        if len(names) != 2 or not all(names):
            raise UsageError(f"--until-decided {text}: give two model names from the models file, comma-separated "
                             f"(e.g. --until-decided gpt-a,gpt-b)")
        if names[0] == names[1]:
            raise UsageError(f"--until-decided {text}: name two different models")
        if not 0.0 < alpha < 1.0:
            raise UsageError(f"--alpha {alpha}: give a rate between 0 and 1 (0.05 is the default)")
        return cls(names[0], names[1], alpha)

    def to_meta(self, seed: int) -> dict[str, Any]:
        """The option and the permutation's seed, as the journal keeps them (`SPEC_KEY`)."""
        return {"model_a": self.model_a, "model_b": self.model_b, "alpha": self.alpha, "seed": seed}

    @classmethod
    def from_meta(cls, meta: Any) -> tuple[UntilDecided, int] | None:
        """(option, seed) from a journal's `SPEC_KEY` value, or None when it holds none."""
        if not isinstance(meta, dict) or not all(k in meta for k in ("model_a", "model_b", "alpha", "seed")):
            return None
        return cls(str(meta["model_a"]), str(meta["model_b"]), float(meta["alpha"])), int(meta["seed"])

    def check_models(self, models: list[ModelConfig]) -> None:
        """Both models must be among the run's.

        Raises:
            UsageError: Naming the missing one and the run's models.
        """
        names = [m.name for m in models]
        for name in (self.model_a, self.model_b):
            if name not in names:
                raise UsageError(f"--until-decided {self.model_a},{self.model_b}: {name!r} is not among the run's "
                                 f"models ({', '.join(names)}); name models of the models file (and of --model, "
                                 f"when given)")


@dataclass
class _Cluster:
    """One test cluster: its tests (indexes into the gate's tests), and what A and B still owe and have scored."""

    key: tuple[str, str]
    tests: list[int]
    pending: dict[str, int] = field(default_factory=dict)          # model -> jobs not yet recorded
    scores: dict[str, dict[tuple[Any, ...], list[float]]] = field(default_factory=dict)   # model -> case -> scores

    def difference(self, a: str, b: str) -> float | None:
        """Mean over the cases both models scored of (A's mean − B's mean); None when no case is paired."""
        sa, sb = self.scores.get(a, {}), self.scores.get(b, {})
        paired = [sum(sa[c]) / len(sa[c]) - sum(sb[c]) / len(sb[c]) for c in sa if sb.get(c)]
        return sum(paired) / len(paired) if paired else None


def _case(test: TestKey) -> tuple[Any, ...]:
    return (test.id, test.case_index, test.variant, test.hash)


def _score(row: dict[str, Any]) -> float | None:
    """The row's score in [0, 1], or None for a row with no score (an error or an evaluator that could not judge)."""
    value = row.get("score")
    if value is None or row.get("error_kind") or not math.isfinite(value):
        return None
    return min(1.0, max(0.0, float(value)))


class DecisionGate:
    """The dispatch gate of the module docstring.

    Args:
        spec: The option.
        models: The run's models (A and B among them).
        tests: The selected tests.
        repeat: `--repeat`, or None for each test's own.
        seed: The permutation's seed.
        concurrency: The calls the run may have in flight at first (sets the lookahead; the runner `widen`s it
            as the models' windows grow).
    """

    def __init__(self, spec: UntilDecided, models: list[ModelConfig], tests: Sequence[Test], repeat: int | None, *,
                 seed: int, concurrency: int) -> None:
        spec.check_models(models)
        self.spec = spec
        self.seed = seed
        self.models = models
        self.repeat = repeat
        self._tests = tests
        self._keys = keys = keys_of(tests)
        by_key: dict[tuple[str, str], _Cluster] = {}
        for index, test in enumerate(keys):
            by_key.setdefault((test.suite, test.id), _Cluster((test.suite, test.id), [])).tests.append(index)
        self.order = list(by_key.values())
        random.Random(seed).shuffle(self.order)
        self._position = {cluster.key: i for i, cluster in enumerate(self.order)}
        for cluster in self.order:
            for name in (spec.model_a, spec.model_b):
                model = next(m for m in models if m.name == name)
                cluster.pending[name] = sum(attempts(keys[i], repeat) for i in cluster.tests if runs_on(model, keys[i]))
        self.full_jobs = sum(attempts(t, repeat) for m in models for t in keys if runs_on(m, t))
        smallest = min((sum(attempts(keys[i], repeat) for i in c.tests) for c in self.order), default=1)
        workers = max((min(concurrency if m.concurrency is None else m.concurrency, concurrency) for m in models),
                      default=1)
        self._smallest = smallest
        # Enough clusters open to keep the busiest model's workers fed, and no more: each open cluster past the
        # decision is paid for and not used by it.
        self.lookahead = max(1, math.ceil(workers / max(1, smallest)))
        self.test = PairedBettingTest(spec.alpha)
        self.decision: Decision = self.test.state()
        self.read = 0                  # clusters the test has read, in order
        self.excluded = 0              # of those, without a paired case
        self.decided_at: int | None = None   # clusters read when it decided
        self.dispatched: set[int] = set()
        self.jobs_recorded = 0
        self._closed = False
        self._changed = asyncio.Event()
        self._advance()   # clusters A and B have no job for (agent tests on completions models) are passed over

    def _job_keys(self, model: ModelConfig) -> Iterator[tuple[int, int, str]]:
        """(test index, attempt, row key) of the model's jobs, cluster by cluster in the gate's order."""
        for cluster in self.order:
            for index in cluster.tests:
                test = self._keys[index]
                if not runs_on(model, test):
                    continue
                for attempt in range(attempts(test, self.repeat)):
                    yield index, attempt, row_key(model.name, test, attempt)

    def jobs(self, model: ModelConfig, skip: Collection[str] = ()) -> Iterator[Job]:
        """The model's jobs, cluster by cluster in the gate's order (every attempt of a cluster together),
        except those whose row key is in `skip` (rows a resumed run has); a job's test is read as it is handed out."""
        for index, attempt, key in self._job_keys(model):
            if key not in skip:
                yield Job(model, self._tests[index], attempt, key)

    def replay(self, rows: Iterable[dict[str, Any]]) -> int:
        """Rows the run committed before it stopped, recorded as if just finished: the test then stands where
        it stood. Their clusters count as dispatched. Returns how many rows were jobs of this gate."""
        by_key = {key: (model.name, index) for model in self.models for index, _, key in self._job_keys(model)}
        replayed = 0
        for row in rows:
            found = by_key.get(key_of_row(row))
            if found is None:
                continue   # a test since edited (a new hash) or left out: its row is not this order's
            name, index = found
            test = self._keys[index]
            self.dispatched.add(self._position[(test.suite, test.id)])
            self._count(name, test, row)
            replayed += 1
        return replayed

    def total_jobs(self) -> int:
        """Jobs of a full run (the progress total)."""
        return self.full_jobs

    async def admit(self, job: Job) -> bool:
        """Whether to dispatch the job, once its cluster is within the lookahead.

        After the decision only clusters some model has started are dispatched (so every test in the folder
        has every model's rows); after `close` (the runner stopped: budget, Ctrl-C) none.
        """
        position = self._position[(job.test.suite, job.test.id)]
        while not self._closed and self.decided_at is None and position >= self.read + self.lookahead:
            changed = self._changed
            await changed.wait()
        if self._closed:
            return False
        if self.decided_at is not None:
            return position in self.dispatched
        self.dispatched.add(position)
        return True

    def widen(self, workers: int) -> None:
        """A model may now have `workers` calls in flight: open enough clusters to keep them fed (until the
        decision, past which the lookahead no longer matters and its record stays as it was)."""
        if self.decided_at is not None:
            return
        wider = max(1, math.ceil(workers / max(1, self._smallest)))
        if wider > self.lookahead:
            self.lookahead = wider
            self._wake()

    def close(self) -> None:
        """Dispatch no more: every waiting `admit` returns False."""
        self._closed = True
        self._wake()

    def record(self, job: Job, row: dict[str, Any]) -> None:
        """A finished row: counted, and read by the test once its cluster and all before it are done."""
        self._count(job.model.name, job.test, row)

    def _count(self, name: str, test: TestKey, row: dict[str, Any]) -> None:
        """`record` of model `name`'s row of `test`."""
        self.jobs_recorded += 1
        cluster = self.order[self._position[(test.suite, test.id)]]
        if name not in cluster.pending:
            return
        cluster.pending[name] -= 1
        score = _score(row)
        if score is not None:
            cluster.scores.setdefault(name, {}).setdefault(_case(test), []).append(score)
        self._advance()

    def _advance(self) -> None:
        moved = False
        while self.read < len(self.order) and not any(self.order[self.read].pending.values()):
            cluster = self.order[self.read]
            self.read += 1
            moved = True
            if self.decided_at is not None:
                continue   # decided: the verdict and its interval stay those at the decision
            difference = cluster.difference(self.spec.model_a, self.spec.model_b)
            cluster.scores.clear()
            if difference is None:
                self.excluded += 1
                continue
            self.decision = self.test.update(difference)
            if self.decision.sign:
                self.decided_at = self.read
        if moved:
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def summary(self, stopped: str | None) -> dict[str, Any]:
        """The stopping decision for the manifest and `engine analyze` (engine/analysis/sequential_section.py).

        Args:
            stopped: The runner's stop reason (None: it ran out of tests).
        """
        d = self.decision
        a, b = self.spec.model_a, self.spec.model_b
        better = a if d.sign > 0 else b if d.sign < 0 else None
        reason = "decided" if d.sign else ("all tests used" if stopped is None else stopped)
        not_run = [f"{c.key[0]}/{c.key[1]}" for i, c in enumerate(self.order) if i not in self.dispatched]
        return {
            "model_a": a, "model_b": b, "alpha": self.spec.alpha, "seed": self.seed,
            "verdict": f"{better} better" if better else "undecided", "better": better, "reason": reason,
            "method": "hedged betting e-process (Waudby-Smith & Ramdas 2023, aGRAPA bets) over per-test paired "
                      "differences",
            "tests_in_suite": len(self.order), "tests_read": self.read,
            "tests_used": d.tests, "tests_excluded": self.excluded,
            "tests_decided_at": self.decided_at,
            "tests_dispatched": len(self.dispatched), "tests_not_run": len(not_run),
            "tests_not_run_names": not_run[:NAMES_KEPT],
            "mean_diff": None if d.tests == 0 else d.mean, "cs_lo": d.lo, "cs_hi": d.hi,
            "e_value": d.wealth, "wealth_a": d.wealth_a, "wealth_b": d.wealth_b, "threshold": 1.0 / self.spec.alpha,
            "lookahead": self.lookahead, "jobs_made": self.jobs_recorded, "jobs_full_run": self.full_jobs,
            "jobs_saved": self.full_jobs - self.jobs_recorded,
        }
