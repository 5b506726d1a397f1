"""One agent job: a whole conversation (`engine.agent.run_conversation`) scored and made into one row.

The runner's worker calls `run_agent_job` instead of one `client.call` when the test has `agent:`.
What the run's machinery sees of it::

    slots         the model's window and the run's slots, held for each model call only
                  (`EndpointCaller(dispatch=...)`), never across tool delays; counted in flight as they are sent
    stop          a first call still waiting to be sent when the run stops raises `CallStopped`: the
                  conversation leaves no row, and `--resume` runs it; one under way is never cut
    --max-cost    each reply's cost is added to the spend as it comes (`on_cost`); passing the budget
                  ends dispatch, it never cuts a conversation mid-way
    journal       the row is the whole conversation: one cut by kill -9 has no row, so `--resume`
                  runs it again from its first turn (a conversation is never half-stored)
    MCP servers   the test's and the model's (engine.agent.mcp): `scope: attempt` ones started here and
                  stopped with the conversation, `scope: run` ones shared through the runner's `McpServers`;
                  their tools are offered after the test's own, so the response cache keys each turn by the
                  listed definitions and every earlier tool result: a cached turn is replayed only while the
                  server answers as it did (its tools are always called), and a different result is a new request

The model of the row is either a real endpoint (`EndpointCaller`: the client's streaming, retries,
per-try timeouts) or, for `builtin: golden`, the test's golden conversation (`GoldenCaller`), played
in-process: no server, no HTTP, no port (`golden_reply` does the same for a single-turn test).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from engine.agent.context import budget_for, trim_counts
from engine.agent.golden import GoldenCaller
from engine.agent.loop import run_conversation
from engine.agent.mcp.sandboxed import SandboxedStart
from engine.agent.mcp.servers import McpServers
from engine.agent.model_caller import EndpointCaller
from engine.client.client import ModelClient
from engine.client.request import PreparedRequest, RequestSettings, prepare
from engine.client.response import CallResult
from engine.client.window import Dispatch
from engine.errors import ClientError, ConfigError, McpServerError
from engine.evaluators.scoring import context
from engine.local.registry import GOLDEN
from engine.model.answer import Answer
from engine.model.model_config import ModelConfig, cost_of
from engine.model.scoring import ScoringContext
from engine.model.test import Test
from engine.model.transcript import Transcript
from engine.model.verdict import Verdict
from engine.results.rows import build_agent_row, record_of, set_verdict
from engine.suite.mcp import merge_servers
from engine.workspace.tools import bind_tools
from engine.workspace.workspace import Workspace, WorkspaceError

__all__ = ["golden_reply", "run_agent_job"]

_Caller = Callable[[list[dict[str, Any]]], Awaitable[CallResult]]   # EndpointCaller, GoldenCaller



class _Recorder:
    """Wraps the loop's model: keeps every reply (for the row), reports each cost."""

    def __init__(self, inner: _Caller, model: ModelConfig, on_cost: Callable[[float], None]) -> None:
        self._inner = inner
        self._model = model
        self._on_cost = on_cost
        self.replies: list[CallResult] = []

    async def __call__(self, messages: list[dict[str, Any]]) -> CallResult:
        reply = await self._inner(messages)
        self.replies.append(reply)
        cost = cost_of(self._model, reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens,
                       reply.cache_write_tokens)
        if cost is not None and not reply.cached:   # a reply from the response cache was not paid for
            self._on_cost(cost)
        return reply


