"""The agent loop: call the model, answer its tool calls with the declared results, call again.

    messages + tools ──► call_model ──► reply with tool calls? ── no ──► completed
                             ▲                 │ yes
                             │                 ▼
                             │    answer each call in call order (invented / bad_args / the tool's rule),
                             │    delays of one turn's calls overlapping; append one `tool` message each
                             │                 │
                             └── turns < max_turns and no call repeated past max_repeats ──► else capped / stuck

A failed model call (the client's `error`, after its retries) ends the conversation as `error`.
Workspace tests (engine.workspace) add built-in tools whose answer is awaited (a command runs in a thread)
and may end the conversation (`finish` -> completed, `ask_human` -> escalated, a broken sandbox -> failed);
when `finish` is offered, a reply without a tool call is answered with a reminder instead of ending the
conversation, and `max_prose_turns` such replies in a row end it as `stuck`. MCP servers' tools
(engine.agent.mcp) are awaited the same way; a server that fails (`McpServerError`) ends the conversation as
`error`, each call of that turn answered with its message. A workspace's `time_limit_s`
bounds the whole conversation: past it, the model call or the tool calls in progress are cancelled (their
commands stopped, each call answered with an error) and the conversation ends as `capped`.
Every tool call the model makes is answered before the loop decides to stop, so a transcript never
ends with an unanswered call (and a `set:` on the last allowed turn still changes the state).

The model is an injected async callable (messages -> a `CallResult`-like reply): `EndpointCaller` for
a real endpoint (its retries, caps and deadlines included), `GoldenCaller` to replay a reference
conversation, anything else in tests.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol, cast

from engine.agent.context import ContextBudget
from engine.agent.mcp.tool import McpTool
from engine.client.providers.base import ECHO
from engine.errors import ClientError, McpServerError
from engine.model.agent import AgentSettings
from engine.model.answer import ToolCall
from engine.model.tools import Tool, ToolAnswer, error_text
from engine.model.transcript import CallKind, LedgerEntry, Message, Outcome, ToolEvent, ToolStatus, Transcript
from engine.results.rows import is_fallback
from engine.workspace.tools import BuiltinAnswer, BuiltinTool

Offered = Tool | BuiltinTool | McpTool   # a declared tool (rules from YAML), a workspace built-in, an MCP server's
#: The user message that answers a prose reply while `finish` is offered (the model must act or finish).
PROSE_REMINDER = ("You did not call a tool. Go on with the task using the tools, and call {finish} when it is "
                  "done.")

__all__ = ["ModelCaller", "ModelReply", "run_conversation"]


class ModelReply(Protocol):
    """What the loop reads of one model call: the fields of `engine.client.response.CallResult`."""

    @property
    def text(self) -> str: ...
    @property
    def reasoning(self) -> str | None: ...
    @property
    def tool_calls(self) -> tuple[ToolCall, ...]: ...
    @property
    def echo(self) -> Any: ...
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def served_model(self) -> str | None: ...
    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def completion_tokens(self) -> int | None: ...
    @property
    def latency_s(self) -> float | None: ...
    @property
    def ttft_provider_s(self) -> float | None: ...
    @property
    def ttft_visible_s(self) -> float | None: ...
    @property
    def retries(self) -> int: ...
    @property
    def rate_limit_wait_s(self) -> float: ...
    @property
    def truncated(self) -> bool: ...
    @property
    def error(self) -> ClientError | None: ...


#: The model: the conversation so far, as chat messages -> its reply. Never raises for a failed call
#: (the reply's `error` says so); raising is reserved for cancellation and bugs.
ModelCaller = Callable[[list[dict[str, Any]]], Awaitable[ModelReply]]


async def run_conversation(call_model: ModelCaller, messages: Sequence[Mapping[str, Any]],
                           tools: Mapping[str, Offered], settings: AgentSettings | None = None, *,
                           state: Mapping[str, Any] | None = None, asked_model: str | None = None,
                           clock: Callable[[], float] = time.perf_counter,
                           budget: ContextBudget | None = None) -> Transcript:
    """Run one conversation to its end.

    Args:
        call_model: The model (see `ModelCaller`).
        messages: The opening messages (system, user...), sent as they are.
        tools: The tools offered in this test, by name; a call to any other name is an invented tool.
        settings: The limits; the defaults when None.
        state: The state variables at the start (`set:` rules change them).
        asked_model: The model id asked for, to tell a fallback in the ledger (None: fallback unknown).
        clock: Monotonic seconds (injected so tests can read the recorded times).
        budget: The model's context budget: each request is fitted by it (`engine.agent.context`); None sends all.

    Returns:
        The transcript; its `outcome` says how the conversation ended.
    """
    settings = settings or AgentSettings()
    if budget is not None:
        call_model = budget.guard(call_model)
    origin = clock()
    wire = [dict(m) for m in messages]
    history = [Message(role=str(m.get("role")), content=_text(m.get("content"))) for m in messages]
    ledger: list[LedgerEntry] = []
    events: list[ToolEvent] = []
    current = dict(state or {})
    seen: Counter[str] = Counter()
    used_ids: set[str] = set()
    outcome: Outcome = "capped"
    failure: str | None = None
    finish = next((name for name, tool in tools.items() if getattr(tool, "builtin", None) == "finish"), None)
    prose_in_a_row = 0
    limit = _time_limit(tools)
    deadline = None if limit is None else asyncio.get_running_loop().time() + limit
    for turn in range(1, settings.max_turns + 1):
        started = clock() - origin
        try:
            async with asyncio.timeout_at(deadline):
                reply = await call_model(list(wire))
        except TimeoutError:
            outcome = "capped"   # the time limit: the row tells it from max_turns by its `turns`
            break
        calls = _with_unique_ids(reply.tool_calls, turn, used_ids)
        kind: CallKind = "error" if reply.error is not None else "tool_calls" if calls else "answer"
        ledger.append(_ledger_entry(turn, kind, started, reply, asked_model))
        if reply.error is not None:
            outcome, failure = "error", str(reply.error)
            break
        said = Message("assistant", reply.text if not calls else (reply.text or None), calls,
                       reasoning=reply.reasoning, turn=turn)
        history.append(said)
        sent = said.to_openai()
        if reply.echo is not None:   # what the API asks back with this turn (signed thinking): sent, not recorded
            sent[ECHO] = reply.echo
        wire.append(sent)
        if not calls:
            prose_in_a_row += 1
            if finish is None:
                outcome = "completed"
                break
            if prose_in_a_row >= settings.max_prose_turns:
                outcome = "stuck"
                break
            nudge = Message("user", PROSE_REMINDER.format(finish=finish), turn=turn)
            history.append(nudge)
            wire.append(nudge.to_openai())
            continue
        prose_in_a_row = 0
        try:
            async with asyncio.timeout_at(deadline):
                answered, ended = await _answer_turn(turn, calls, tools, current, clock, origin)
        except TimeoutError:
            stopped = f"the task's time limit of {limit:g} s passed; this call was stopped"
            answered, ended = _unanswered(turn, calls, stopped, clock() - origin), "capped"
        except McpServerError as exc:   # a tool's server failed: the conversation is an error row, not the model's
            answered, ended = _unanswered(turn, calls, str(exc), clock() - origin), "error"
            failure = str(exc)
        events.extend(answered)
        for event in answered:
            message = Message("tool", event.content, tool_call_id=event.call_id, turn=turn)
            history.append(message)
            wire.append(message.to_openai())
        if ended is not None:
            outcome = ended
            break
        seen.update(_call_key(call) for call in calls)
        if any(count > settings.max_repeats + 1 for count in seen.values()):
            outcome = "stuck"
            break
    return Transcript(tuple(history), tuple(ledger), tuple(events), outcome, current, failure, clock() - origin)


def _unanswered(turn: int, calls: Sequence[ToolCall], why: str, now: float) -> list[ToolEvent]:
    """Every call of a turn answered with the error `why` (the turn was stopped before its tools answered)."""
    return [ToolEvent(turn=turn, index=i, call_id=str(call.id), name=call.name, arguments=call.arguments,
                      raw_arguments=call.raw_arguments, status="error", content=error_text(why), rule=None,
                      started_s=now, ended_s=now) for i, call in enumerate(calls)]


def _time_limit(tools: Mapping[str, Offered]) -> float | None:
    """The workspace's `time_limit_s` (the built-in tools are bound to it), or None."""
    limits = [tool.workspace.spec.time_limit_s for tool in tools.values()
              if isinstance(tool, BuiltinTool) and tool.workspace.spec.time_limit_s is not None]
    return min(limits) if limits else None


