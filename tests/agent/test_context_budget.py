"""The context budget (engine/agent/context.py): what is trimmed, in which order, and how it is counted.

The end-to-end proof (request bodies a loopback server received, the counts in Parquet) is in
tests/run/test_context_run.py; these pin the order and the estimate on plain message lists.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.agent.context import CHARS_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS, ContextBudget, trimmed_marker

OPENING = [{"role": "system", "content": "You are careful."}, {"role": "user", "content": "Read the logs."}]


def turn(n: int, output_chars: int) -> list[dict[str, Any]]:
    """One model turn: an assistant call and its tool answer of `output_chars` characters."""
    call = {"id": f"c{n}", "type": "function", "function": {"name": "read", "arguments": json.dumps({"part": n})}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": str(n) * output_chars, "tool_call_id": f"c{n}"}]


def tokens(messages: list[dict[str, Any]]) -> float:
    return sum(len(json.dumps(m, ensure_ascii=False)) / CHARS_PER_TOKEN + MESSAGE_OVERHEAD_TOKENS for m in messages)


def conversation(turns: int, chars: int = 3000) -> list[dict[str, Any]]:
    messages = list(OPENING)
    for n in range(1, turns + 1):
        messages += turn(n, chars)
    return messages


def test_within_budget_nothing_changes_and_nothing_is_counted() -> None:
    budget = ContextBudget(context_tokens=100_000, reply_tokens=1000)
    messages = conversation(3)
    budget.fit(OPENING)
    assert budget.fit(messages) == messages
    assert budget.counts() == {"trimmed_requests": 0, "trimmed_messages": 0}


def test_oldest_tool_outputs_are_trimmed_first_and_stay_trimmed() -> None:
    # each turn is ~1,000 tokens by the estimate; room for about three of them
    budget = ContextBudget(context_tokens=3600, reply_tokens=200)
    budget.fit(OPENING)
    sent = [budget.fit(conversation(n)) for n in range(1, 7)]
    tool_contents = [[m["content"] for m in body if m["role"] == "tool"] for body in sent]
    trimmed = [[c.startswith("[tool output trimmed") for c in contents] for contents in tool_contents]
    assert trimmed[0] == [False] and trimmed[1] == [False, False] and trimmed[2] == [False, False, False]
    assert trimmed[3] == [True, False, False, False]           # the oldest one first
    assert trimmed[4] == [True, True, True, False, False]      # as many as it takes, oldest first
    assert trimmed[5] == [True, True, True, True, False, False]
    for flags in trimmed:                                        # always a prefix: oldest first
        assert flags == sorted(flags, reverse=True)
    assert tool_contents[5][0] == trimmed_marker(3000)
    assert all(tokens(body) <= budget.limit for body in sent)
    assert sent[5][:2] == OPENING                                # the opening is never touched
    assert budget.counts() == {"trimmed_requests": 3, "trimmed_messages": 4}


def test_whole_old_turns_go_next_never_the_opening_or_the_latest_turn() -> None:
    # so small that even the trimmed markers of eight turns do not fit: old turns are dropped as pairs
    budget = ContextBudget(context_tokens=600, reply_tokens=100)
    budget.fit(OPENING)
    messages = conversation(8, chars=600)
    body = budget.fit(messages)
    assert body[:2] == OPENING
    assert body[-2:] == messages[-2:]                            # the latest turn whole
    kept_calls = [m["tool_calls"][0]["id"] for m in body if m["role"] == "assistant"]
    kept_answers = [m["tool_call_id"] for m in body if m["role"] == "tool"]
    assert kept_calls == kept_answers                            # every tool answer keeps its call
    assert kept_calls[-1] == "c8" and "c1" not in kept_calls
    assert tokens(body) <= budget.limit
    dropped = len(messages) - len(body)
    marked = sum(1 for m in body if str(m["content"]).startswith("[tool output trimmed"))
    assert budget.counts() == {"trimmed_requests": 1, "trimmed_messages": dropped + marked}


def test_when_nothing_else_is_left_the_latest_outputs_are_trimmed_and_the_request_is_sent() -> None:
    budget = ContextBudget(context_tokens=400, reply_tokens=100)
    budget.fit(OPENING)
    messages = conversation(1, chars=5000)
    body = budget.fit(messages)
    assert body[-1]["content"] == trimmed_marker(5000)
    assert body[:3] == messages[:3]
    # an opening that alone is too big cannot be trimmed: sent as it is (the server decides)
    big = [{"role": "user", "content": "x" * 10_000}]
    alone = ContextBudget(context_tokens=400, reply_tokens=100)
    assert alone.fit(big) == big
    assert alone.counts() == {"trimmed_requests": 0, "trimmed_messages": 0}


@pytest.mark.parametrize(("reported_ratio", "expected_trims"), [(0.5, 0), (2.0, 2)])
def test_the_servers_prompt_tokens_correct_the_estimate(reported_ratio: float, expected_trims: int) -> None:
    """A server counting fewer tokens than chars/3 lets more through (never below chars/4); one counting
    more makes the budget trim sooner."""
    budget = ContextBudget(context_tokens=4000, reply_tokens=200)
    budget.fit(OPENING)
    first = budget.fit(conversation(1))
    budget.observe(int(tokens(first) * reported_ratio))
    body = budget.fit(conversation(3))
    assert sum(1 for m in body if str(m["content"]).startswith("[tool output trimmed")) == expected_trims


def test_the_floor_of_the_calibration_is_characters_over_four() -> None:
    budget = ContextBudget(context_tokens=2600, reply_tokens=100)
    budget.fit(OPENING)
    first = budget.fit(conversation(1))
    budget.observe(1)                              # an absurd count cannot make the budget trust everything
    body = budget.fit(conversation(4))             # ~4,100 raw tokens: over 2,500 even at the 0.75 floor
    assert any(str(m["content"]).startswith("[tool output trimmed") for m in body)
    assert first == conversation(1)


def test_the_tool_definitions_take_room_too() -> None:
    tools = [{"type": "function", "function": {"name": "read", "description": "d" * 3000}}]
    with_tools = ContextBudget(context_tokens=2600, reply_tokens=100, tools=tools)
    without = ContextBudget(context_tokens=2600, reply_tokens=100)
    for budget in (with_tools, without):
        budget.fit(OPENING)
        budget.fit(conversation(2))
    assert (with_tools.trimmed_messages, without.trimmed_messages) == (1, 0)
