"""The record of one conversation: messages as sent, the model-call ledger, tool events, counts, outcome.

A `Transcript` is built by engine.agent.loop's `run_conversation` and read by everything after it: trajectory
evaluators (which calls, in which turns, the final answer, the final state), the results row (counts,
outcome, token totals, the transcript as a list of plain dicts for a Parquet `list<struct>` column).
Times are seconds on the loop's monotonic clock, measured from the start of the conversation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from engine.model.answer import Answer, ToolCall

__all__ = [
    "CallKind",
    "LedgerEntry",
    "Message",
    "Outcome",
    "ToolEvent",
    "ToolStatus",
    "Transcript",
]

Outcome = Literal["completed", "escalated", "capped", "stuck", "failed", "error"]
ToolStatus = Literal["ok", "error", "invented", "bad_args", "failed", "refused"]
CallKind = Literal["tool_calls", "answer", "error"]

@dataclass(frozen=True, slots=True)
class Message:
    """One message of the conversation, as sent to the model (or as the model sent it).

    Args:
        role: "system", "user", "assistant" or "tool".
        content: The text; None for an assistant turn that only called tools.
        tool_calls: The calls of an assistant turn, each with the id its `tool` answer refers to.
        tool_call_id: For a `tool` message: the call it answers.
        reasoning: An assistant turn's reasoning text: recorded, never sent back.
        turn: The model call this message came from or answers (0 for the opening messages).
    """

    role: str
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    reasoning: str | None = None
    turn: int = 0

    def to_openai(self) -> dict[str, Any]:
        """The message as the chat completions API takes it."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}   # each provider sends a null its way
        if self.tool_calls:
            out["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.raw_arguments}}
                                 for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One model call of the conversation.

    Args:
        turn: 1 for the first model call, 2 for the next...
        kind: What the reply was: "tool_calls", "answer" (no tool call), or "error" (the call failed).
        started_s: When the call was sent.
        latency_s: The client's latency of the last try (None when unknown).
        ttft_provider_s: Time to the first byte of the answer.
        ttft_visible_s: Time to the first visible token or tool call (streaming only).
        prompt_tokens: Input tokens, None when the server sent no usage.
        completion_tokens: Output tokens, None when the server sent no usage.
        retries: Tries after the first that this call needed.
        rate_limit_wait_s: Seconds this call waited out 429 answers before its last try.
        truncated: The reply was cut short (`finish_reason` "length", or a stream that ended early).
        served_model: The model the server said answered.
        fallback: True when `served_model` is another model than the one asked; None when unknown.
        finish_reason: The reply's finish reason.
        error_kind: The failure's kind when `kind` is "error".
        error: The failure's message when `kind` is "error".
    """

    turn: int
    kind: CallKind
    started_s: float
    latency_s: float | None = None
    ttft_provider_s: float | None = None
    ttft_visible_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    retries: int = 0
    rate_limit_wait_s: float = 0.0
    truncated: bool = False
    served_model: str | None = None
    fallback: bool | None = None
    finish_reason: str | None = None
    error_kind: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ToolEvent:
    """One tool call the model made, and how it was answered.

    Args:
        turn: The model call that made it.
        index: Its position among that turn's calls.
        call_id: The id the `tool` message answers.
        name: The tool name as the model wrote it.
        arguments: The decoded arguments; None when they were not valid JSON.
        raw_arguments: The argument text as received.
        status: "ok", "error" (the declared tool failed), "invented" (no such tool offered),
            "bad_args" (not JSON, not an object, or against the tool's parameters); a workspace's built-in
            tools add "failed" (a command that exited non-zero or timed out) and "refused" (a path outside
            the workspace: nothing read or written).
        content: The `tool` message text the model read.
        rule: The index of the `returns` rule that answered, or None.
        started_s: When its handler started.
        ended_s: When it answered (after its `delay_s`).
    """

    turn: int
    index: int
    call_id: str
    name: str
    arguments: Any
    raw_arguments: str
    status: ToolStatus
    content: str
    rule: int | None
    started_s: float
    ended_s: float

    @property
    def latency_s(self) -> float:
        """How long the tool took to answer."""
        return self.ended_s - self.started_s


@dataclass(frozen=True, slots=True)
class Transcript:
    """Everything one conversation produced.

    Args:
        messages: Every message in order, the opening ones first.
        ledger: One entry per model call.
        tool_events: One per tool call, in the order the calls were made.
        outcome: "completed" (the model answered without calling a tool, or called a workspace's `finish`),
            "escalated" (it called `ask_human`), "capped" (`max_turns` model calls made, or a
            workspace's `time_limit_s` passed), "stuck" (the same
            call repeated past the limit, or `max_prose_turns` replies in a row without a tool call while
            `finish` is offered), "failed" (the sandbox could not run a built-in tool at all) or "error"
            (a model call failed, or the workspace could not be prepared).
        state: The state variables at the end.
        error: The failure's message when `outcome` is "error".
        elapsed_s: From the first model call sent to the end (model calls and tool delays).
    """

    messages: tuple[Message, ...]
    ledger: tuple[LedgerEntry, ...]
    tool_events: tuple[ToolEvent, ...]
    outcome: Outcome
    state: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    elapsed_s: float = 0.0

    # -- counts -----------------------------------------------------------------------------------

    @property
    def turns(self) -> int:
        """Model calls made (a failed one included)."""
        return len(self.ledger)

    @property
    def prose_turns(self) -> int:
        """Model calls answered without any tool call."""
        return sum(1 for entry in self.ledger if entry.kind == "answer")

    @property
    def tool_calls_made(self) -> int:
        """Tool calls the model made, whatever became of them."""
        return len(self.tool_events)

    @property
    def invented_tools(self) -> int:
        """Calls to a tool that was not offered."""
        return sum(1 for event in self.tool_events if event.status == "invented")

    @property
    def bad_tool_args(self) -> int:
        """Calls whose arguments were not valid JSON or did not fit the tool's parameters."""
        return sum(1 for event in self.tool_events if event.status == "bad_args")

    @property
    def failed_commands(self) -> int:
        """Workspace commands that exited non-zero, timed out or wrote too much."""
        return sum(1 for event in self.tool_events if event.status == "failed")

    @property
    def refused_paths(self) -> int:
        """Built-in file tool calls refused because their path led outside the workspace."""
        return sum(1 for event in self.tool_events if event.status == "refused")

    @property
    def fallbacks(self) -> int:
        """Model calls another model answered."""
        return sum(1 for entry in self.ledger if entry.fallback)

    @property
    def retries(self) -> int:
        """Retries over all model calls."""
        return sum(entry.retries for entry in self.ledger)

    @property
    def prompt_tokens(self) -> int | None:
        """Input tokens over all calls; None when any call's usage is unknown (never a partial sum)."""
        return _total(entry.prompt_tokens for entry in self.ledger)

    @property
    def completion_tokens(self) -> int | None:
        """Output tokens over all calls; None when any call's usage is unknown (never a partial sum)."""
        return _total(entry.completion_tokens for entry in self.ledger)

    def cost(self, price_in: float | None, price_out: float | None) -> float | None:
        """Spend at these prices per 1M tokens; None when unpriced or any call's usage is unknown."""
        if price_in is None and price_out is None:
            return None
        prompt, completion = self.prompt_tokens, self.completion_tokens
        if prompt is None or completion is None:
            return None
        return (prompt * (price_in or 0.0) + completion * (price_out or 0.0)) / 1e6

    def counts(self) -> dict[str, Any]:
        """The per-row figures: turns, prose_turns, tool_calls_made, invented_tools, bad_tool_args, outcome
        (a workspace test's row adds `failed_commands` and `refused_paths`)."""
        return {"turns": self.turns, "prose_turns": self.prose_turns, "tool_calls_made": self.tool_calls_made,
                "invented_tools": self.invented_tools, "bad_tool_args": self.bad_tool_args,
                "outcome": self.outcome}

    # -- what trajectory evaluators read ------------------------------------------------------------

    @property
    def final_answer(self) -> str:
        """The text of the last assistant message ("" when the model never wrote any)."""
        for message in reversed(self.messages):
            if message.role == "assistant":
                return message.content or ""
        return ""

    def answer(self) -> Answer:
        """The final answer as answer evaluators take it (`final_answer: <any answer evaluator>`).

        Its tool calls are the last turn's, so `no_tool_call` on it means "the model stopped calling".
        """
        for message in reversed(self.messages):
            if message.role == "assistant":
                finish = self.ledger[-1].finish_reason if self.ledger else None
                return Answer(text=message.content or "", tool_calls=message.tool_calls, finish_reason=finish,
                              reasoning=message.reasoning)
        return Answer()

    def calls(self) -> Iterator[tuple[int, ToolCall]]:
        """(turn, call) for every tool call the model made, in order."""
        for message in self.messages:
            if message.role == "assistant":
                for call in message.tool_calls:
                    yield message.turn, call

    def to_openai(self) -> list[dict[str, Any]]:
        """The messages as the chat completions API takes them (what the next call would send)."""
        return [message.to_openai() for message in self.messages]

    # -- plain records (future Parquet list<struct> columns) -----------------------------------------

    def records(self) -> list[dict[str, Any]]:
        """One plain dict per message, every dict with the same keys (one struct type).

        An assistant message carries its model call's figures (latency, TTFT, tokens, retries,
        served model, fallback); a `tool` message carries its tool event (name, status, rule,
        latency); the other fields are None.
        """
        by_turn = {entry.turn: entry for entry in self.ledger}
        by_call = {(event.turn, event.call_id): event for event in self.tool_events}
        out = []
        for message in self.messages:
            entry = by_turn.get(message.turn) if message.role == "assistant" else None
            event = by_call.get((message.turn, message.tool_call_id or "")) if message.role == "tool" else None
            out.append({
                "turn": message.turn,
                "role": message.role,
                "content": message.content,
                "reasoning": message.reasoning,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.raw_arguments}
                               for c in message.tool_calls],
                "tool_call_id": message.tool_call_id,
                "tool_name": event.name if event else None,
                "tool_status": event.status if event else None,
                "tool_rule": event.rule if event else None,
                "tool_latency_s": event.latency_s if event else None,
                "latency_s": entry.latency_s if entry else None,
                "ttft_provider_s": entry.ttft_provider_s if entry else None,
                "ttft_visible_s": entry.ttft_visible_s if entry else None,
                "prompt_tokens": entry.prompt_tokens if entry else None,
                "completion_tokens": entry.completion_tokens if entry else None,
                "retries": entry.retries if entry else None,
                "truncated": entry.truncated if entry else None,
                "served_model": entry.served_model if entry else None,
                "fallback": entry.fallback if entry else None,
            })
        return out

    def ledger_records(self) -> list[dict[str, Any]]:
        """One plain dict per model call."""
        names = [f.name for f in fields(LedgerEntry)]
        return [{name: getattr(entry, name) for name in names} for entry in self.ledger]

    def tool_event_records(self) -> list[dict[str, Any]]:
        """One plain dict per tool call; `arguments` as the raw text (decoded values vary in type)."""
        keys = [f.name for f in fields(ToolEvent) if f.name != "arguments"]
        return [{**{name: getattr(event, name) for name in keys}, "latency_s": event.latency_s}
                for event in self.tool_events]


def _total(values: Iterator[int | None] | Sequence[int | None]) -> int | None:
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total
