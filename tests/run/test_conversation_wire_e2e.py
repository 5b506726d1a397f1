"""`engine run` of a conversation that starts mid-way, `tool_choice` and a tool's API name, against the fake
server: what it received, and the verdicts read back through the tool's key (real subprocess, real Parquet)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import ROOT, engine

DOC = (ROOT / "docs" / "suite-format.md").read_text(encoding="utf-8")
# The example of docs/suite-format.md ("Conversations that start mid-way"), run as written.
MIDWAY = re.search(r"<!-- example: midway -->\n```yaml\n(.*?)```", DOC, flags=re.S).group(1)  # type: ignore[union-attr]
NO_TOOLS = """\
  - id: no-tools
    prompt: Say hi.
    eval: {contains: hi}
"""
MODELS = """\
models:
  m:
    base_url: {base_url}
    model: m-1
    timeout_s: 5
    params: {{tool_choice: required, seed: 5}}
"""


def _run(tmp_path: Path, fake: FakeOpenAI, *extra: str) -> pd.DataFrame:
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "bookings.yaml").write_text(MIDWAY + NO_TOOLS)
    models = tmp_path / "models.yaml"
    models.write_text(MODELS.format(base_url=fake.base_url))
    out = tmp_path / "results"
    done = engine("run", str(suites), "--models", str(models), "--out", str(out), *extra)
    assert done.returncode in (0, 1), done.stderr
    return pd.read_parquet(out / "latest")


def _reply(body: dict) -> Reply:
    if body.get("tools"):
        return Reply(content="", tool_calls=[{"name": "calendar_book", "arguments": {"time": "19:00"}}])
    return Reply(content="hi there")


def test_the_conversation_goes_out_as_written_and_the_reply_is_read_back_to_the_key(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = _reply
    df = _run(tmp_path, fake_openai)
    booked = next(b for b in fake_openai.requests if b.get("tools"))
    assert booked["messages"] == [
        {"role": "user", "content": "Book a table for two tonight."},
        {"role": "assistant", "content": "", "tool_calls": [   # `content: null` as every server takes it
            {"id": "call_1", "type": "function", "function": {"name": "find_slots", "arguments": '{"party": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"slots": ["19:00", "21:30"]}'},
    ]
    # the API sees the tool's `name:`, never its key; the test's tool_choice wins over the models file's
    assert [t["function"]["name"] for t in booked["tools"]] == ["find_slots", "calendar_book"]
    assert booked["tool_choice"] == {"type": "function", "function": {"name": "calendar_book"}}
    row = df.set_index("test_id").loc["book-after-lookup"]
    assert bool(row["passed"]), row["evaluators"]          # `tool_call: {name: calendar.book}` matched
    assert [c["name"] for c in row["tool_calls"]] == ["calendar.book"]
    assert json.loads(row["tool_calls"][0]["arguments"]) == {"time": "19:00"}


def test_a_request_without_tools_carries_no_tool_choice_whatever_the_params(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = _reply
    _run(tmp_path, fake_openai)
    plain = next(b for b in fake_openai.requests if not b.get("tools"))
    assert "tool_choice" not in plain and "tools" not in plain
    assert plain["messages"] == [{"role": "user", "content": "Say hi."}]


def test_each_attempt_sends_its_own_seed_and_run_seed_is_not_sent(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = _reply
    df = _run(tmp_path, fake_openai, "--repeat", "3", "--seed", "99")
    seeds = sorted(b["seed"] for b in fake_openai.requests if not b.get("tools"))
    assert seeds == [5, 6, 7]   # the models file's seed + the attempt index
    plain = df[df["test_id"] == "no-tools"].sort_values("attempt")
    assert list(plain["seed"]) == [5, 6, 7]


AGENT = """\
suite: agent-names
tools:
  calendar.book:
    name: calendar_book
    parameters: {type: object, properties: {time: {type: string}}, required: [time]}
    returns:
      - result: {booked: "{{ time }}"}
tests:
  - id: book
    tools: [calendar.book]
    agent: {max_turns: 3}
    prompt: Book 19:00.
    eval: {calls: {tool: calendar.book, equals: 1}}
"""


def test_an_agent_conversation_speaks_the_api_name_and_its_ledger_the_key(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(content="", tool_calls=[{"name": "calendar_book", "arguments": {"time": "19:00"}}]),
                       Reply(content="Booked for 19:00."))
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "agent.yaml").write_text(AGENT)
    models = tmp_path / "models.yaml"
    models.write_text(MODELS.format(base_url=fake_openai.base_url))
    done = engine("run", str(suites), "--models", str(models), "--out", str(tmp_path / "results"))
    assert done.returncode == 0, done.stderr
    second = fake_openai.requests[1]
    assert second["messages"][1]["tool_calls"][0]["function"]["name"] == "calendar_book"
    assert json.loads(second["messages"][2]["content"]) == {"booked": "19:00"}
    row = pd.read_parquet(tmp_path / "results" / "latest").iloc[0]
    assert row["outcome"] == "completed" and bool(row["passed"]), row["evaluators"]
    assert row["invented_tools"] == 0
