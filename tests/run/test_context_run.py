"""`context_tokens` end to end: `engine run` against a loopback server (tests/fake_openai.py) that plays an agent
reading big tool outputs; the request bodies it received show what was trimmed, the Parquet rows count it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine

OUTPUT_CHARS = 2400
PARTS = 5

SUITE = f"""\
suite: budget
tools:
  read_log:
    description: Read one part of the log.
    parameters: {{type: object, properties: {{part: {{type: integer}}}}, required: [part]}}
    returns:
      - result: "part {{{{ part }}}}: {"L" * OUTPUT_CHARS}"
tests:
  - id: logs
    prompt: "Read parts 1 to {PARTS} of the log, then say done."
    tools: [read_log]
    agent: {{max_turns: {PARTS + 2}}}
    eval: {{contains: done}}
  - id: plain
    prompt: "Say done."
    eval: {{contains: done}}
"""

MODELS = """\
models:
  small:
    base_url: {url}
    model: small-1
    context_tokens: 2000
    params: {{max_tokens: 200}}
    timeout_s: 10
  roomy:
    base_url: {url}
    model: roomy-1
    context_tokens: 100000
    params: {{max_tokens: 200}}
    timeout_s: 10
  unbounded:
    base_url: {url}
    model: unbounded-1
    params: {{max_tokens: 200}}
    timeout_s: 10
"""

MARK = "[tool output trimmed:"


def reader(body: dict[str, Any]) -> Reply:
    """The scripted agent: reads the next part until it has seen them all; counts tokens as chars / 4."""
    messages = body["messages"]
    usage = {"prompt_tokens": len(json.dumps(messages)) // 4, "completion_tokens": 5, "total_tokens": 0}
    seen = sum(1 for m in messages if m["role"] == "tool")
    if "tools" not in body or seen >= PARTS:
        return Reply(content="done", usage=usage)
    return Reply(tool_calls=[{"id": f"call_{seen + 1}", "name": "read_log", "arguments": {"part": seen + 1}}],
                 content="", usage=usage)


def _run(tmp_path: Path, server: FakeOpenAI) -> pd.DataFrame:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "budget.yaml").write_text(SUITE)
    (tmp_path / "models.yaml").write_text(MODELS.format(url=server.base_url))
    out = tmp_path / "results"
    done = engine("run", str(tmp_path / "suites"), "--models", str(tmp_path / "models.yaml"), "--out", str(out),
                  "--quiet")
    assert done.returncode == 0, done.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "latest"]
    return pd.read_parquet(run_dir).set_index(["model", "test_id"])


def _tool_contents(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_the_oldest_tool_outputs_are_trimmed_to_fit_and_each_trim_is_counted(tmp_path: Path,
                                                                               fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = reader
    df = _run(tmp_path, fake_openai)
    bodies = [b for b in fake_openai.requests if "tools" in b]
    small = [b for b in bodies if b["model"] == "small-1"]
    assert len(small) == PARTS + 1

    flags = [[c.startswith(MARK) for c in _tool_contents(b)] for b in small]
    assert any(any(f) for f in flags), "the small model's conversation never needed trimming"
    for f in flags:
        assert f == sorted(f, reverse=True), f"not oldest first: {f}"
        assert not f or not f[-1], "the latest output was trimmed while older ones were left"
    last = _tool_contents(small[-1])
    assert last[0] == f"[tool output trimmed: {len('part 1: ') + OUTPUT_CHARS} chars]"
    assert last[-1] == f"part {PARTS}: " + "L" * OUTPUT_CHARS
    # by the server's own count (chars / 4, as it reported), every request fitted beside the reply's room
    assert all(len(json.dumps(b["messages"])) // 4 + 200 <= 2000 for b in small)
    opening = {"role": "user", "content": f"Read parts 1 to {PARTS} of the log, then say done."}
    assert small[-1]["messages"][0] == opening

    row = df.loc[("small", "logs")]
    assert row["outcome"] == "completed" and row["passed"]
    assert row["trimmed_requests"] == sum(1 for f in flags if any(f))
    assert row["trimmed_messages"] == sum(flags[-1])
    # the transcript keeps every output whole: only the request bodies were trimmed
    stored = [m["content"] for m in row["transcript"] if m["role"] == "tool"]
    assert len(stored) == PARTS and not any(MARK in c for c in stored)
    assert all(len(c) >= OUTPUT_CHARS for c in stored)

    for name in ("roomy", "unbounded"):   # within budget, or no budget at all: nothing trimmed, zeros counted
        own = [b for b in bodies if b["model"] == f"{name}-1"]
        assert len(own) == PARTS + 1
        assert not any(c.startswith(MARK) for b in own for c in _tool_contents(b))
        assert (df.loc[(name, "logs"), "trimmed_requests"], df.loc[(name, "logs"), "trimmed_messages"]) == (0, 0)
    # a single-turn row has no conversation: null, not zero
    assert df.loc[("small", "plain"), ["trimmed_requests", "trimmed_messages"]].isna().all()
