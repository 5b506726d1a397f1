"""Embedding calls for `similar` evaluators: the request, the reply's shape, the cache key, the model names.

    similar scorer ──awaits──► ModelJudgeCaller.embed ──► JudgeCache.get_vector, per text (hit: no call)
                                                     └──► the misses in one POST {base_url}/embeddings
                                                          through the judge calls' slots and OpenAIClient.call

An embedding call is a judge call in everything but its endpoint: the same client, retries, the model's own
cap, the global cap, `--max-cost` and cache file (engine.client.judge owns that plumbing; this module owns
what differs). Each text is cached on its own, keyed by the model's identity and the one-text request body,
so a reference embedded for one answering model is not paid again for the next.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engine.client import retry
from engine.client.judge_cache import cache_key
from engine.client.openai import method_url
from engine.client.response import CallResult, apply_usage
from engine.client.tool_calls import loads
from engine.errors import UsageError
from engine.model import ModelConfig, Test
from engine.redact import Redactor

__all__ = ["VectorReader", "embedding_model_names", "embeddings_url", "request_body", "resolve_embedders",
           "text_key"]

KIND = "similar"


def embedding_model_names(tests: Iterable[Test]) -> dict[str | None, str]:
    """The models the tests' `similar` evaluators name (None: the default) -> where one is used."""
    named: dict[str | None, str] = {}
    for test in tests:
        if test.evaluator is None:
            continue
        for _, node in test.evaluator.walk():
            if node.kind == KIND and node.scorer is not None:
                named.setdefault(getattr(node.scorer, "embedding_model", None), f"{test.file}:{test.line} ({test.id})")
    return named


def resolve_embedders(tests: Iterable[Test], configs: Mapping[str, ModelConfig], default: str | None,
                      where: str) -> dict[str, ModelConfig]:
    """The embedding models the tests name, checked against the models file (before any call is paid).

    Raises:
        UsageError: a `similar` names a model the file lacks, or none while the file has no `defaults.embedding`.
    """
    models: dict[str, ModelConfig] = {}
    for name, site in embedding_model_names(tests).items():
        key = name if name is not None else default
        if key is None:
            raise UsageError(f"the similar evaluator of {site} names no model and {where} has no default "
                             f"embedding model; add `model: NAME` to it, or `defaults: {{embedding: NAME}}` to the "
                             f"models file")
        if key not in configs:
            raise UsageError(f"the similar evaluator of {site} names model {key!r}, which is not in {where}; "
                             f"add it under `models:` there, or name one of: {', '.join(sorted(configs))}")
        models[key] = configs[key]
    return models


def embeddings_url(model: ModelConfig) -> str:
    """`{base_url}/embeddings` (the OpenAI protocol's endpoint), a query string of `base_url` kept after it."""
    return method_url(model.base_url or "", "/embeddings")


def request_body(model: ModelConfig, texts: Sequence[str]) -> dict[str, Any]:
    """The /embeddings request. The model's chat `params` are not sent (max_tokens, temperature mean nothing
    here and some servers refuse unknown fields); they still key the cache through the model's identity."""
    return {"model": model.model, "input": list(texts), "encoding_format": "float"}


def text_key(model: ModelConfig, text: str) -> str:
    """The cache key of one text's vector: the judge cache's key of the one-text request."""
    return cache_key(model, request_body(model, [text]), 0)


class VectorReader:
    """Reads one /embeddings reply (a `PreparedRequest.reader`): the vectors land in `vectors`, in input order.

    Read only along the protocol's paths: `data` is a list of one object per input, each with `embedding`
    (a list of finite numbers, all of one length) and `index`; `usage.prompt_tokens`. Anything else there is
    a bad response (one error verdict, never retried: the same server gives the same reply).

    Args:
        count: How many texts were sent.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.vectors: list[tuple[float, ...]] = []

    def read(self, raw: bytes, result: CallResult, redact: Redactor) -> None:
        """Fill `vectors` and the result's token counts from the reply body."""
        try:
            data = loads(raw, "the response body")
        except ValueError:
            raise retry.bad_response("the /embeddings reply is not JSON: "
                                     f"{redact.excerpt(raw[:160].decode('utf-8', 'replace'), 80)}") from None
        if type(data) is not dict or type(data.get("data")) is not list:
            raise retry.bad_response("the /embeddings reply has no `data` list")
        items = data["data"]
        if len(items) != self.count:
            raise retry.bad_response(f"the /embeddings reply has {len(items)} vectors for {self.count} inputs")
        if all(type(item) is dict and type(item.get("index")) is int for item in items):
            items = sorted(items, key=lambda item: item["index"])
        vectors = [_vector(item, i) for i, item in enumerate(items)]
        if len({len(v) for v in vectors}) > 1:
            raise retry.bad_response("the /embeddings reply's vectors differ in length")
        if data.get("usage") is not None:
            apply_usage(data["usage"], result)
        self.vectors = vectors


def _vector(item: Any, i: int) -> tuple[float, ...]:
    embedding = item.get("embedding") if type(item) is dict else None
    if type(embedding) is not list or not embedding:
        raise retry.bad_response(f"data[{i}].embedding is not a list of numbers")
    out = []
    for x in embedding:
        if type(x) not in (int, float) or not math.isfinite(x):
            raise retry.bad_response(f"data[{i}].embedding holds {str(x)[:20]!r}, not a finite number")
        out.append(float(x))
    return tuple(out)
