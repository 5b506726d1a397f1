"""`judge` evaluators end to end: `engine run` in a subprocess against the loopback fake server, which plays
the answering model and five judges (one that grades well, one that always says pass, one that returns
malformed output, one that times out, one that flips a coin in a fixed order). Verdicts, costs apart from
the answering model, the judge cache (a re-run and a rescore make zero judge calls, counted at the server)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine

SHOP = """\
suite: shop
tests:
  - id: good
    prompt: "What is the refund policy? (polite)"
    golden: "30 days"
    eval:
      judge:
        rubric: "The answer must mention the {{ golden }} limit."
        reference: "{{ golden }}"
  - id: rude
    prompt: "What is the refund policy? (rude)"
    golden: "30 days"
    eval: {judge: {rubric: "The answer must mention the {{ golden }} limit.", model: grader}}
  - id: five
    prompt: "What is the refund policy? (polite)"
    eval: {judge: {rubric: "Rate how well it explains the 30-day limit.", scale: 1-5}}
  - id: labels
    prompt: "What is the refund policy? (polite)"
    eval:
      judge:
        rubric: "How complete is the answer?"
        scale: [{label: good, score: 1}, {label: meh, score: 0.5}, {label: bad, score: 0}]
  - id: yes
    prompt: "What is the refund policy? (rude)"
    eval: {judge: {rubric: "The answer must mention the 30-day limit.", model: yesman}}
  - id: composed
    prompt: "What is the refund policy? (rude)"
    eval:
      all:
        - {contains: thank}
        - {judge: {rubric: "The answer must mention the 30-day limit."}, must: true}
  - id: broken
    prompt: "What is the refund policy? (polite)"
    eval: {judge: {rubric: "Anything.", model: broken}}
  - id: coin
    prompt: "What is the refund policy? (polite)"
    eval: {judge: {rubric: "Anything.", model: coin, samples: 3}}
"""

SLOW = """\
suite: slow
tests:
  - id: slow
    prompt: "What is the refund policy? (polite)"
    eval: {judge: {rubric: "Anything.", model: slow}}
"""

MODELS = """\
defaults: {{judge: grader}}
models:
  shop:
    base_url: {url}
    model: shop-1
    timeout_s: 5
    price: {{input: 0.5, output: 0.5}}
  grader:
    base_url: {url}
    model: grader-1
    timeout_s: 5
    concurrency: 1
    price: {{input: 1.0, output: 2.0}}
  yesman:
    base_url: {url}
    model: yes-1
    timeout_s: 5
    structured_output: true
  broken:
    base_url: {url}
    model: broken-1
    timeout_s: 5
  coin:
    base_url: {url}
    model: coin-1
    timeout_s: 5
  slow:
    base_url: {url}
    model: slow-1
    timeout_s: 0.3
    max_retries: 1
