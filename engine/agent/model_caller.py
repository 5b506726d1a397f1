"""The loop's model on a real endpoint of any chat API (OpenAI chat, Anthropic, Gemini), through the model client.

Each turn is prepared with the client's own `prepare` (so temperature, max_tokens, seed, params and
streaming follow exactly the single-turn precedence) from the test with its messages replaced by the
conversation so far; `ModelClient.call` then brings its retries, per-try timeouts and key handling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from engine.client.client import ModelClient
from engine.client.providers import provider
from engine.client.request import PreparedRequest, RequestSettings, prepare
from engine.client.response import CallResult
from engine.client.window import Dispatch
from engine.errors import ConfigError
from engine.model.model_config import ModelConfig
from engine.model.test import Test
from engine.model.tools import Tool

__all__ = ["EndpointCaller"]


class EndpointCaller:
    """Calls one model for one conversation; pass it as `run_conversation`'s `call_model`.

    Args:
        client: The run's client.
        model: The model to call; it must use a chat API (`chat`, `anthropic`, `gemini`).
        test: The test (its settings and offered tools; its messages are replaced each turn).
        settings: The run-wide request settings.
        tools: The tools to offer instead of `test.tools` (their OpenAI definitions), or None.
        dispatch: The slots each model call's tries wait for (the run's, `engine.client.window`), held per
            call only, never across the tool delays between calls; None for none.
        cache_as: Each turn's sample index in the response cache (`ModelClient.call`), or None for none.
        attempt: The attempt index (each attempt's requests carry their own seed, `prepare`).

    Raises:
        ConfigError: The model uses the completions API, which has no tool calls.
    """

    def __init__(self, client: ModelClient, model: ModelConfig, test: Test, settings: RequestSettings, *,
                 tools: Sequence[Tool] | None = None, dispatch: Dispatch | None = None,
                 cache_as: int | None = None, attempt: int = 0) -> None:
        if not provider(model.api).chat:
            raise ConfigError(f"model '{model.name}' uses the {model.api} API; agent tests need a chat API "
                              "(`api: chat`, `anthropic` or `gemini`)")
        self._client = client
        self._model = model
        self._test = test if tools is None else replace(test, tools=tuple(tool.definition for tool in tools))
        self._settings = settings
        self._dispatch = dispatch
        self._started = False
        self._cache_as = cache_as
        self._attempt = attempt
        self.last_request: PreparedRequest | None = None   # the resolved settings the results row records

    async def __call__(self, messages: list[dict[str, Any]]) -> CallResult:
        """Send the conversation so far; a failed call comes back as a result with `error` set."""
        request = prepare(self._model, replace(self._test, messages=tuple(messages)), self._settings,
                          attempt=self._attempt)
        self.last_request = request
        # A stop of the run ends the first call while it waits to be sent, never a conversation under way
        first, self._started = not self._started, True
        return await self._client.call(self._model, request, cache_as=self._cache_as, dispatch=self._dispatch,
                                       stoppable=first)
