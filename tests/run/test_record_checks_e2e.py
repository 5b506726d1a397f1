"""Every record check and the Python scorer, end to end: `engine run` of tests/fixtures/record_suite against a
scripted server whose `good` model passes each check and whose `bad` model fails each on purpose; each node's
verdict is read back from Parquet, and `engine rescore` judges the stored rows the same way."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import ROOT, engine

SUITE = ROOT / "tests" / "fixtures" / "record_suite"

MODELS = """\
models:
  good:
    base_url: {base_url}
    model: gpt-4o-mini
    timeout_s: 10
    price: {{input: 1.0, output: 2.0}}
  bad:
    base_url: {base_url}
    model: gpt-4o
    timeout_s: 10
    price: {{input: 1.0, output: 2.0}}
"""

# (test, node path) -> the kind there; every node passes for `good` and fails for `bad`.
NODES = {
    ("single", "all/0.no_fallback"), ("single", "all/1.not_truncated"), ("single", "all/2.latency_s"),
    ("single", "all/3.ttft_s"), ("single", "all/4.ttft_s"), ("single", "all/5.tokens"), ("single", "all/6.cost"),
    ("single", "all/7.python"),
    ("usage", "usage_reported"),
    ("must-call", "all/0.prose_turns"), ("must-call", "all/1.calls"),
    ("booking", "all/0.outcome"), ("booking", "all/1.calls"), ("booking", "all/2.calls"),
    ("booking", "all/3.bad_arguments"), ("booking", "all/4.invented_tools"), ("booking", "all/5.python"),
    ("booking", "all/6.turns"), ("booking", "all/7.tool_status"),
    ("midway", "tool_call"),
}


def _user(body: dict[str, Any]) -> str:
    return next(str(m["content"]) for m in body["messages"] if m["role"] == "user")


def _booking(good: bool, turn: int) -> Reply:
    def call(name: str, **arguments: Any) -> dict[str, Any]:
        return {"name": name, "arguments": arguments}

    if good:
        script = [Reply(content="", tool_calls=[call("find_slots", day="friday"), call("find_slots", day="saturday")]),
                  Reply(content="", tool_calls=[call("book", time="19:00")]),
                  Reply(content="Booked for 19:00 on Friday.")]
    else:   # an invented tool, bad arguments, one search, and never an answer: capped at max_turns 4
        script = [Reply(content="", tool_calls=[call("cancel_everything"), call("book", time=19)]),
                  Reply(content="", tool_calls=[call("find_slots", day="friday")]),
                  Reply(content="", tool_calls=[call("book", time="20:00")]),
                  Reply(content="", tool_calls=[call("book", time="21:00")])]
    return script[min(turn, len(script) - 1)]


def _forced(body: dict[str, Any]) -> str | None:
    """The one tool the request's tool_choice names, if it names one."""
    choice = body.get("tool_choice")
    return choice["function"]["name"] if isinstance(choice, dict) else None


def respond(body: dict[str, Any]) -> Reply:
    good = body["model"] == "gpt-4o-mini"
    text = _user(body)
    if "capital of France" in text:
        if good:   # a dated snapshot of the model asked for: not a fallback
            return Reply(content="Paris", model="gpt-4o-mini-2024-07-18")
        return Reply(content="London is the capital", model="gpt-3.5-turbo", finish_reason="length", delay_s=2.0,
                     usage={"prompt_tokens": 9000, "completion_tokens": 1000, "total_tokens": 10000})
    if "Say ok" in text:
        return Reply(content="ok") if good else Reply(content="ok", usage=None)
    if "free slot" in text:
        return (Reply(content="", tool_calls=[{"name": "find_slots", "arguments": {"day": "friday"}}]) if good
                else Reply(content="Friday looks free."))
    if _forced(body) == "book":   # the mid-way conversation
        return Reply(content="", tool_calls=[{"name": "book", "arguments": {"time": "19:00" if good else "20:00"}}])
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    return _booking(good, turn)


def _verdicts(folder: Path) -> dict[tuple[str, str, str], tuple[bool, bool]]:
    """(model, test, node path) -> (passed, error) of every node of every row."""
    df = pd.read_parquet(folder)
    out = {}
    for row in df.itertuples():
        for node in row.evaluators:
            out[(row.model, row.test_id, node["path"])] = (bool(node["passed"]), bool(node["error"]))
    return out


def test_each_record_check_passes_and_fails_as_scripted(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = respond
    suites = tmp_path / "suites"
    shutil.copytree(SUITE, suites)
    models = tmp_path / "models.yaml"
    models.write_text(MODELS.format(base_url=fake_openai.base_url))
    out = tmp_path / "results"
    done = engine("run", str(suites), "--models", str(models), "--model", "good", "--model", "bad", "--out", str(out))
    assert done.returncode in (0, 1), done.stderr
    midway = next(r for r in fake_openai.requests if _forced(r))
    assert midway["tool_choice"] == {"type": "function", "function": {"name": "book"}}
    assert [m["role"] for m in midway["messages"]] == ["user", "assistant", "tool"]
    assert midway["messages"][1]["content"] == ""   # the suite's `content: null`, as every chat server takes it
    assert midway["messages"][1]["tool_calls"][0]["function"] == {"name": "find_slots",
                                                                  "arguments": '{"day": "friday"}'}
    verdicts = _verdicts(out / "latest")
    for test, path in sorted(NODES):
        assert verdicts[("good", test, path)] == (True, False), (test, path)
        assert verdicts[("bad", test, path)] == (False, False), (test, path)
    df = pd.read_parquet(out / "latest").set_index(["model", "test_id"])
    assert df["passed"].to_dict() == {(m, t): m == "good" for m, t in df.index}
    # where a row's token counts come from: the server's usage, or nothing when it sent none
    assert df.loc[("good", "usage"), "usage_source"] == "server" and df.loc[("good", "usage"), "prompt_tokens"] > 0
    assert pd.isna(df.loc[("bad", "usage"), "usage_source"]) and pd.isna(df.loc[("bad", "usage"), "prompt_tokens"])
    reasons = {(r.model, r.test_id, n["path"]): n["reason"] for r in pd.read_parquet(out / "latest").itertuples()
               for n in r.evaluators}
    assert reasons[("bad", "single", "all/0.no_fallback")] == ("answered by 'gpt-3.5-turbo', not the model asked "
                                                               "for 'gpt-4o'")
    assert reasons[("good", "single", "all/0.no_fallback")] == ("answered by 'gpt-4o-mini-2024-07-18' "
                                                                "(asked 'gpt-4o-mini')")
    assert reasons[("bad", "booking", "all/0.outcome")] == ("the conversation ended capped, expected completed "
                                                            "(after 4 model call(s))")
    assert reasons[("bad", "booking", "all/6.turns")] == ("4 model call(s), exactly 3 expected: the conversation "
                                                          "ended capped")
    assert reasons[("bad", "booking", "all/7.tool_status")] == ("2 of 5 tool call(s) not ok: cancel_everything (turn "
                                                                "1) invented, book (turn 1) bad_args")
    assert reasons[("bad", "single", "all/7.python")] == ("answered 'London is the capital', expected 'Paris' "
                                                          "[output: expected one word, got 4]")

    rescored = tmp_path / "rescored"
    again = engine("rescore", str(out / "latest"), "--suites", str(suites), "--out", str(rescored))
    assert again.returncode == 0, again.stderr
    assert "0 verdicts changed" in again.stdout + again.stderr
    (folder,) = [p for p in rescored.iterdir() if p.is_dir()]
    assert _verdicts(folder) == verdicts
