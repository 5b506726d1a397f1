"""Trajectory evaluators beyond the data-driven cases: async scoring, the child verdict, the loader's hook."""

from __future__ import annotations

import asyncio

from engine.agent.golden import replay_golden
from engine.evaluators import score, score_async
from engine.evaluators.trajectory import TRANSCRIPT_ONLY, conversation_kinds_in
from engine.model.answer import Answer
from engine.model.scoring import ScoringContext
from engine.model.transcript import Transcript
from engine.suite.agent import compile_golden
from engine.suite.tools import compile_tools
from tests.factories import make_test

TOOLS, _ = compile_tools({"lookup": {"returns": [{"result": {"id": 7}, "set": {"looked": True}}]}})


def _transcript() -> Transcript:
    turns, problems = compile_golden([{"tool_calls": [{"name": "lookup", "arguments": {}}]}, "Found id 7."])
    assert problems == []
    return asyncio.run(replay_golden(turns, [{"role": "user", "content": "find it"}], TOOLS))


SPEC = {"all": [{"final_answer": {"all": [{"contains": "7"}, {"contains": "id", "name": "says id"}]}},
                {"state": {"looked": True}}, {"tool_call": {"name": "lookup", "at": 1}}]}


def test_async_scoring_gives_the_same_verdict_as_sync() -> None:
    transcript = _transcript()
    test = make_test(eval=SPEC)
    ctx = ScoringContext(test, test.variables, transcript=transcript)
    sync = score(test, transcript.answer(), ctx)
    assert sync.passed and sync == asyncio.run(score_async(test, transcript.answer(), ctx))


def test_final_answer_keeps_its_child_verdicts_for_the_evaluators_column() -> None:
    transcript = _transcript()
    test = make_test(eval=SPEC)
    verdict = score(test, transcript.answer(), ScoringContext(test, test.variables, transcript=transcript))
    paths = [path for path, _ in verdict.walk()]
    assert paths == ["all", "all/0.final_answer", "all/0.final_answer/0.all", "all/0.final_answer/0.all/0.contains",
                     "all/0.final_answer/0.all/1.contains", "all/1.state", "all/2.tool_call"]
    assert [v.name for _, v in verdict.walk()][4] == "says id"


def test_the_child_of_final_answer_sees_the_final_answer_not_the_scored_answer() -> None:
    transcript = _transcript()
    test = make_test(eval={"final_answer": {"equals": "Found id 7."}})
    verdict = score(test, Answer(text="something else"), ScoringContext(test, test.variables, transcript=transcript))
    assert verdict.passed and verdict.children[0].kind == "equals"


def test_the_loader_can_name_every_transcript_only_node() -> None:
    spec = {"all": [{"contains": "x"}, {"not": {"state": {"a": 1}}}, {"max_turns": 3},
                    {"final_answer": {"contains": "y"}}]}
    assert list(conversation_kinds_in(spec)) == [(("all", 1, "not", "state"), "state"),
                                                 (("all", 2, "max_turns"), "max_turns"),
                                                 (("all", 3, "final_answer"), "final_answer")]
    assert list(conversation_kinds_in({"tool_sequence": ["a"], "order": "any"})) == []
    assert {"max_turns", "final_answer", "state", "outcome", "turns", "tool_status",
            "failed_commands"} == TRANSCRIPT_ONLY


def test_the_child_of_final_answer_is_rendered_once_with_the_tests_variables() -> None:
    turns, _ = compile_golden(["Say {{ braces }} literally."])
    transcript = asyncio.run(replay_golden(turns, [{"role": "user", "content": "q"}], TOOLS))
    test = make_test(eval={"final_answer": {"contains": "{{ word }}"}}, variables={"word": "{{ braces }}"})
    verdict = score(test, transcript.answer(), ScoringContext(test, test.variables, transcript=transcript))
    assert verdict.passed and not verdict.error, verdict.reason
