"""What a model call sends: the run's request settings, one test's request prepared for its model's API, and the
URL of the model's method.

`prepare` resolves a test's temperature, token limit and seed once, and its model's provider
(`engine.client.providers`) turns the engine's request into the API's body; `engine.client.client.ModelClient`
sends what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.client.providers import WireRequest, method_url, provider
from engine.client.response import CallResult
from engine.model.model_config import ModelConfig, max_tokens_floor
from engine.model.test import Test
from engine.redact import Redactor
from engine.suite.content_parts import wire_messages
from engine.suite.conversation import named_for_api

__all__ = ["PreparedRequest", "RequestSettings", "endpoint_url", "method_path", "prepare", "temperature_of"]

DEFAULT_TEMPERATURE = 0.0


@dataclass(frozen=True)
class RequestSettings:
    """Run-wide request settings from the command line (None = not given).

    Args:
        temperature: `--temperature`: used when the test sets none.
        max_tokens: `--max-tokens`: the default floor; a test's larger value wins.
        stream: False for `--no-stream`.

    `--seed` is not here: it orders the run and is never sent (a request's seed: `prepare`).
    """

    temperature: float | None = None
    max_tokens: int | None = None
    stream: bool = True


@dataclass(frozen=True)
class PreparedRequest:
    """A request ready to send, and the resolved settings the results row records."""

    url: str
    body: dict[str, Any]
    stream: bool
    temperature: float | None
    max_tokens: int
    seed: int | None
    extra: dict[str, Any] = field(default_factory=dict)
    # Reads a whole (non-streamed) reply into the result; None: the provider's reader of its API's reply.
    # Another endpoint (embeddings, engine.judge.embeddings) brings its own reader.
    reader: Callable[[bytes, CallResult, Redactor], None] | None = None
    api: str = "chat"   # the provider whose wire the body is (`engine.client.providers`)
    # The method's path after the base URL (`/chat/completions`, `/models/m:generateContent`): a replica's URL is
    # its base with it, so the method follows the request (`method_url`).
    method: str = ""
    # API name -> tool key, for tools the API sees under a `name:` of their own: replies are read back to the keys.
    tool_keys: Mapping[str, str] = field(default_factory=dict)


def endpoint_url(model: ModelConfig, base_url: str | None = None, *, stream: bool | None = None) -> str:
    """The full URL of the model's method (`.../v1/chat/completions`, `.../v1/messages`, ...; query kept).

    Args:
        model: The model (its `base_url` and API).
        base_url: Another base URL to use (one of the model's replicas).
        stream: Whether the call streams (Gemini's method differs); None: the model's `stream`.
    """
    return method_url(base_url or model.base_url or "", method_path(model, stream=stream))


def method_path(model: ModelConfig, *, stream: bool | None = None) -> str:
    """The path of the model's method after its base URL (Gemini's differs when streamed); None: the model's."""
    return provider(model.api).path(model, model.stream if stream is None else stream)


def temperature_of(model: ModelConfig, test: Test, settings: RequestSettings) -> float:
    """The temperature a test's requests to `model` go with: the test's, else `--temperature`, else the
    model's params, else 0."""
    if test.temperature is not None:
        return test.temperature
    if settings.temperature is not None:
        return settings.temperature
    value: float = model.params.get("temperature", DEFAULT_TEMPERATURE)   # as written: the body and cache keys
    return value


def prepare(model: ModelConfig, test: Test, settings: RequestSettings, *, inline_images: bool = True,
            attempt: int = 0) -> PreparedRequest:
    """Build the request body for one test.

    Precedence: temperature = the test's, else `--temperature`, else the model's params, else 0;
    max_tokens = max(floor, the test's), where the floor is `--max-tokens`, else the model's
    (`engine.model.model_config.max_tokens_floor`: its `params.max_tokens`, else 1024; a test's value only raises it);
    seed = the model's `params.seed` plus the attempt index (each attempt its own sample on a server that
    honours seeds), none when the params set none; tools go out under their API names (`Test.api_names`)
    with the test's `tool_choice`.

    Args:
        model: The model config (its `params` are passed through).
        test: The rendered test.
        settings: The run-wide settings.
        inline_images: Image files as base64 data URLs (False: a short placeholder, for `--dry-run`).
        attempt: The attempt index (0 for the first), added to the params' seed.

    Raises:
        ImageUnavailable: An image file of the test is gone, unreadable or changed since the suite loaded.
    """
    params = model.params   # read, never changed: no copy
    temperature = temperature_of(model, test, settings)
    floor = settings.max_tokens if settings.max_tokens is not None else max_tokens_floor(model)
    max_tokens = max(floor, test.max_tokens or 0)
    seed = params.get("seed")
    if seed is not None:
        seed = (int(seed) + attempt + 2**63) % 2**64 - 2**63   # kept a 64-bit integer
    stream = settings.stream and model.stream
    api = provider(model.api)
    messages: Any = ()
    if api.chat:
        messages = test.messages if not test.images else \
            wire_messages(test.messages, test.suite_dir, inline=inline_images)
    tools: Any = test.tools
    choice = test.tool_choice if test.tools else None
    if test.api_names:
        messages, tools, choice = named_for_api(messages, tools, choice, test.api_names)
    body = api.build(WireRequest(model=model.model, messages=messages, prompt=test.prompt, tools=tools,
                                 tool_choice=choice, params=params, max_tokens=max_tokens,
                                 temperature=temperature, seed=seed, stream=stream))
    return PreparedRequest(endpoint_url(model, stream=stream), body, stream, temperature, max_tokens, seed,
                           api=model.api, tool_keys={v: k for k, v in test.api_names.items()},
                           method=method_path(model, stream=stream))
