"""The judge's grade parsing and sample aggregation against hand-computed values, with a scripted caller
(an in-process `JudgeCaller`: what it returns is the judge's reply; the run-level tests use the real client)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from engine.evaluators import compile_spec
from engine.evaluators.judge import JUDGE_PROMPT, REASK, parse_grade, parse_scale
from engine.evaluators.scoring import context, score_node_async
from engine.model.answer import Answer
from engine.model.scoring import JudgeReply
from tests.factories import make_test

ROOT = Path(__file__).resolve().parents[2]


class Scripted:
    """Replies in order; records what it was asked."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.asked: list[dict[str, Any]] = []

    async def judge(self, model: str | None, messages: list[dict[str, Any]], **kw: Any) -> JudgeReply:
        self.asked.append({"model": model, "messages": messages, **kw})
        return JudgeReply(self.texts.pop(0), prompt_tokens=7, completion_tokens=3, cost=0.001)


def grade(spec: dict[str, Any], caller: Scripted, answer: str = "Paris") -> Any:
    test = make_test(suite="s", id="t", file="s.yaml", line=1, messages=({"role": "user", "content": "Capital?"},),
                     prompt="Capital?", eval=spec)
    node = compile_spec(spec, {"golden": "Paris"})
    return asyncio.run(score_node_async(node, Answer(text=answer), context(test, caller=caller), 1.0))


@pytest.mark.parametrize(("scale", "reply", "want"), [
    ("pass_fail", '{"reasoning": "r", "grade": "pass"}', ("pass", "r")),
    ("1-5", '```json\n{"reasoning": "r", "grade": "4"}\n```', (4, "r")),
    ("0-10", '{"grade": 7.0}', (7, "")),
    ("1-5", '{"reasoning": "r", "grade": 6}', "the grade 6 is not one of the scale's grades"),
    ("pass_fail", '{"reasoning": "r", "grade": true}', "the grade true is not one of the scale's grades"),
    ("pass_fail", 'pass', "it is not a JSON object"),
    ("pass_fail", '{"reasoning": "r"}', 'it has no "grade"'),
])
def test_parse_grade(scale: str, reply: str, want: Any) -> None:
    assert parse_grade(reply, parse_scale(scale)) == want


@pytest.mark.parametrize(("reply", "want"), [
    ("```json" + " " * 200_000 + "x", "it is not a JSON object"),   # spaces a fence regex backtracks on
    ("```" + "\n" * 200_000 + '{"grade": "pass"}' + " " * 200_000 + "```", ("pass", "")),
    ('{"grade": ' + "[" * 200_000 + "]" * 200_000 + "}", "it is not a JSON object"),   # nested past the stack
])
def test_a_hostile_judge_reply_is_read_in_one_pass(reply: str, want: Any) -> None:
    assert parse_grade(reply, parse_scale("pass_fail")) == want


def test_numeric_samples_average_and_record_the_spread() -> None:
    caller = Scripted(*(f'{{"reasoning": "r{g}", "grade": {g}}}' for g in (2, 5, 4)))
    verdict = grade({"judge": {"rubric": "r", "scale": "1-5", "samples": 3}}, caller)
    # scores 0.25, 1.0, 0.75: mean 2/3; the reasoning closest to the mean is sample 3's (0.75)
    assert verdict.score == pytest.approx(2 / 3) and not verdict.passed
    assert verdict.reason == "judge grade 3.66667 (3 samples): r4"
    spread = verdict.details["spread"]
    assert spread["min"] == 0.25 and spread["max"] == 1.0 and spread["stdev"] == pytest.approx(0.3118, abs=1e-4)
    assert verdict.details["judge_calls"] == 3 and verdict.details["judge_cost"] == pytest.approx(0.003)
    assert [a["sample"] for a in caller.asked] == [0, 1, 2]


def test_a_tied_vote_goes_to_the_lowest_score() -> None:
    caller = Scripted('{"grade": "pass"}', '{"grade": "fail"}')
    verdict = grade({"judge": {"rubric": "r", "samples": 2}}, caller)
    assert verdict.score == 0.0 and verdict.details["spread"] == {"agreement": 0.5, "counts": {"pass": 1, "fail": 1}}


def test_a_threshold_and_a_weight_apply_to_a_judge() -> None:
    caller = Scripted('{"grade": 6}', '{"grade": "pass"}')
    spec = {"all": [{"judge": {"rubric": "r", "scale": "0-10"}, "threshold": 0.5, "weight": 3},
                    {"judge": "polite"}]}
    verdict = grade(spec, caller)
    assert verdict.score == pytest.approx((3 * 0.6 + 1) / 4) and verdict.children[0].passed


def test_the_reask_carries_the_bad_reply_and_a_good_second_reply_counts() -> None:
    caller = Scripted("looks fine", '{"reasoning": "ok", "grade": "pass"}')
    verdict = grade({"judge": {"rubric": "says {{ golden }}", "reference": "{{ golden }}"}}, caller)
    assert verdict.passed and verdict.details["judge_calls"] == 2
    second = caller.asked[1]["messages"]
    assert second[1] == {"role": "assistant", "content": "looks fine"}
    assert second[2]["content"].startswith("Your reply could not be read: it is not a JSON object.")
    first = caller.asked[0]["messages"][0]["content"]
    assert "[Rubric]\nsays Paris" in first and "[Reference answer]\nParis" in first and "Capital?" in first


def test_a_reply_unreadable_twice_is_an_error_that_keeps_its_scale() -> None:
    # `engine analyze` pools verdicts by (judge model, scale): an error without its scale was listed under "(?)"
    caller = Scripted("looks fine", '{ "reasoning": "cut off by max_tok')
    verdict = grade({"judge": {"rubric": "r", "scale": "1-5"}}, caller)
    assert verdict.error and not verdict.passed and "unreadable twice" in verdict.reason
    assert verdict.details["scale"] == "1-5" and verdict.details["judge_calls"] == 2


def test_the_docs_quote_the_judge_prompt_and_the_reask_verbatim() -> None:
    doc = (ROOT / "docs" / "evaluators.md").read_text(encoding="utf-8")
    assert "```jinja\n" + JUDGE_PROMPT + "\n```" in doc
    assert "```text\n" + REASK + "\n```" in doc
    assert re.search(r"^### `judge`$", doc, flags=re.MULTILINE)
