"""Embedding calls for `similar` evaluators: the request, the reply's shape, the cache key.

    similar scorer ──awaits──► ModelJudgeCaller.embed ──► JudgeCache.get_vector, per text (hit: no call)
                                                     └──► the misses in one POST to the model's embeddings
                                                          method (its provider's: `{base_url}/embeddings`, Gemini's
                                                          `:batchEmbedContents`) through the judge calls' slots
                                                          and ModelClient.call

An embedding call is a judge call in everything but its endpoint: the same client, retries, the model's own
cap, the global cap, `--max-cost` and cache file (engine.judge.caller owns that plumbing; this module owns
what differs). Each text is cached on its own, keyed by the model's identity and the one-text request body,
so a reference embedded for one answering model is not paid again for the next.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from engine.client import retry
from engine.client.providers import method_url, provider
from engine.client.providers.base import Embeddings
from engine.client.providers.openai_chat import EMBEDDINGS as OPENAI_EMBEDDINGS
from engine.client.response import CallResult, apply_usage
from engine.client.tool_calls import loads
from engine.errors import UsageError
from engine.judge.cache import cache_key
from engine.model.model_config import ModelConfig
from engine.redact import Redactor

__all__ = ["VectorReader", "embeddings_path", "embeddings_url", "request_body", "text_key"]


def _method(model: ModelConfig) -> Embeddings:
    method = provider(model.api).embeddings
    if method is None:   # resolve_judges refuses such a model before any call
        raise UsageError(f"model {model.name!r} uses the {model.api} API, which has no embeddings method")
    return method


def embeddings_url(model: ModelConfig) -> str:
    """The model's embeddings method (`{base_url}/embeddings` for OpenAI's protocol), `base_url`'s query kept."""
    return method_url(model.base_url or "", embeddings_path(model))


def embeddings_path(model: ModelConfig) -> str:
    """The path of the model's embeddings method after its base URL (a replica's URL is its base with it)."""
    return _method(model).path(model)


def request_body(model: ModelConfig, texts: Sequence[str]) -> dict[str, Any]:
    """The embeddings request. The model's chat `params` are not sent (max_tokens, temperature mean nothing
    here and some servers refuse unknown fields); they still key the cache through the model's identity."""
    return _method(model).body(model, texts)


def text_key(model: ModelConfig, text: str) -> str:
    """The cache key of one text's vector: the judge cache's key of the one-text request."""
    return cache_key(model, request_body(model, [text]), 0)


class VectorReader:
    """Reads one embeddings reply (a `PreparedRequest.reader`): the vectors land in `vectors`, in input order.

    Read only along the protocol's paths (OpenAI's: `data`, a list of one object per input, each with
    `embedding` and `index`, and `usage.prompt_tokens`; Gemini's: `embeddings`, each with `values`): one vector
    of finite numbers per input, all of one length. Anything else there is a bad response (one error verdict,
    never retried: the same server gives the same reply).

    Args:
        count: How many texts were sent.
        model: The embedding model (its API's reply shape); None: OpenAI's.
    """

    def __init__(self, count: int, model: ModelConfig | None = None) -> None:
        self.count = count
        self._read = (_method(model) if model is not None else OPENAI_EMBEDDINGS).read
        self.vectors: list[tuple[float, ...]] = []

    def read(self, raw: bytes, result: CallResult, redact: Redactor) -> None:
        """Fill `vectors` and the result's token counts from the reply body."""
        try:
            data = loads(raw, "the response body")
        except ValueError:
            raise retry.bad_response("the /embeddings reply is not JSON: "
                                     f"{redact.excerpt(raw[:160].decode('utf-8', 'replace'), 80)}") from None
        items, usage = self._read(data)
        if len(items) != self.count:
            raise retry.bad_response(f"the /embeddings reply has {len(items)} vectors for {self.count} inputs")
        vectors = [_vector(item, i) for i, item in enumerate(items)]
        if len({len(v) for v in vectors}) > 1:
            raise retry.bad_response("the /embeddings reply's vectors differ in length")
        if usage is not None:
            apply_usage(usage, result)
        self.vectors = vectors


def _vector(embedding: Any, i: int) -> tuple[float, ...]:
    if type(embedding) is not list or not embedding:
        raise retry.bad_response(f"data[{i}].embedding is not a list of numbers")
    out = []
    for x in embedding:
        if type(x) not in (int, float) or not math.isfinite(x):
            raise retry.bad_response(f"data[{i}].embedding holds {str(x)[:20]!r}, not a finite number")
        out.append(float(x))
    return tuple(out)