"""

JUDGES = {"grader-1", "yes-1", "broken-1", "coin-1", "slow-1"}
PER_CALL = (10 * 1.0 + 5 * 2.0) / 1e6     # the fake's usage (10 prompt, 5 completion tokens) at grader's price
ANSWER_COST = (10 * 0.5 + 5 * 0.5) / 1e6


def graded_answer(body: dict[str, Any]) -> str:
    prompt = body["messages"][0]["content"]
    return json.loads(prompt.split("\n[Answer to grade]\n", 1)[1].split("\n", 1)[0])   # one JSON string


def scripted(coin: itertools.cycle) -> Any:
    def respond(body: dict[str, Any]) -> Reply:
        model = body["model"]
        if model == "shop-1":
            text = body["messages"][-1]["content"]
            return Reply(content="You can return it within 30 days." if "polite" in text
                         else "No refunds, thank you.")
        if model == "grader-1":
            prompt = body["messages"][0]["content"]
            good = "30 days" in graded_answer(body)
            if "whole number from 1" in prompt:
                grade: Any = 4 if good else 1
            elif '"good"' in prompt:
                grade = "meh"
            else:
                grade = "pass" if good else "fail"
            return Reply(content=json.dumps({"reasoning": "mentions 30 days" if good else "no limit given",
                                             "grade": grade}))
        if model == "yes-1":
            return Reply(content='{"reasoning": "looks fine", "grade": "pass"}')
        if model == "broken-1":
            return Reply(content="I think it is fine.")
        if model == "coin-1":
            return Reply(content=json.dumps({"reasoning": "coin", "grade": next(coin)}))
        if model == "slow-1":
            return Reply(content='{"reasoning": "late", "grade": "pass"}', delay_s=3)
        raise AssertionError(model)
    return respond


@pytest.fixture
def project(tmp_path: Path, fake_openai: FakeOpenAI) -> dict[str, Any]:
    fake_openai.responder = scripted(itertools.cycle(["pass", "fail", "pass"]))
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "shop.yaml").write_text(SHOP)
    (tmp_path / "slow.yaml").write_text(SLOW)
    models = tmp_path / "models.yaml"
    models.write_text(MODELS.format(url=fake_openai.base_url))
    env = {"ENGINE_JUDGE_CACHE": str(tmp_path / "cache" / "judge.sqlite")}
    return {"suites": suites, "models": models, "env": env, "tmp": tmp_path, "server": fake_openai}


def judge_requests(server: FakeOpenAI, model: str | None = None) -> list[dict[str, Any]]:
    return [b for b in server.requests if b["model"] in JUDGES and (model is None or b["model"] == model)]


def run(project: dict[str, Any], out: str, *paths: Path, options: tuple[str, ...] = ()) -> pd.DataFrame:
    done = engine("run", *map(str, paths or (project["suites"],)), "--models", str(project["models"]),
                  "--model", "shop", "--out", str(project["tmp"] / out), *options, env=project["env"])
    assert done.returncode == 0, done.stderr
    return pd.read_parquet(project["tmp"] / out / "latest").set_index("test_id")


def test_judges_grade_cost_apart_and_compose(project: dict[str, Any]) -> None:
    df = run(project, "r1")
    server = project["server"]
    assert df.loc["good", "score"] == 1.0 and bool(df.loc["good", "passed"])
    assert df.loc["good", "evaluators"][0]["reason"] == "judge grade pass: mentions 30 days"
    assert df.loc["rude", "score"] == 0.0 and not df.loc["rude", "passed"]
    assert df.loc["five", "score"] == pytest.approx(0.75)                # grade 4 on 1-5: (4 - 1) / 4
    assert df.loc["labels", "score"] == pytest.approx(0.5)               # "meh"
    assert bool(df.loc["yes", "passed"])                                 # the yes-man passes a bad answer
    # all: contains thank (1) and the judge (0, must): mean 0.5, failed by the gate
    assert df.loc["composed", "score"] == pytest.approx(0.5) and not df.loc["composed", "passed"]
    assert "required check judge failed" in df.loc["composed", "evaluators"][0]["reason"]
    # coin: pass, fail, pass -> majority pass, three paid calls
    assert bool(df.loc["coin", "passed"]) and df.loc["coin", "judge_calls"] == 3
    assert "(3 samples)" in df.loc["coin", "evaluators"][0]["reason"]

    # costs apart: the answering model's columns hold only its own call
    assert df.loc["good", "cost"] == pytest.approx(ANSWER_COST)
    assert df.loc["good", "judge_calls"] == 1 and df.loc["good", "judge_cost"] == pytest.approx(PER_CALL)
    assert df.loc["good", "judge_prompt_tokens"] == 10 and df.loc["good", "judge_completion_tokens"] == 5
    assert df.loc["good", "prompt_tokens"] == 10
    assert pd.isna(df.loc["yes", "judge_cost"]) and df.loc["yes", "judge_calls"] == 1    # yes-man has no price
    assert df["judge_cost"].sum() == pytest.approx(PER_CALL * 5)         # good, rude, five, labels, composed

    # judge requests: temperature 0, one JSON reply; response_format only where the model allows it
    grader = judge_requests(server, "grader-1")
    assert len(grader) == 5 and all(b["temperature"] == 0 and b["stream"] is False for b in grader)
    assert all("response_format" not in b for b in grader)
    (yes,) = judge_requests(server, "yes-1")
    assert yes["response_format"]["json_schema"]["schema"]["properties"]["grade"]["enum"] == ["pass", "fail"]
    # the rubric was rendered with the test's variables, the reference sent
    good_prompt = next(b for b in grader if "[Reference answer]" in b["messages"][0]["content"])["messages"][0]
    assert "The answer must mention the 30 days limit." in good_prompt["content"]


def test_malformed_judge_is_re_asked_once_then_an_error_verdict(project: dict[str, Any]) -> None:
    df = run(project, "r1")
    first, second = judge_requests(project["server"], "broken-1")
    assert len(first["messages"]) == 1 and len(second["messages"]) == 3
    assert second["messages"][1] == {"role": "assistant", "content": "I think it is fine."}
    assert second["messages"][2]["content"].startswith("Your reply could not be read: it is not a JSON object")
    row = df.loc["broken"]
    assert row["error_kind"] == "evaluator" and pd.isna(row["passed"])
    assert row["error_message"].startswith("judge reply unreadable twice (it is not a JSON object)")
    assert row["judge_calls"] == 2 and pd.isna(row["judge_cost"])


def test_a_judge_that_times_out_is_retried_then_an_error_row(project: dict[str, Any]) -> None:
    df = run(project, "r1", project["tmp"] / "slow.yaml")
    assert len(judge_requests(project["server"], "slow-1")) == 2          # the try and its one retry
    row = df.loc["slow"]
    assert row["error_kind"] == "evaluator"
    assert row["error_message"] == ("judge call failed: slow: no complete answer within 0.3 s "
                                    "(timeout_s in models.yaml, per try)")
    assert row["answer"] == "You can return it within 30 days."           # the answer is kept
    assert row["judge_calls"] == 1 and pd.isna(row["judge_prompt_tokens"])


def test_a_rerun_and_a_rescore_pay_no_judge_twice(project: dict[str, Any]) -> None:
    server = project["server"]
    first = run(project, "r1")
    paid = len(judge_requests(server))
    assert paid == 5 + 1 + 2 + 3   # grader x5, yes-man, broken twice, coin three samples
    server.requests.clear()
    again = run(project, "r2", options=("--no-cache",))   # not the response cache: the judge cache alone
    assert judge_requests(server) == [] and len(server.requests) == 8   # the answering model is called again
    assert (again["judge_calls"] == 0).all() and again["judge_cost"].isna().all()
    cols = ["score", "passed", "error_kind"]
    pd.testing.assert_frame_equal(again[cols], first[cols])

    done = engine("rescore", str(project["tmp"] / "r1" / "latest"), "--suites", str(project["suites"]),
                  "--models", str(project["models"]), "--out", str(project["tmp"] / "re"), env=project["env"])
    assert done.returncode == 0, done.stderr
    assert len(server.requests) == 8                                      # rescore called nothing at all
    (folder,) = (project["tmp"] / "re").iterdir()
    rescored = pd.read_parquet(folder).set_index("test_id")
    pd.testing.assert_frame_equal(rescored.loc[first.index, cols], first[cols])


def test_rescore_of_judges_needs_the_models_file(project: dict[str, Any]) -> None:
    run(project, "r1")
    done = engine("rescore", str(project["tmp"] / "r1" / "latest"), "--suites", str(project["suites"]),
                  env=project["env"])
    assert done.returncode == 2 and "--models FILE" in done.stderr


AGENT = """\
suite: agentjudge
tools:
  policy:
    description: The refund policy.
    parameters: {type: object, properties: {}}
    returns:
      - result: "30 days"
