"""`engine run --dry-run`: every request the run would send, printed as JSON lines with credentials masked, and
how many calls that makes; nothing is sent. A call that would go in a provider's batch (`--batch`, `batch:`) says
so (`"batch": true`) and shows its body as the batch carries it, whole rather than streamed; the total says how many
batches each batched model's calls make (its `size`, within the provider's request limit; a batch past the
provider's byte limit would be split further)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from engine.model.model_config import BatchSettings, ModelConfig
from engine.model.test import Test
from engine.redact import mask_url, public_params

if TYPE_CHECKING:
    from engine.run.run_config import Invocation
    from engine.run.shards import Shard


def print_requests(models: list[ModelConfig], tests: Sequence[Test], invocation: Invocation,
                   shard: Shard | None) -> None:
    """Print each (model, test)'s request and its attempts (a shard's own only); the total to stderr."""
    from engine.client.request import prepare
    from engine.results.rows import row_key
    from engine.run.jobs import attempts, runs_on

    settings = invocation.request_settings()
    calls = 0
    batches: list[str] = []
    for model in models:
        if model.base_url is None:
            model = dataclasses.replace(model, base_url=f"http://127.0.0.1:<{model.builtin}>/v1")
        in_batches = 0
        for test in tests:
            if not runs_on(model, test):
                continue   # an agent test on a completions-API model: the run leaves it out too
            batched = isinstance(model.batch, BatchSettings) and test.agent is None   # agent tests go live
            request = prepare(model, test, dataclasses.replace(settings, stream=False) if batched else settings,
                              inline_images=False)   # a placeholder for image bytes
            n = sum(1 for a in range(attempts(test, invocation.repeat))
                    if shard is None or shard.owns(row_key(model.name, test, a)))
            if not n:
                continue
            calls += n
            in_batches += n if batched else 0
            body = public_params(request.body, keep_keys=True)   # what is sent, minus credentials
            print(json.dumps({"model": model.name, "suite": test.suite, "test": test.id, "attempts": n,
                              "url": mask_url(request.url), "body": body, **({"batch": True} if batched else {})},
                             ensure_ascii=False))
        if in_batches:
            batches.append(_batches(model, in_batches))
    print(f"dry run: {calls} call(s) for {len(models)} model(s) x {len(tests)} test(s){_matrix(tests)}"
          + "".join(f"; {line}" for line in batches) + "; nothing was sent", file=sys.stderr, flush=True)


def _batches(model: ModelConfig, calls: int) -> str:
    """How a batched model's `calls` go: "m: 200 call(s) in 3 batch(es) of up to 80"."""
    from engine.client.providers import provider

    assert isinstance(model.batch, BatchSettings)
    wire = provider(model.api).batch
    most = max(1, min(model.batch.size, wire.limits.max_requests if wire is not None else model.batch.size))
    return f"{model.name}: {calls} call(s) in {-(-calls // most)} batch(es) of up to {most}"


def _matrix(tests: Sequence[Test]) -> str:
    """" (N tests x V variants)" when the suites have variants, else ""."""
    from engine.suite.stored_tests import keys_of

    variants = {t.variant for t in keys_of(tests) if t.variant}
    if not variants:
        return ""
    distinct = len({(t.suite, t.id, t.case_index) for t in keys_of(tests)})
    return f" ({distinct} tests x {len(variants)} variants)"