def _with_unique_ids(calls: Sequence[ToolCall], turn: int, used: set[str]) -> tuple[ToolCall, ...]:
    """The calls, each with an id no earlier call of the conversation has.

    A missing id, or one already used (some local servers number calls per turn: `call_0` again and
    again), becomes `call_<turn>_<index>`, in the assistant message sent back and its `tool` answer alike.
    """
    out = []
    for i, call in enumerate(calls):
        if not call.id or call.id in used:
            fresh = f"call_{turn}_{i}"
            while fresh in used:   # a model may have sent that very id earlier
                fresh += "_"
            call = replace(call, id=fresh)
        used.add(str(call.id))
        out.append(call)
    return tuple(out)


def _text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)   # multimodal parts: recorded as their JSON


def _ledger_entry(turn: int, kind: CallKind, started: float, reply: ModelReply,
                  asked_model: str | None) -> LedgerEntry:
    error = reply.error
    return LedgerEntry(
        turn=turn, kind=kind, started_s=started, latency_s=reply.latency_s, ttft_provider_s=reply.ttft_provider_s,
        ttft_visible_s=reply.ttft_visible_s, prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens, retries=reply.retries,
        rate_limit_wait_s=reply.rate_limit_wait_s, truncated=reply.truncated, served_model=reply.served_model,
        fallback=is_fallback(asked_model, reply.served_model) if asked_model else None,
        finish_reason=reply.finish_reason, error_kind=error.kind if error is not None else None,
        error=str(error) if error is not None else None)


