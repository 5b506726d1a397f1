"""A golden reference conversation, compiled, and a model that plays it back through the loop.

A test's golden for an agent is the model's side of the conversation, one item per model call::

    golden:
      - tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      - "It is 18°C and cloudy: take a light jacket."       # a string: an answer without tool calls

`GoldenCaller` answers each model call with the next turn, whatever the tools returned, so replaying
a golden through `run_conversation` with the declared tools shows whether the test's own checks pass
on it (the golden self-check) and lets `builtin: golden` run a suite with no model at all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from engine.agent.loop import Offered, run_conversation
from engine.agent.mcp.sandboxed import SandboxedStart
from engine.agent.mcp.servers import McpServers
from engine.client.response import CallResult
from engine.errors import ClientError, McpServerError
from engine.evaluators import score
from engine.evaluators.base import error
from engine.evaluators.scoring import context
from engine.model.agent import AgentSettings, GoldenTurn
from engine.model.test import Test
from engine.model.transcript import Message, Transcript
from engine.model.verdict import Verdict
from engine.workspace.tools import bind_tools
from engine.workspace.workspace import Workspace, WorkspaceError

__all__ = ["GOLDEN_MODEL", "GoldenCaller", "replay_golden"]

GOLDEN_MODEL = "golden"   # the served model a replay reports


class GoldenCaller:
    """A model that answers each call with the next golden turn.

    Args:
        turns: The compiled golden conversation.
        served_model: The model name its replies report.
    """

    def __init__(self, turns: Sequence[GoldenTurn], served_model: str = GOLDEN_MODEL) -> None:
        self._turns = tuple(turns)
        self._played = 0
        self._served = served_model

    async def __call__(self, messages: list[dict[str, Any]]) -> CallResult:
        """The next turn; an error result once the golden has no turn left."""
        if self._played >= len(self._turns):
            error = ClientError(f"the golden conversation has {len(self._turns)} turn(s); the loop asked for "
                                f"turn {self._played + 1}", kind="golden_exhausted")
            return CallResult(served_model=self._served, latency_s=0.0, error=error)
        turn = self._turns[self._played]
        self._played += 1
        return CallResult(text=turn.content, tool_calls=turn.tool_calls, served_model=self._served,
                          finish_reason="tool_calls" if turn.tool_calls else "stop", latency_s=0.0)


async def replay_golden(turns: Sequence[GoldenTurn], messages: Sequence[Mapping[str, Any]],
                        tools: Mapping[str, Offered], settings: AgentSettings | None = None, *,
                        state: Mapping[str, Any] | None = None) -> Transcript:
    """Play a golden conversation through the loop with the declared tool results.

    Token counts stay None (a replay sends nothing to count); the ledger's served model is `golden`.
    """
    return await run_conversation(GoldenCaller(turns), messages, tools, settings, state=state,
                                  asked_model=GOLDEN_MODEL)


def score_golden_conversation(test: Test) -> Verdict:
    """The golden self-check of an agent test: replay its golden conversation, score it as the run would.

    The turns are played through the same loop with the suite's declared tool results, state and limits,
    and the transcript is scored by `engine.evaluators.score` with the same context the run builds, so
    a golden that passes here passes the run (`engine validate` hands this to the suite loader).

    A test with MCP servers (`mcp:`) replays through them: each is started for the replay and stopped after,
    so the golden's calls get the server's real answers.

    A workspace test's golden is a reference trajectory (the tool calls that solve the task): it is
    replayed in a fresh workspace and must pass; and the checks must *fail* on the untouched workspace
    (after `setup`, before any work), else the test is broken: an error verdict says so.

    Args:
        test: An agent test (`test.agent` set) with golden turns.
    """
    if test.workspace is None:
        if test.mcp:
            test, transcript = asyncio.run(_replay_with_servers(test))
            if transcript.outcome == "error" and transcript.error:
                return error(f"the golden conversation could not be replayed: {transcript.error}", "mcp")
        else:
            transcript = asyncio.run(replay_golden(test.golden_turns, test.messages, test.agent_tools, test.agent,
                                                   state=test.initial_state))
        return score(test, transcript.answer(), context(test, transcript=transcript))
    untouched = Transcript(tuple(Message(str(m.get("role")), str(m.get("content"))) for m in test.messages), (),
                           (), "completed", dict(test.initial_state))
    try:
        return _score_in_workspace(test, untouched)
    except WorkspaceError as exc:
        return error(f"the golden check could not prepare the workspace: {exc}", "workspace_check")


def _score_in_workspace(test: Test, untouched: Transcript) -> Verdict:
    spec = test.workspace
    assert spec is not None
    with _workspace(test) as workspace:
        before = score(test, untouched.answer(), context(test, transcript=untouched, workspace=workspace))
    if before.passed:
        return error(f"its checks pass on the untouched workspace, before the model did anything ({before.reason}): "
                     "the test is broken; make the check fail on the seed", "workspace_check")
    with _workspace(test) as workspace:
        if test.mcp:
            test, transcript = asyncio.run(_replay_with_servers(test, workspace))
            if transcript.outcome == "error" and transcript.error:
                return error(f"the golden conversation could not be replayed: {transcript.error}", "mcp")
        else:
            tools: dict[str, Offered] = {**test.agent_tools, **bind_tools(spec.tools, workspace)}
            transcript = asyncio.run(replay_golden(test.golden_turns, test.messages, tools, test.agent,
                                                   state=test.initial_state))
        return score(test, transcript.answer(), context(test, transcript=transcript, workspace=workspace))


async def _replay_with_servers(test: Test, workspace: Workspace | None = None) -> tuple[Test, Transcript]:
    """The golden replayed with the test's MCP servers started for it (stopped after): the test as offered
    (the servers' tool definitions added, as a run offers them) and the transcript. A server that does not
    start ends the replay as an error."""
    tools: dict[str, Offered] = dict(test.agent_tools)
    if workspace is not None and test.workspace is not None:
        tools.update(bind_tools(test.workspace.tools, workspace))
    sandboxed = SandboxedStart(workspace) if workspace is not None else None
    try:
        async with McpServers().tools_for(test.mcp, taken=tools, cwd=workspace.root if workspace is not None else None,
                                          sandbox_argv=sandboxed) as offered:
            tools.update(offered)
            test = replace(test, tools=test.tools + tuple(tool.definition for tool in offered.values()))
            return test, await replay_golden(test.golden_turns, test.messages, tools, test.agent,
                                             state=test.initial_state)
    except McpServerError as exc:
        return test, Transcript((), (), (), "error", dict(test.initial_state), str(exc))
    finally:
        if sandboxed is not None:
            sandboxed.close()


@contextlib.contextmanager
def _workspace(test: Test) -> Iterator[Workspace]:
    assert test.workspace is not None
    workspace = Workspace.create(test.workspace)
    try:
        yield workspace
    finally:
        workspace.close()
