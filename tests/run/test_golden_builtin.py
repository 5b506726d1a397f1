"""`builtin: golden` in models.yaml: every test answered with its golden, in-process, by a real `engine run`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.run.e2e import engine

GOLDEN_MODELS = "models:\n  golden:\n    builtin: golden\n"

SINGLE_TURN = """\
suite: single
tools:
  get_weather:
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
tests:
  - id: capital
    prompt: What is the capital of France?
    golden: Paris
    eval: {contains: "{{ golden }}"}
  - id: call
    prompt: Weather in Paris?
    tools: [get_weather]
    golden: {tool_calls: [{name: get_weather, arguments: {city: Paris}}]}
    eval: {tool_call: {name: get_weather, args: {city: [Paris]}}}
  - id: json
    prompt: Give me Alice as JSON.
    golden: {name: Alice, age: 30}
    eval: {is_json: true}
  - id: "add-{{ a }}"
    prompt: "{{ a }} + 1?"
    cases: [{a: 1, golden: "2"}, {a: 2, golden: "3"}]
    eval: {equals: "{{ golden }}"}
"""

AGENT_SUITE = """\
suite: agents
tools:
  get_weather:
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    returns:
      - when: {city: [Paris]}
        result: {temp_c: 18, sky: cloudy}
      - error: "unknown city {{ city }}"
  book:
    parameters: {type: object, properties: {day: {type: string}}, required: [day]}
    returns:
      - result: "booked for {{ day }}"
        set: {booked: true}
        delay_s: 0.05
defaults:
  tools: [get_weather, book]
  agent: {max_turns: 4, state: {booked: false}}
  eval: {contains: "18"}
tests:
  - id: complete
    prompt: What should I wear in Paris?
    golden:
      - {tool_calls: [{name: get_weather, arguments: {city: Paris}}]}
      - It is 18 degrees.
  - id: parallel
    prompt: Weather in Paris, and book Monday.
    golden:
      - {tool_calls: [{name: get_weather, arguments: {city: Paris}}, {name: book, arguments: {day: Monday}}]}
      - 18 and booked.
  - id: answer-only
    prompt: Is 18 a number?
    golden: Yes, 18 is.
"""
TURNS = {"complete": 2, "parallel": 2, "answer-only": 1}


def _run(tmp_path: Path, suite: str) -> pd.DataFrame:
    (tmp_path / "s.yaml").write_text(suite)
    (tmp_path / "golden.yaml").write_text(GOLDEN_MODELS)
    out = tmp_path / "results"
    done = engine("run", str(tmp_path / "s.yaml"), "--models", str(tmp_path / "golden.yaml"), "--out", str(out),
                  "--quiet")
    assert done.returncode == 0, done.stderr + done.stdout
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "latest"]
    assert not list(run_dir.glob("_*.server.log"))   # no server was started
    return pd.read_parquet(run_dir).set_index("test_id")


def test_a_single_turn_suite_runs_to_all_pass_with_no_model(tmp_path: Path) -> None:
    df = _run(tmp_path, SINGLE_TURN)
    assert sorted(df.index) == ["add-1", "add-2", "call", "capital", "json"]
    assert df["passed"].all() and df["error_kind"].isna().all()
    assert set(df["model"]) == {"golden"} and set(df["served_model"]) == {"golden"}
    assert df.loc["capital", "answer"] == "Paris"
    assert [c["name"] for c in df.loc["call", "tool_calls"]] == ["get_weather"]
    assert json.loads(df.loc["json", "answer"]) == {"name": "Alice", "age": 30}
    assert df["turns"].isna().all()   # single-turn rows: the agent columns are null


def test_an_agent_suite_replays_its_golden_conversations_to_all_pass(tmp_path: Path) -> None:
    df = _run(tmp_path, AGENT_SUITE)
    assert sorted(df.index) == ["answer-only", "complete", "parallel"]
    assert df["passed"].all() and (df["outcome"] == "completed").all()
    assert df["turns"].tolist() == [TURNS[t] for t in df.index]
    parallel = df.loc["parallel"]
    assert [e["name"] for e in parallel["tool_events"]] == ["get_weather", "book"]
    assert json.loads(parallel["state"]) == {"booked": True}
    # the declared result reached the transcript: the golden's tool call was answered by `returns`
    assert json.loads(df.loc["complete", "transcript"][2]["content"]) == {"temp_c": 18, "sky": "cloudy"}
    assert df["prompt_tokens"].isna().all()   # nothing was counted: null, never 0


def test_a_test_without_a_golden_is_an_error_row_naming_the_fix(tmp_path: Path) -> None:
    suite = SINGLE_TURN + "  - id: bare\n    prompt: hi\n    eval: {contains: hi}\n"
    (tmp_path / "s.yaml").write_text(suite)
    (tmp_path / "golden.yaml").write_text(GOLDEN_MODELS)
    done = engine("run", str(tmp_path / "s.yaml"), "--models", str(tmp_path / "golden.yaml"), "--out",
                  str(tmp_path / "r"), "--quiet")
    assert done.returncode in (0, 1), done.stderr
    (run_dir,) = [p for p in (tmp_path / "r").iterdir() if p.is_dir() and p.name != "latest"]
    df = pd.read_parquet(run_dir).set_index("test_id")
    assert df.loc["bare", "error_kind"] == "no_golden" and "add `golden:`" in df.loc["bare", "error_message"]
    assert df.drop(index="bare")["passed"].all()


def test_rescore_scores_an_agent_rows_final_answer_from_its_stored_transcript(tmp_path: Path) -> None:
    _run(tmp_path, AGENT_SUITE)
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir() and p.name != "latest"]
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "s.yaml").write_text(AGENT_SUITE.replace('eval: {contains: "18"}', "eval: {contains: booked}"))
    done = engine("rescore", str(run_dir), "--suites", str(tmp_path / "new"), "--out", str(tmp_path / "rescored"))
    assert done.returncode == 0, done.stderr
    (new_dir,) = list((tmp_path / "rescored").iterdir())
    df = pd.read_parquet(new_dir).set_index("test_id")
    assert df["passed"].to_dict() == {"complete": False, "parallel": True, "answer-only": False}
    assert df.loc["parallel", "turns"] == 2 and len(df.loc["parallel", "transcript"]) == 5   # kept as stored
