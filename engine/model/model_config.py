"""One named model from models.yaml, its declared rate limits and batch settings, and what its calls cost."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.model.mcp_server import McpServerSpec


@dataclass(frozen=True)
class RateLimit:
    """Limits a provider enforces on one endpoint and key, as declared in models.yaml (None: not limited).

    Args:
        requests_per_minute: Requests a minute.
        tokens_per_minute: Tokens a minute (prompt and `max_tokens` together, as providers count them).
    """

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None


#: The batch APIs' discount on both token prices when a model's `price:` names no batch price: what OpenAI's Batch
#: API, Anthropic's Message Batches and Gemini's batch mode each publish (half the price).
DEFAULT_BATCH_DISCOUNT = 0.5


@dataclass(frozen=True)
class BatchSettings:
    """How a model's single-turn calls are gathered into its provider's batches (`batch:` in models.yaml).

    Args:
        size: The most requests one batch holds; a batch is sent once it is full.
        max_wait_s: The longest the first request of a batch that is not full waits for others before the batch
            is sent as it is.
    """

    size: int = 1000
    max_wait_s: float = 60.0


@dataclass(frozen=True)
class ModelConfig:
    """One named model from models.yaml.

    Args:
        name: The name rows are reported under (`--model NAME`).
        model: The model id sent to the server.
        base_url: The API's base URL (`.../v1`; the method's path is added). None for builtin models until started.
        api: The provider that speaks the API (`engine.client.providers`): "chat", "completions", "anthropic"
            or "gemini".
        api_key_env: Name of the environment variable holding the key (never the key itself).
        api_key_header: Send the key in this header (`api-key`, Azure OpenAI) instead of `Authorization: Bearer`.
        api_key_query: Send the key as this query parameter (`key`) of every request instead of a header.
        concurrency: Calls in flight at most for this model: a hard ceiling under which the engine finds the
            number itself (`engine.client.window`); None: `DEFAULT_CEILING`. The rate-limit budget paces the calls.
        timeout_s: Time limit of each try; a try timed out before its reply started is retried (at most
            max_retries times), one whose reply was still arriving is not (engine.client.retry).
        connect_timeout_s: Time limit of opening a connection (the TCP connect, and TLS), within `timeout_s`:
            an unreachable host fails fast and the try is retried.
        max_retries: Retries after the first try.
        stream: Use server-sent events (default) or one JSON response.
        params: Extra request fields passed through (seed, top_p, ...).
        price_in: Price per 1M input tokens, or None.
        price_out: Price per 1M output tokens, or None.
        price_cache_read: Price per 1M prompt tokens read from the provider's cache, or None: `price_in`.
        price_cache_write: Price per 1M prompt tokens written to the provider's cache, or None: `price_in`.
        builtin: The name of an embedded model the engine starts itself (e.g. "gemma-3-270m").
        max_response_mb: The most bytes one reply may take (MiB); a larger one is an error row.
        structured_output: The server accepts `response_format: {type: json_schema}`: judge calls to
            this model send their reply schema that way (default off: a strict parse and one re-ask).
        context_tokens: The model's context in tokens (prompt and reply), or None: agent conversations that
            outgrow it are trimmed (`engine.agent.context`).
        base_urls: Replicas serving this model (`base_urls:` in models.yaml); calls spread over them
            (`engine.client.replicas`) and `base_url` is the first. Empty for a single endpoint.
        rate_limit: The provider's limits as declared in models.yaml (`rate_limit:`), for providers that publish
            no rate-limit headers; None: paced by the headers and 429s alone (`engine.client.ratelimit`).
        rate_limit_deadline_s: How long one call may wait for the rate limit (paced, or retrying 429, 529 and
            503 answers) before its row is an error.
        cache_identity: What the response and judge caches key this model's endpoint by in place of
            `base_url`: set for an embedded model once its server runs (its port changes every run; the
            identity names the model file's package, the llama-cpp-python release and the engine's server
            code instead, engine.local.cache_identity). None: the URL.
        mcp: MCP servers whose tools this model's agent tests are offered besides the suite's (`mcp:` in its
            entry of models.yaml), or ().
        batch: `batch:` in models.yaml: its `BatchSettings` (`batch: true` is the defaults), False for `batch:
            false` (live even under `engine run --batch`), None when the entry says nothing (live unless `--batch`).
            The run resolves it (`batch_settings`).
        price_batch_in: Price per 1M input tokens of a batched call, or None: `price_in` less `batch_discount`.
        price_batch_out: Price per 1M output tokens of a batched call, or None: `price_out` less `batch_discount`.
        batch_discount: The share of every price a batched call saves when no batch price is given (0.5: half);
            None: the provider's published discount (the run sets it from the provider's batch entry), else
            `DEFAULT_BATCH_DISCOUNT`.
    """

    name: str
    model: str
    base_url: str | None = None
    api: str = "chat"
    api_key_env: str | None = None
    api_key_header: str | None = None
    api_key_query: str | None = None
    concurrency: int | None = None
    timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    max_retries: int = 2
    stream: bool = True
    params: Mapping[str, Any] = field(default_factory=dict)
    price_in: float | None = None
    price_out: float | None = None
    price_cache_read: float | None = None
    price_cache_write: float | None = None
    builtin: str | None = None
    max_response_mb: float = 32.0
    structured_output: bool = False
    context_tokens: int | None = None
    base_urls: tuple[str, ...] = ()
    rate_limit: RateLimit | None = None
    rate_limit_deadline_s: float = 600.0
    cache_identity: str | None = None
    mcp: tuple[McpServerSpec, ...] = field(default=(), compare=False, repr=False)
    batch: BatchSettings | bool | None = None
    price_batch_in: float | None = None
    price_batch_out: float | None = None
    batch_discount: float | None = None


# The max_tokens floor of a model whose `params` set none: room for a reasoning model's thinking and its answer.
DEFAULT_MAX_TOKENS = 1024


def max_tokens_floor(model: ModelConfig) -> int:
    """The least max_tokens a request to `model` goes with: its `params.max_tokens`, else DEFAULT_MAX_TOKENS.

    A floor, not a default: a test that asks for more gets more, one that asks for less is raised to it, so a
    suite written for small models never starves a reasoning model of the tokens it thinks with
    (`engine run --max-tokens` replaces it for a run).
    """
    return int(model.params.get("max_tokens", DEFAULT_MAX_TOKENS))


# The most calls in flight to one model when its entry sets no `concurrency`: far above what any server needs, as
# the adaptive window (engine.client.window), not this, finds how many go at once.
DEFAULT_CEILING = 1024


def ceiling_of(model: ModelConfig) -> int:
    """The most calls in flight to `model`: its `concurrency`, else `DEFAULT_CEILING`."""
    return model.concurrency if model.concurrency is not None else DEFAULT_CEILING


def batch_settings(model: ModelConfig, run_batch: bool) -> BatchSettings | None:
    """How `model`'s single-turn calls are batched in a run, or None when they go live: its entry's `batch:`, else
    the defaults when the run was started with `--batch`; `batch: false` keeps it live either way."""
    if isinstance(model.batch, BatchSettings):
        return model.batch
    if model.batch is None and run_batch:
        return BatchSettings()
    return None


def cost_of(model: ModelConfig, prompt_tokens: int | None, completion_tokens: int | None,
            cached_tokens: int | None = None, cache_write_tokens: int | None = None, *,
            batch: bool = False) -> float | None:
    """Priced spend of one call in the price's currency; None when unpriced or tokens unknown.

    The prompt tokens count the cached ones: those read from the cache (`cached_tokens`) are priced at
    `price_cache_read` and those written to it at `price_cache_write` when the model has them, the rest at
    `price_in`. A `batch` call (answered through the provider's batch API) is priced at `price_batch_in` and
    `price_batch_out` where given; every other price is less `batch_discount`.
    """
    if model.price_in is None and model.price_out is None and not (
            batch and (model.price_batch_in is not None or model.price_batch_out is not None)):
        return None
    if prompt_tokens is None or completion_tokens is None:
        return None
    discount = DEFAULT_BATCH_DISCOUNT if model.batch_discount is None else model.batch_discount
    keep = 1.0 - discount if batch else 1.0   # the share of a live price a batched call pays
    price_in = (model.price_in or 0.0) * keep
    price_out = (model.price_out or 0.0) * keep
    if batch and model.price_batch_in is not None:
        price_in = model.price_batch_in
    if batch and model.price_batch_out is not None:
        price_out = model.price_batch_out
    cost = prompt_tokens * price_in + completion_tokens * price_out
    if cached_tokens and model.price_cache_read is not None:
        cost += cached_tokens * (model.price_cache_read * keep - price_in)
    if cache_write_tokens and model.price_cache_write is not None:
        cost += cache_write_tokens * (model.price_cache_write * keep - price_in)
    return cost / 1e6
