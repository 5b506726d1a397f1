"""The context budget of an agent conversation: what a request leaves out when the whole would not fit.

A model with `context_tokens` in models.yaml holds that many tokens, prompt and reply together, so a
request's messages must fit in `context_tokens - max_tokens` (the reply's room, as vLLM and llama.cpp
count it). Before each model call the conversation is fitted, in this order, stopping as soon as it fits::

    1. tool outputs, oldest first, except the latest turn's  -> "[tool output trimmed: N chars]"
    2. whole earlier turns, oldest first: an assistant message with its tool answers, dropped together
       (a `tool` message without the call it answers is refused by the API)
    3. the latest turn's tool outputs, oldest first          -> the same marker
    never: the opening messages (system prompt, first user message, any turns the test itself wrote)
           and the latest assistant message

A request that still does not fit is sent as it is: the estimate is conservative, and the server's
own count decides (a refusal becomes the conversation's error row, with the server's message).

Trims persist: a message trimmed for one request stays trimmed in every later request, so the model
never sees an output come back, and the prefix stays stable for the server's prompt cache. The
transcript in the results keeps every message whole; only the request bodies are trimmed.

Counting tokens without a tokenizer (none is available for an arbitrary served model): a message
costs `len(its JSON) / 3 + 4` tokens. Three characters per token is conservative (English prose runs
near four, code and JSON near three), so a first estimate errs towards trimming early. Once a reply
reports `prompt_tokens`, its ratio to the estimate of the request it answered corrects every later
estimate (never below 0.75, i.e. never fewer tokens than characters / 4; no upper bound, so a server
that counts more - CJK text, an unusual tokenizer - is believed).

Counts (per results row, see docs/results.md): `trimmed_requests`, the model calls sent with at least one
message trimmed or dropped; `trimmed_messages`, the distinct messages trimmed or dropped by the end.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

__all__ = ["CHARS_PER_TOKEN", "MESSAGE_OVERHEAD_TOKENS", "MIN_CALIBRATION", "ContextBudget", "budget_for",
           "trim_counts", "trimmed_marker"]

CHARS_PER_TOKEN = 3.0            # the first, conservative guess
MESSAGE_OVERHEAD_TOKENS = 4      # role, separators and the chat template's markers, per message
MIN_CALIBRATION = 0.75           # a calibrated estimate is never below characters / 4


class _Reply(Protocol):
    @property
    def prompt_tokens(self) -> int | None: ...


R = TypeVar("R", bound=_Reply)


def trimmed_marker(chars: int) -> str:
    """What a trimmed tool output becomes."""
    return f"[tool output trimmed: {chars} chars]"


def _raw_tokens(message: Mapping[str, Any]) -> float:
    """The uncalibrated estimate of one message (its JSON text, as it travels in the request)."""
    return len(json.dumps(message, ensure_ascii=False)) / CHARS_PER_TOKEN + MESSAGE_OVERHEAD_TOKENS


class ContextBudget:
    """Fits one conversation's requests into a model's context; one instance per conversation.

    Args:
        context_tokens: The model's context (`context_tokens` in models.yaml).
        reply_tokens: The room kept for the reply: the request's `max_tokens`.
        tools: The tool definitions sent with every request (they take room too).
    """

    def __init__(self, context_tokens: int, reply_tokens: int, tools: Sequence[Mapping[str, Any]] = ()) -> None:
        self.context_tokens = context_tokens
        self.reply_tokens = reply_tokens
        self._fixed = (len(json.dumps(list(tools), ensure_ascii=False)) / CHARS_PER_TOKEN) if tools else 0.0
        self._opening: int | None = None      # the opening messages: never trimmed
        self._sizes: list[float] = []         # raw estimate per message index (messages never change)
        self._trimmed: set[int] = set()
        self._dropped: set[int] = set()
        self._factor = 1.0
        self._last_raw: float | None = None
        self.trimmed_requests = 0

    @property
    def limit(self) -> int:
        """The most tokens a request's messages may take."""
        return self.context_tokens - self.reply_tokens

    @property
    def trimmed_messages(self) -> int:
        """Distinct messages trimmed or dropped so far."""
        return len(self._trimmed | self._dropped)

    def counts(self) -> dict[str, int]:
        """The row's figures."""
        return {"trimmed_requests": self.trimmed_requests, "trimmed_messages": self.trimmed_messages}

    def estimate(self, messages: Sequence[Mapping[str, Any]]) -> float:
        """The calibrated token estimate of a request with these messages."""
        return (self._fixed + sum(_raw_tokens(m) for m in messages)) * self._factor

    def guard(self, call_model: Callable[[list[dict[str, Any]]], Awaitable[R]]
              ) -> Callable[[list[dict[str, Any]]], Awaitable[R]]:
        """`call_model` with every request fitted first and every reply's `prompt_tokens` observed."""
        async def call(messages: list[dict[str, Any]]) -> R:
            reply = await call_model(self.fit(messages))
            self.observe(reply.prompt_tokens)
            return reply
        return call

    def observe(self, prompt_tokens: int | None) -> None:
        """Correct later estimates by the server's count of the request just sent (None: no change)."""
        if prompt_tokens and self._last_raw:
            self._factor = max(prompt_tokens / self._last_raw, MIN_CALIBRATION)

    def fit(self, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The messages to send: the conversation with trims applied (old ones kept, new ones as needed)."""
        if self._opening is None:
            self._opening = len(messages)
        for message in messages[len(self._sizes):]:
            self._sizes.append(_raw_tokens(message))
        raw = self._fixed + sum(self._size(i, m) for i, m in enumerate(messages) if i not in self._dropped)
        budget = self.limit / self._factor      # compared in raw units: one division, not one per message
        if raw > budget:
            raw = self._trim(messages, raw, budget)
        self._last_raw = raw
        if self._trimmed or self._dropped:
            self.trimmed_requests += 1
        return [self._view(i, m) for i, m in enumerate(messages) if i not in self._dropped]

    # -- the order of trimming ----------------------------------------------------------------------------

    def _trim(self, messages: Sequence[Mapping[str, Any]], raw: float, budget: float) -> float:
        opening = self._opening or 0
        starts = [i for i in range(opening, len(messages)) if messages[i].get("role") == "assistant"]
        latest = starts[-1] if starts else len(messages)
        groups = [range(a, b) for a, b in itertools.pairwise(starts)]   # every turn but the latest
        for i in range(opening, latest):                  # 1. earlier tool outputs, oldest first
            if raw <= budget:
                return raw
            raw -= self._trim_one(i, messages[i])
        for group in groups:                              # 2. earlier turns, oldest first
            if raw <= budget:
                return raw
            for i in group:
                if i not in self._dropped:
                    raw -= self._size(i, messages[i])
                    self._dropped.add(i)
        for i in range(latest, len(messages)):            # 3. the latest turn's tool outputs
            if raw <= budget:
                return raw
            raw -= self._trim_one(i, messages[i])
        return raw

    def _trim_one(self, index: int, message: Mapping[str, Any]) -> float:
        """Trim one tool output if that saves room; returns the raw tokens saved."""
        if message.get("role") != "tool" or index in self._trimmed or index in self._dropped:
            return 0.0
        before = self._sizes[index]
        after = _raw_tokens(self._marked(message))
        if after >= before:
            return 0.0
        self._trimmed.add(index)
        return before - after

    def _size(self, index: int, message: Mapping[str, Any]) -> float:
        return _raw_tokens(self._marked(message)) if index in self._trimmed else self._sizes[index]

    def _view(self, index: int, message: Mapping[str, Any]) -> dict[str, Any]:
        return self._marked(message) if index in self._trimmed else dict(message)

    @staticmethod
    def _marked(message: Mapping[str, Any]) -> dict[str, Any]:
        content = message.get("content")
        return {**message, "content": trimmed_marker(len(content) if isinstance(content, str) else 0)}


def trim_counts(budget: ContextBudget | None) -> dict[str, int]:
    """An agent row's trim figures: zeros for a conversation without a budget (nothing was trimmed)."""
    return budget.counts() if budget is not None else {"trimmed_requests": 0, "trimmed_messages": 0}


def budget_for(context_tokens: int | None, reply_tokens: int,
               tools: Sequence[Mapping[str, Any]] = ()) -> ContextBudget | None:
    """A budget for a model with `context_tokens`, None for one without (no trimming at all)."""
    return None if context_tokens is None else ContextBudget(context_tokens, reply_tokens, tools)