def _call_key(call: ToolCall) -> str:
    """The identity of a call for the repeat count: its name and its arguments (key order ignored)."""
    if call.valid_json:
        return call.name + "\x1f" + json.dumps(call.arguments, sort_keys=True)
    return call.name + "\x1f" + call.raw_arguments


async def _answer_turn(turn: int, calls: Sequence[ToolCall], tools: Mapping[str, Offered], state: dict[str, Any],
                       clock: Callable[[], float], origin: float) -> tuple[list[ToolEvent], Outcome | None]:
    """Answer one turn's calls: resolved in call order (each sees the state the previous ones left; a built-in's
    or an MCP server's answer is awaited there, one call after another), then the declared delays waited out
    concurrently; the events come back in call order, with the outcome the
    first call that ends the conversation names (a workspace's `finish`, `ask_human`), or None."""
    resolved: list[tuple[ToolStatus, ToolAnswer | BuiltinAnswer]] = []
    spans: list[tuple[float, float] | None] = []   # a built-in's or an MCP server's own time (it acts while resolved)
    for call in calls:
        begun = clock() - origin
        status, answer = await _resolve(call, tools, state)
        acted = isinstance(answer, BuiltinAnswer) or isinstance(tools.get(call.name), McpTool)
        spans.append((begun, clock() - origin) if acted and status not in ("invented", "bad_args") else None)
        state.update(answer.state_changes)
        resolved.append((status, answer))
    ended = next((cast(Outcome, answer.ends) for _, answer in resolved
                  if isinstance(answer, BuiltinAnswer) and answer.ends), None)

    async def handle(delay_s: float, span: tuple[float, float] | None) -> tuple[float, float]:
        if span is not None:
            return span
        start = clock() - origin
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        return start, clock() - origin

    times = await asyncio.gather(*(handle(answer.delay_s, span) for (_, answer), span in zip(resolved, spans,
                                                                                           strict=True)))
    return [ToolEvent(turn=turn, index=i, call_id=str(call.id), name=call.name, arguments=call.arguments,
                      raw_arguments=call.raw_arguments, status=status, content=answer.content, rule=answer.rule,
                      started_s=start, ended_s=end)
            for i, (call, (status, answer), (start, end)) in enumerate(zip(calls, resolved, times, strict=True))
            ], ended


async def _resolve(call: ToolCall, tools: Mapping[str, Offered], state: Mapping[str, Any]
                   ) -> tuple[ToolStatus, ToolAnswer | BuiltinAnswer]:
    tool = tools.get(call.name)
    if tool is None:
        offered = ", ".join(sorted(tools)) or "none"
        message = f"there is no tool named {call.name!r}; the tools you can call are: {offered}"
        return "invented", ToolAnswer("error", error_text(message), message, None)
    if not call.valid_json:
        message = (f"the arguments of {call.name} are not valid JSON ({call.raw_arguments[:200]!r}); "
                   "send one JSON object that fits the tool's parameters")
        return "bad_args", ToolAnswer("error", error_text(message), message, None)
    problem = tool.argument_problem(call.arguments)
    if problem is not None:
        message = f"bad arguments for {call.name}: {problem}"
        return "bad_args", ToolAnswer("error", error_text(message), message, None)
    given = tool.answer(call.arguments, state)
    answer: ToolAnswer | BuiltinAnswer = await given if inspect.isawaitable(given) else given
    return cast(ToolStatus, answer.status), answer
