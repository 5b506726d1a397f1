"""Hypothesis properties of the trajectory evaluators, over real transcripts from the agent loop."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.agent.golden import replay_golden
from engine.evaluators import score
from engine.model.agent import AgentSettings, GoldenTurn
from engine.model.answer import ToolCall
from engine.model.scoring import ScoringContext
from engine.model.transcript import Transcript
from engine.model.verdict import Verdict
from engine.suite.tools import compile_tools
from tests.factories import make_test

NAMES = ["f", "g", "h"]
TOOLS, _ = compile_tools({
    "f": {"returns": [{"result": "ok", "set": {"f_called": True}}]},
    "g": {"returns": [{"when": {"x": [1]}, "result": "one"}, {"error": "not one"}]},
    "h": {"returns": [{"result": "{{ x }}", "set": {"last_h": "{{ x }}"}}]},
})

# A conversation: turns of 1..3 calls (names from NAMES and one invented), then an answer.
turns_of_calls = st.lists(st.lists(st.tuples(st.sampled_from([*NAMES, "zz"]), st.integers(0, 2)),
                                   min_size=1, max_size=3), max_size=4)


def play(turns: list[list[tuple[str, int]]]) -> Transcript:
    golden = [GoldenTurn(tool_calls=tuple(ToolCall.from_arguments(name, {"x": x}) for name, x in turn))
              for turn in turns] + [GoldenTurn(content="done")]
    # No stuck or capped end: every scripted turn is played, so the expectations below come from `turns`.
    settings = AgentSettings(max_turns=len(golden), max_repeats=12)
    return asyncio.run(replay_golden(golden, [{"role": "user", "content": "q"}], TOOLS, settings))


def judge(spec: dict[str, Any], transcript: Transcript) -> Verdict:
    test = make_test(eval=spec)
    return score(test, transcript.answer(), ScoringContext(test, test.variables, transcript=transcript))


@settings(max_examples=40, deadline=None)
@given(turns_of_calls, st.lists(st.sampled_from(NAMES), min_size=1, max_size=3))
def test_orders_nest_exact_then_subsequence_then_any(turns: list[list[tuple[str, int]]], want: list[str]) -> None:
    transcript = play(turns)
    made = [name for turn in turns for name, _ in turn]
    verdicts = {order: judge({"tool_sequence": want, "order": order}, transcript)
                for order in ("exact", "subsequence", "any")}
    assert all(0 <= v.score <= 1 and not v.error for v in verdicts.values())
    assert verdicts["exact"].passed == (made == want)
    assert not verdicts["exact"].passed or verdicts["subsequence"].passed
    assert not verdicts["subsequence"].passed or verdicts["any"].passed
    assert verdicts["any"].passed == (not Counter(want) - Counter(made))


@settings(max_examples=40, deadline=None)
@given(turns_of_calls, st.integers(0, 6))
def test_counts_agree_with_the_transcript(turns: list[list[tuple[str, int]]], limit: int) -> None:
    transcript = play(turns)
    made = sum(len(turn) for turn in turns)
    invented = sum(1 for turn in turns for name, _ in turn if name not in NAMES)
    assert judge({"max_calls": limit}, transcript).passed == (made <= limit)
    assert judge({"max_turns": limit}, transcript).passed == (len(turns) + 1 <= limit)
    assert judge({"no_invented_tools": True}, transcript).passed == (invented == 0)


@settings(max_examples=40, deadline=None)
@given(turns_of_calls)
def test_the_final_state_always_passes_its_own_state_check(turns: list[list[tuple[str, int]]]) -> None:
    transcript = play(turns)
    if transcript.state:
        assert judge({"state": dict(transcript.state)}, transcript).passed
        flipped = {name: [f"not {value}"] for name, value in transcript.state.items()}
        failed = judge({"state": flipped}, transcript)
        assert failed.score == 0 and all(name in failed.reason for name in flipped)


@settings(max_examples=40, deadline=None)
@given(turns_of_calls)
def test_parallel_passes_exactly_when_one_turn_holds_the_pair(turns: list[list[tuple[str, int]]]) -> None:
    transcript = play(turns)
    together = any({"f", "g"} <= {name for name, _ in turn} for turn in turns)
    assert judge({"parallel": ["f", "g"]}, transcript).passed == together