tests:
  - id: agent
    prompt: "What is the refund policy? (polite)"
    tools: [policy]
    agent: {max_turns: 2}
    eval:
      all:
        - {max_turns: 2}
        - {judge: {rubric: "The answer must mention the 30-day limit."}}
"""


def test_an_agent_test_is_judged_on_its_final_answer(project: dict[str, Any]) -> None:
    (project["tmp"] / "agent.yaml").write_text(AGENT)
    df = run(project, "r1", project["tmp"] / "agent.yaml")
    row = df.loc["agent"]
    assert row["outcome"] == "completed" and bool(row["passed"]) and row["score"] == 1.0
    assert row["judge_calls"] == 1 and row["judge_cost"] == pytest.approx(PER_CALL)
    assert row["cost"] == pytest.approx(ANSWER_COST)      # one answering turn; the judge apart
    (judged,) = judge_requests(project["server"], "grader-1")
    assert graded_answer(judged) == "You can return it within 30 days."


FINAL = """\
suite: finaljudge
tests:
  - id: "{{ tone }}"
    prompt: "What is the refund policy? ({{ tone }})"
    agent: {max_turns: 2}
    eval:
      final_answer: {judge: {rubric: "The answer must mention the 30-day limit.", model: "{{ grader }}"}}
    cases: [{tone: polite, grader: grader}, {tone: rude, grader: grader}]
