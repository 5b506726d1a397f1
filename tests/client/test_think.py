"""Reasoning is split off once, by the client: evaluators score the visible text as it is."""

from __future__ import annotations

import pytest

from engine.evaluators import score
from engine.model.answer import Answer
from tests.client.test_model_client import call
from tests.factories import make_test
from tests.fake_openai import FakeOpenAI, Reply


@pytest.mark.parametrize(("content", "text", "reasoning"), [
    ("<think>The answer might be Lyon.</think>\nParis", "Paris", "The answer might be Lyon."),
    ("  <THINK>Lyon?</Think>\n\nParis", "Paris", "Lyon?"),
    ("<think>Paris is probably", "", "Paris is probably"),      # cut by max_tokens: all reasoning
    ("Paris <think>x</think>", "Paris <think>x</think>", None),  # not leading: kept as written
])
@pytest.mark.parametrize("stream", [True, False])
async def test_a_leading_think_block_becomes_reasoning(fake_openai: FakeOpenAI, stream: bool, content: str,
                                                       text: str, reasoning: str | None) -> None:
    fake_openai.script(Reply(content=content))
    result = await call(fake_openai, stream=stream)
    assert (result.text, result.reasoning) == (text, reasoning)


def test_evaluators_never_see_the_reasoning() -> None:
    test = make_test(eval={"not_contains": "Lyon"})
    assert score(test, Answer(text="Paris", reasoning="The answer might be Lyon.")).passed