async def run_agent_job(*, client: ModelClient, model: ModelConfig, test: Test, attempt: int, run_id: str,
                        settings: RequestSettings, dispatch: Dispatch, on_cost: Callable[[float], None],
                        score: Callable[[Test, Answer, ScoringContext], Awaitable[tuple[Verdict | None, str | None]]],
                        caller: Any = None, cache_as: int | None = None,
                        mcp: McpServers | None = None) -> dict[str, Any]:
    """Run one conversation and return its row.

    Args:
        client: The run's client.
        model: The model (a real endpoint, or `builtin: golden`).
        test: An agent test (`test.agent` set).
        attempt: The repeat index.
        run_id: The run's id.
        settings: The run's request settings.
        dispatch: The slots each model call waits for (`engine.client.window`); held per model call.
        on_cost: Called with each priced reply's cost as it comes.
        score: Scores the final answer where each of its checks belongs (the runner's): (test, answer, ctx) ->
            (verdict, evaluator error).
        caller: The run's judge caller (`judge` evaluators await it), or None.
        cache_as: The sample index each turn's request is looked up under in the response cache, or None
            for no cache (`ModelClient.call`): every turn is a request of its own.
        mcp: The run's MCP servers (`scope: run` ones are shared through it), or None: a set of its own.
    """
    started_us = time.time_ns() // 1000
    request = prepare(model, test, settings, attempt=attempt)
    workspace: Workspace | None = None
    tools: dict[str, Any] = dict(test.agent_tools)
    async with contextlib.AsyncExitStack() as stack:
        if test.workspace is not None:
            try:   # a fresh copy of the seed for every attempt; its setup failing is an error row, not a fail
                workspace = await asyncio.to_thread(Workspace.create, test.workspace)
            except WorkspaceError as exc:
                return _setup_failed(run_id, model, test, attempt, request, started_us,
                                     ClientError(str(exc), kind="workspace_setup"))
            stack.push_async_callback(asyncio.to_thread, workspace.close)
            tools.update(bind_tools(test.workspace.tools, workspace))
        servers = merge_servers(test.mcp, model.mcp)
        if servers:
            sandboxed = SandboxedStart(workspace) if workspace is not None else None
            if sandboxed is not None:
                stack.callback(sandboxed.close)
            try:   # the servers' tools, listed when they start; one that does not start is an error row
                offered = await stack.enter_async_context((mcp or McpServers()).tools_for(
                    servers, taken=tools, cwd=workspace.root if workspace is not None else None,
                    sandbox_argv=sandboxed))
            except McpServerError as exc:
                return _setup_failed(run_id, model, test, attempt, request, started_us,
                                     ClientError(str(exc), kind=McpServerError.kind))
            tools.update(offered)
            # offered beside the test's own tools: the requests, the context budget and the checks see them all
            test = replace(test, tools=test.tools + tuple(tool.definition for tool in offered.values()))
            request = prepare(model, test, settings, attempt=attempt)
        inner = _caller(client, model, test, settings, dispatch, cache_as, attempt)
        recorder = _Recorder(inner, model, on_cost)
        budget = budget_for(model.context_tokens, request.max_tokens, test.tools)
        transcript = await run_conversation(recorder, test.messages, tools, test.agent,
                                            state=test.initial_state, asked_model=model.model, budget=budget)
        if isinstance(inner, EndpointCaller) and inner.last_request is not None:
            request = inner.last_request
        failure = (ClientError(transcript.error, kind=McpServerError.kind)
                   if transcript.outcome == "error" and transcript.error and not any(
                       r.error is not None for r in recorder.replies) else None)
        row = build_agent_row(run_id=run_id, model=model, test=test, attempt=attempt, request=request,
                              transcript=transcript, replies=recorder.replies, verdict=None,
                              evaluator_error=None, started_us=started_us,
                              ended_us=time.time_ns() // 1000, trims=trim_counts(budget), failure=failure)
        if transcript.outcome != "error":
            answer = transcript.answer()
            ctx = context(test, transcript=transcript, caller=caller, workspace=workspace, record=record_of(row))
            set_verdict(row, *await score(test, answer, ctx))
        if workspace is not None:
            row["workspace_files"], row["workspace_diff"] = await asyncio.to_thread(_final_state, workspace)
            row["failed_commands"], row["refused_paths"] = transcript.failed_commands, transcript.refused_paths
        return row


def _caller(client: ModelClient, model: ModelConfig, test: Test, settings: RequestSettings,
            dispatch: Dispatch, cache_as: int | None, attempt: int) -> _Caller:
    """The conversation's model: the test's golden turns for `builtin: golden`, else the endpoint."""
    if model.builtin == GOLDEN:
        return (GoldenCaller(test.golden_turns, served_model=model.model) if test.golden_turns
                else _failing(_no_golden(test)))
    try:
        # test.tools are the offered definitions, in the test's order: the first request of a test without MCP
        # servers is byte for byte the one a single-turn run of this test would send
        return EndpointCaller(client, model, test, settings, dispatch=dispatch, cache_as=cache_as, attempt=attempt)
    except ConfigError as exc:
        return _failing(ClientError(str(exc), kind="config"))


def _setup_failed(run_id: str, model: ModelConfig, test: Test, attempt: int, request: PreparedRequest,
                  started_us: int, failure: ClientError) -> dict[str, Any]:
    """The error row of a conversation that could not start (its workspace's setup, an MCP server)."""
    return build_agent_row(run_id=run_id, model=model, test=test, attempt=attempt, request=request,
                           transcript=Transcript((), (), (), "error", test.initial_state, str(failure)),
                           replies=[CallResult(error=failure)], verdict=None, evaluator_error=None,
                           started_us=started_us, ended_us=time.time_ns() // 1000)


def _final_state(workspace: Workspace) -> tuple[list[str], str]:
    """The final workspace's file list and its diff against the seed (the row's workspace columns)."""
    return workspace.files(), workspace.diff()


def golden_reply(model: ModelConfig, test: Test) -> CallResult:
    """`builtin: golden` on a single-turn test: its golden as the model's reply (`Answer.from_golden`).

    In-process, no HTTP: the reply goes through the same scoring, row and journal as a served one. Token
    counts stay null (nothing was counted), latency 0; a test without a golden is an error row.
    """
    if test.golden is None:
        return CallResult(served_model=model.model, latency_s=0.0, error=_no_golden(test))
    answer = Answer.from_golden(test.golden)
    return CallResult(text=answer.text, tool_calls=answer.tool_calls, finish_reason=answer.finish_reason,
                      served_model=model.model, latency_s=0.0)


def _no_golden(test: Test) -> ClientError:
    return ClientError(f"test '{test.id}' has no golden, so `builtin: golden` has nothing to answer; add "
                       "`golden:` to the test (an agent test: the model's turns)", kind="no_golden")


def _failing(error: ClientError) -> _Caller:
    """A model whose every call fails with `error` (e.g. an agent test on a completions-API model)."""
    async def call(messages: list[dict[str, Any]]) -> CallResult:
        return CallResult(error=error)
    return call