"""


def test_a_judge_under_final_answer_grades_the_conversations_final_answer(project: dict[str, Any]) -> None:
    (project["tmp"] / "final.yaml").write_text(FINAL)
    df = run(project, "r1", project["tmp"] / "final.yaml")
    assert df["error_kind"].isna().all(), df["error_message"].tolist()
    polite, rude = df.loc["polite"], df.loc["rude"]
    assert bool(polite["passed"]) and polite["score"] == 1.0 and not rude["passed"] and rude["score"] == 0.0
    paths = [(e["path"], e["reason"]) for e in polite["evaluators"]]
    assert paths == [("final_answer", "final answer: judge grade pass: mentions 30 days"),
                     ("final_answer/0.judge", "judge grade pass: mentions 30 days")]
    assert polite["judge_calls"] == 1 and polite["judge_cost"] == pytest.approx(PER_CALL)
    assert sorted(graded_answer(b) for b in judge_requests(project["server"], "grader-1")) == [
        "No refunds, thank you.", "You can return it within 30 days."]


def test_an_unknown_judge_model_under_final_answer_in_a_later_row_stops_the_run_before_any_call(
        project: dict[str, Any]) -> None:
    (project["tmp"] / "final.yaml").write_text(FINAL.replace("{tone: rude, grader: grader}",
                                                             "{tone: rude, grader: gradr}"))
    done = engine("run", str(project["tmp"] / "final.yaml"), "--models", str(project["models"]), "--model", "shop",
                  "--out", str(project["tmp"] / "r"), env=project["env"])
    assert done.returncode == 2, done.stdout + done.stderr
    assert "names model 'gradr', which is not in" in done.stderr and "(rude)" in done.stderr
    assert project["server"].requests == []


def test_judge_spend_counts_toward_max_cost(project: dict[str, Any]) -> None:
    # The answering model is unpriced here: only judge calls can pass the budget.
    models = project["models"]
    models.write_text(models.read_text().replace("    price: {input: 0.5, output: 0.5}\n", ""))
    done = engine("run", str(project["suites"]), "--models", str(models), "--model", "shop", "--concurrency", "1",
                  "--max-cost", str(PER_CALL / 2), "--out", str(project["tmp"] / "r"), env=project["env"])
    assert done.returncode == 1 and "stopped: budget" in done.stdout, done.stdout + done.stderr
    assert len([b for b in project["server"].requests if b["model"] == "shop-1"]) < 8


def test_validate_leaves_judged_goldens_unchecked_and_calls_nothing(project: dict[str, Any]) -> None:
    done = engine("validate", str(project["suites"]), "--models", str(project["models"]), env=project["env"])
    assert done.returncode == 0, done.stderr
    assert project["server"].requests == []


def test_an_unknown_judge_model_stops_the_run_before_any_call(project: dict[str, Any]) -> None:
    (project["suites"] / "shop.yaml").write_text(SHOP.replace("model: grader}", "model: gradr}"))
    done = engine("run", str(project["suites"]), "--models", str(project["models"]), "--model", "shop",
                  "--out", str(project["tmp"] / "r"), env=project["env"])
    assert done.returncode == 2
    assert "names model 'gradr', which is not in" in done.stderr and "add it under `models:`" in done.stderr
    assert project["server"].requests == []
