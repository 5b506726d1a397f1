"""The run's `JudgeCaller`: judge calls through the run's client, retries, the judge model's own concurrency
cap, the run's global cap, the `--max-cost` budget and the judge cache.

    judge scorer ──awaits──► ModelJudgeCaller.judge ──► JudgeCache (hit: no call)
                                                   └──► judge slot ─► global slot ─► ModelClient.call

`similar` evaluators' embedding calls (`embed`) take the same path to `{base_url}/embeddings`, their vectors
cached in the judge cache's `embedding` table (engine.judge.embeddings holds what differs).

Without a client (`engine rescore`) it answers from the cache only; a miss is a failed call that says how
to pay for it. The evaluators package only knows the `GradingCaller` protocol (engine.model.scoring).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from engine.client.client import ModelClient
from engine.client.providers import WireRequest, provider
from engine.client.request import PreparedRequest, endpoint_url, method_path
from engine.client.response import CallResult
from engine.client.window import Dispatch, Window
from engine.errors import CallStopped, SendLive, UsageError
from engine.evaluators.judge import JudgeScorer
from engine.evaluators.similar import SimilarScorer
from engine.judge import embeddings
from engine.judge.cache import JudgeCache, cache_key
from engine.model.model_config import ModelConfig, ceiling_of, cost_of
from engine.model.scoring import EmbeddingReply, JudgeReply
from engine.model.test import Test

STOPPED_BEFORE = "the run was stopped before this was asked (the answer is kept, not scored)"

__all__ = ["JudgeModels", "JudgeRun", "ModelJudgeCaller", "ModelsNamed", "models_named", "resolve_judges"]


@dataclass(frozen=True)
class JudgeModels:
    """The judge models a run may call, resolved from the models file before any call is paid.

    Args:
        models: name -> config of every judge model the suites name (the default included), and of every
            embedding model their `similar` evaluators name (engine.judge.embeddings).
        default: The models file's `defaults.judge`, or None.
        embedding_default: The models file's `defaults.embedding`, or None.
    """

    models: Mapping[str, ModelConfig]
    default: str | None = None
    embedding_default: str | None = None

    def resolve_embedding(self, name: str | None) -> ModelConfig | None:
        """The config of embedding model `name` (None: `defaults.embedding`), or None when it is unknown."""
        key = name if name is not None else self.embedding_default
        return None if key is None else self.models.get(key)

    def resolve(self, name: str | None) -> ModelConfig | None:
        """The config of judge `name` (None: the default), or None when it is unknown."""
        key = name if name is not None else self.default
        return None if key is None else self.models.get(key)


class ModelsNamed(NamedTuple):
    """The models the tests' model-graded scorers name (None: the models file's default) -> where one is used."""

    judges: dict[str | None, str]       # `judge` evaluators' judge models
    embedders: dict[str | None, str]    # `similar` evaluators' embedding models

    def any(self) -> bool:
        """True when some test has a judge or a `similar`."""
        return bool(self.judges or self.embedders)


def models_named(tests: Iterable[Test]) -> ModelsNamed:
    """The models the tests' judge and similar scorers name, in one walk over each test's tree."""
    named = ModelsNamed({}, {})
    for test in tests:
        if test.evaluator is None:
            continue
        for _, node in test.evaluator.walk():
            scorer = node.scorer
            if isinstance(scorer, JudgeScorer):
                named.judges.setdefault(scorer.spec.model, f"{test.file}:{test.line} ({test.id})")
            elif isinstance(scorer, SimilarScorer):
                named.embedders.setdefault(scorer.model, f"{test.file}:{test.line} ({test.id})")
    return named


def resolve_judges(tests: Iterable[Test], configs: Mapping[str, ModelConfig], default: str | None,
                   where: str, embedding_default: str | None = None) -> JudgeModels | None:
    """The judge models the tests name, checked against the models file (before any call is paid).

    Args:
        tests: The tests to run or rescore.
        configs: Every entry of the models file.
        default: The file's `defaults.judge`, or None.
        where: The models file's name, for messages.
        embedding_default: The file's `defaults.embedding` (for `similar` evaluators), or None.

    Returns:
        The resolved judge and embedding models, or None when no test has a judge or a `similar`.

    Raises:
        UsageError: a judge names a model the file lacks (or none, with no default), or a completions model.
    """
    named = models_named(tests)
    if not named.any():
        return None
    models = _embedders(named.embedders, configs, embedding_default, where)
    for name, site in named.judges.items():
        if name is None and default is None:
            raise UsageError(f"the judge evaluator of {site} names no model and {where} has no default judge; "
                             f"add `model: NAME` to the judge, or `defaults: {{judge: NAME}}` to the models file")
        key = name if name is not None else default
        assert key is not None
        if key not in configs:
            raise UsageError(f"the judge evaluator of {site} names model {key!r}, which is not in {where}; "
                             f"add it under `models:` there, or name one of: {', '.join(sorted(configs))}")
        if not provider(configs[key].api).chat:
            raise UsageError(f"judge model {key!r} uses the {configs[key].api} API; a judge needs a chat API "
                             f"(`api: chat`, `anthropic` or `gemini`: its prompt is a chat message)")
        models[key] = configs[key]
    return JudgeModels(models=models, default=default, embedding_default=embedding_default)


def _embedders(named: Mapping[str | None, str], configs: Mapping[str, ModelConfig], default: str | None,
               where: str) -> dict[str, ModelConfig]:
    """The embedding models `similar` evaluators name, checked against the models file.

    Raises:
        UsageError: a `similar` names a model the file lacks, or none while the file has no `defaults.embedding`.
    """
    models: dict[str, ModelConfig] = {}
    for name, site in named.items():
        key = name if name is not None else default
        if key is None:
            raise UsageError(f"the similar evaluator of {site} names no model and {where} has no default "
                             f"embedding model; add `model: NAME` to it, or `defaults: {{embedding: NAME}}` to the "
                             f"models file")
        if key not in configs:
            raise UsageError(f"the similar evaluator of {site} names model {key!r}, which is not in {where}; "
                             f"add it under `models:` there, or name one of: {', '.join(sorted(configs))}")
        if provider(configs[key].api).embeddings is None:
            raise UsageError(f"the similar evaluator of {site} names model {key!r}, which uses the "
                             f"{configs[key].api} API: it has no embeddings method; name a model with `api: chat` "
                             f"(an /embeddings endpoint) or `api: gemini` instead")
        models[key] = configs[key]
    return models


def request_body(model: ModelConfig, messages: list[dict[str, Any]], schema: Mapping[str, Any],
                 temperature: float, max_tokens: int) -> dict[str, Any]:
    """The judge request: the model's params, then the judge's own settings (never streamed: one JSON reply).

    A model on another API (Anthropic, Gemini) gets its provider's body; the reply schema is then asked for in
    the prompt only (a strict parse and one re-ask), whatever `structured_output` says.
    """
    if model.api != "chat":
        return provider(model.api).build(WireRequest(model=model.model, messages=messages, params=model.params,
                                                     max_tokens=max_tokens, temperature=temperature))
    body: dict[str, Any] = {"model": model.model, "messages": messages, **model.params,
                            "temperature": temperature, "max_tokens": max_tokens, "stream": False}
    if model.structured_output and model.builtin:
        # the embedded server (llama-cpp-python) takes the schema in its own form and turns it into a grammar;
        # it refuses OpenAI's `json_schema` type
        body["response_format"] = {"type": "json_object", "schema": dict(schema)}
    elif model.structured_output:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "judgement", "strict": True, "schema": dict(schema)}}
    return body


@dataclass(frozen=True)
class JudgeRun:
    """What a run lends its judge calls (a calibration or a rescore has none: a window of its own per judge model,
    no budget, no batches)."""

    dispatch: Callable[[ModelConfig], Dispatch]   # the slots a judge model's tries wait for (the run's windows)
    on_cost: Callable[[float], None]              # each paid call's cost (the `--max-cost` budget)
    #: (judge model, the call's judge cache key) -> what answers that call through its provider's batch API
    #: (request -> result: the run's batcher, when the judge model is batched or a batch a stopped run sent holds
    #: the call), or None: live
    batched: Callable[[ModelConfig, str], Callable[[PreparedRequest], Awaitable[CallResult]] | None]


class ModelJudgeCaller:
    """Judge calls for one run (or one calibration, or one rescore without a client).

    Args:
        judges: The resolved judge models.
        cache: The judge cache.
        client: The run's client, or None to answer from the cache only.
        run: What the run lends the calls, or None outside a run.
        miss_hint: What a cache miss says when there is no client.
    """

    def __init__(self, judges: JudgeModels, cache: JudgeCache, client: ModelClient | None = None, *,
                 run: JudgeRun | None = None, miss_hint: str = "run `engine run` again to pay for it") -> None:
        self._judges = judges
        self._cache = cache
        self._client = client
        self._run = run
        self._miss_hint = miss_hint
        self._windows: dict[str, Window] = {}
        # cache key -> the reply (judge) or vector (embed) an identical request now in flight will bring: two
        # answering models that give the same answer are graded at once, and the second must not pay again
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self.calls = 0   # paid calls (the tests count them at the server too)

    async def judge(self, model: str | None, messages: list[dict[str, Any]], *, schema: Mapping[str, Any],
                    temperature: float, max_tokens: int, sample: int) -> JudgeReply:
        """Ask the judge; a failed call is a reply with `error` set, never an exception."""
        config = self._judges.resolve(model)
        if config is None:
            which = f"judge model {model!r}" if model else "the default judge (`defaults.judge`)"
            return JudgeReply("", error=f"{which} is not in the models file; add it under `models:`")
        body = request_body(config, messages, schema, temperature, max_tokens)
        key = cache_key(config, body, sample)
        hit = self._cache.get(key)
        if hit is not None:
            return JudgeReply(hit[0], prompt_tokens=hit[1], completion_tokens=hit[2], cached=True)
        shared = await self._in_flight_result(key)
        if shared is not None:   # paid for once, by the identical request (its failure is shared too)
            return shared._replace(cached=True)
        if self._client is None:
            return JudgeReply("", error=f"judge {config.name}: this judgement is not in the judge cache "
                                        f"({self._cache.path}) and nothing is called here; {self._miss_hint}")
        request = PreparedRequest(endpoint_url(config, stream=False), body, False, temperature, max_tokens, None,
                                  api=config.api, method=method_path(config, stream=False))
        claim = self._claim(key)
        try:
            try:
                result, cost = await self._send(config, request, key)
            except CallStopped:
                return JudgeReply("", error=f"judge {config.name}: {STOPPED_BEFORE}")
            if result.error is not None:
                reply = JudgeReply("", error=f"{config.name}: {result.error}", prompt_tokens=result.prompt_tokens,
                                   completion_tokens=result.completion_tokens, cost=cost)
            else:
                self._cache.put(key, result.text, result.prompt_tokens, result.completion_tokens)
                reply = JudgeReply(result.text, prompt_tokens=result.prompt_tokens,
                                   completion_tokens=result.completion_tokens, cost=cost)
            claim.set_result(reply)
            return reply
        finally:
            self._release(key, claim)

    async def embed(self, model: str | None, texts: Sequence[str]) -> EmbeddingReply:
        """The texts' vectors: cached ones from the cache, the rest in one /embeddings call; never raises."""
        config = self._judges.resolve_embedding(model)
        if config is None:
            which = f"embedding model {model!r}" if model else "the default embedding model (`defaults.embedding`)"
            return EmbeddingReply(error=f"{which} is not in the models file; add it under `models:`")
        keys = [embeddings.text_key(config, text) for text in texts]
        by_key = dict(zip(keys, texts, strict=True))
        found: dict[str, tuple[float, ...] | None] = {key: self._cache.get_vector(key) for key in by_key}
        for key in by_key:
            if found[key] is None:   # an identical text being embedded now: its vector (awaiting one request
                # may let another finish: look in the cache again), or None when it failed
                found[key] = await self._in_flight_result(key) or self._cache.get_vector(key)
        missing = [key for key in by_key if found[key] is None]
        cached = len(texts) - sum(1 for key in keys if found[key] is None)
        if not missing:
            return EmbeddingReply(tuple(found[key] or () for key in keys), cached=cached)
        if self._client is None:
            return EmbeddingReply(cached=cached, error=f"embedding {config.name}: a text is not in the judge cache "
                                                       f"({self._cache.path}) and nothing is called here; "
                                                       f"{self._miss_hint}")
        reader = embeddings.VectorReader(len(missing), config)
        request = PreparedRequest(embeddings.embeddings_url(config),
                                  embeddings.request_body(config, [by_key[key] for key in missing]),
                                  False, None, 0, None, reader=reader.read, api=config.api,
                                  method=embeddings.embeddings_path(config))
        claims = {key: self._claim(key) for key in missing}
        try:
            try:
                result, cost = await self._send(config, request)
            except CallStopped:
                return EmbeddingReply(cached=cached, error=f"embedding {config.name}: {STOPPED_BEFORE}")
            if result.error is not None:
                return EmbeddingReply(error=f"{config.name}: {result.error}", calls=1, cached=cached,
                                      prompt_tokens=result.prompt_tokens, cost=cost)
            for key, vector in zip(missing, reader.vectors, strict=True):
                found[key] = vector
                self._cache.put_vector(key, vector)
                claims[key].set_result(vector)
            return EmbeddingReply(tuple(found[key] or () for key in keys), calls=1, cached=cached,
                                  prompt_tokens=result.prompt_tokens, cost=cost)
        finally:
            for key, claim in claims.items():
                self._release(key, claim)

    async def _in_flight_result(self, key: str) -> Any:
        """What the identical request in flight now brings, or None (none in flight; it failed or was cancelled
        without a result: the caller pays itself)."""
        pending = self._pending.get(key)
        if pending is None:
            return None
        try:
            return await asyncio.shield(pending)
        except asyncio.CancelledError:
            if pending.cancelled():
                return None
            raise

    def _claim(self, key: str) -> asyncio.Future[Any]:
        """Mark `key` as being paid for now: identical requests wait for its result instead of paying."""
        claim: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[key] = claim
        return claim

    def _release(self, key: str, claim: asyncio.Future[Any]) -> None:
        """The claim is settled: waiters without a result (a failure, a cancellation) get None."""
        if self._pending.get(key) is claim:
            del self._pending[key]
        if not claim.done():
            claim.cancel()

    async def _send(self, config: ModelConfig, request: PreparedRequest,
                    key: str | None = None) -> tuple[CallResult, float | None]:
        """One paid call through the judge model's slots, or its batches when the run batches it (a judgement, by
        its cache `key`: the same in a resumed run, which collects it from the batch that holds it); (result, its
        priced cost, at the batch price when a batch answered).

        Raises:
            CallStopped: The run stopped before it was sent.
        """
        assert self._client is not None, "the callers answer from the cache when there is no client"
        if self._run is not None:
            dispatch: Dispatch = self._run.dispatch(config)
        else:
            dispatch = self._windows.get(config.name) or self._windows.setdefault(
                config.name, Window(ceiling_of(config)))
        via = self._run.batched(config, key) if self._run is not None and key is not None else None
        try:
            result = await self._client.call(config, request, dispatch=dispatch, via=via)
        except SendLive:   # a batch failed it, and the judge is no longer batched: live, as its entry says now
            result = await self._client.call(config, request, dispatch=dispatch)
        self.calls += 1
        # an embedding reply has no completion: its cost is its prompt tokens' (cost_of needs both counts)
        completion = 0 if request.reader is not None and result.prompt_tokens is not None else None
        cost = cost_of(config, result.prompt_tokens, result.completion_tokens
                       if result.completion_tokens is not None else completion, result.cached_tokens,
                       result.cache_write_tokens, batch=result.batch_id is not None)
        if cost is not None and self._run is not None:
            self._run.on_cost(cost)
        return result, cost
