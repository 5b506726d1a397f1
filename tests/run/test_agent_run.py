"""Agent suites run end to end by `engine run` subprocesses against a scripted multi-turn loopback server."""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pandas as pd

from tests.agent.scripted_server import Turn, latest_tool_results, model_turns
from tests.run.agent_project import AGENT_SUITE, agent_script, retry_fault, scripted_server_thread
from tests.run.e2e import engine, start_engine

MODELS = """\
models:
  scripted:
    base_url: {base_url}
    model: scripted-1
    timeout_s: 10
    max_retries: 2
    price: {{input: 1.0, output: 2.0}}
"""


def _run(tmp_path: Path, base_url: str, *extra: str) -> pd.DataFrame:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "agents.yaml").write_text(AGENT_SUITE)
    (tmp_path / "models.yaml").write_text(MODELS.format(base_url=base_url))
    out = tmp_path / "results"
    done = engine("run", str(tmp_path / "suites"), "--models", str(tmp_path / "models.yaml"), "--out", str(out),
                  "--quiet", *extra)
    assert done.returncode in (0, 1), done.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "latest"]
    return pd.read_parquet(run_dir).set_index("test_id")


def test_every_agent_conversation_is_one_row_with_its_counts_outcome_and_verdict(tmp_path: Path) -> None:
    with scripted_server_thread(agent_script, retry_fault()) as server:
        df = _run(tmp_path, server.base_url, "--concurrency", "3")
        requests = list(server.requests)
    assert sorted(df.index) == ["capped", "complete", "gateway", "invent", "malformed", "parallel", "retry"]
    counts = df[["turns", "prose_turns", "tool_calls_made", "invented_tools", "bad_tool_args", "outcome", "passed"]]
    assert counts.loc["complete"].tolist() == [2, 1, 1, 0, 0, "completed", True]
    assert counts.loc["capped"].tolist() == [3, 0, 3, 0, 0, "capped", False]
    assert counts.loc["invent"].tolist() == [2, 1, 1, 1, 0, "completed", False]
    assert counts.loc["malformed"].tolist() == [2, 1, 1, 0, 1, "completed", False]
    assert counts.loc["parallel"].tolist() == [2, 1, 2, 0, 0, "completed", True]
    assert counts.loc["retry"].tolist() == [2, 1, 1, 0, 0, "completed", True]
    assert counts.loc["gateway"].tolist() == [2, 1, 1, 0, 0, "completed", True]

    complete = df.loc["complete"]
    assert complete["answer"] == "It is 18 degrees: take a jacket."
    roles = [m["role"] for m in complete["transcript"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    tool_message = complete["transcript"][2]
    assert json.loads(tool_message["content"]) == {"temp_c": 18, "sky": "cloudy"}
    assert (tool_message["tool_name"], tool_message["tool_status"], tool_message["tool_rule"]) == ("get_weather",
                                                                                                   "ok", 0)
    assert [e["kind"] for e in complete["ledger"]] == ["tool_calls", "answer"]
    # totals over the ledger: the script reports 20 + 6 tokens per call
    assert (complete["prompt_tokens"], complete["completion_tokens"]) == (40, 12)
    assert complete["cost"] == (40 * 1.0 + 12 * 2.0) / 1e6
    assert pd.isna(complete["error_kind"]) and complete["fallback"] == False  # noqa: E712 - numpy bool
    assert complete["latency_s"] >= sum(e["latency_s"] for e in complete["ledger"])

    capped = df.loc["capped"]
    assert [e["status"] for e in capped["tool_events"]] == ["error"] * 3
    assert "unknown city Town0" in capped["tool_events"][0]["content"]

    assert df.loc["invent"]["tool_events"][0]["status"] == "invented"
    assert "no tool named 'get_wether'" in df.loc["invent"]["transcript"][2]["content"]
    assert df.loc["malformed"]["tool_events"][0]["status"] == "bad_args"

    parallel = df.loc["parallel"]
    assert [(e["turn"], e["index"], e["name"]) for e in parallel["tool_events"]] == [(1, 0, "get_weather"),
                                                                                     (1, 1, "book")]
    assert json.loads(parallel["state"]) == {"booked": True}
    assert json.loads(df.loc["complete"]["state"]) == {"booked": False}

    retry = df.loc["retry"]
    assert retry["retries"] == 1 and [e["retries"] for e in retry["ledger"]] == [0, 1]
    retry_requests = [r for r in requests if "TASK retry" in r["messages"][0]["content"]]
    assert len(retry_requests) == 3   # first call, the second call's failed try and its retry

    gateway = df.loc["gateway"]
    assert gateway["served_model"] == "someone-else" and gateway["fallback"] == True  # noqa: E712
    assert [e["fallback"] for e in gateway["ledger"]] == [True, True]
    # every model call of every conversation reached the server once (plus the one retried try)
    assert len(requests) == int(df["turns"].sum()) + 1


def test_unknown_usage_on_any_call_leaves_the_totals_null(tmp_path: Path) -> None:
    def script(messages: list[dict]) -> object:
        turn = agent_script(messages)
        if turn.content:
            turn.usage = None   # the answering call reports no usage
        return turn

    with scripted_server_thread(script) as server:
        df = _run(tmp_path, server.base_url, "--concurrency", "2")
    complete = df.loc["complete"]
    assert [e["prompt_tokens"] for e in complete["ledger"]] == [20, None]
    assert pd.isna(complete["prompt_tokens"]) and pd.isna(complete["completion_tokens"]) and pd.isna(complete["cost"])


KILL_SUITE = """\
suite: slow-agents
tools:
  book:
    parameters: {type: object, properties: {day: {type: string}}, required: [day]}
    returns:
      - result: "booked {{ day }}"
        set: {booked: true}
        delay_s: 0.15
tests:
  - id: "book-{{ n }}"
    prompt: "Book day {{ n }}"
    tools: [book]
    agent: {max_turns: 4}
    eval: {contains: booked}
    cases:
""" + "".join(f"      - {{n: {n}}}\n" for n in range(40))


def _committed_prompts(run_dir: Path) -> set[str]:
    try:
        db = sqlite3.connect(f"file:{run_dir / '_journal.sqlite'}?mode=ro", uri=True, timeout=1)
        try:
            return {json.loads(data)["test_id"] for (data,) in db.execute("SELECT data FROM rows")}
        finally:
            db.close()
    except sqlite3.Error:
        return set()


def test_kill_9_mid_run_then_resume_loses_and_repeats_no_conversation(tmp_path: Path) -> None:
    def script(messages: list[dict]) -> Turn:
        day = messages[0]["content"].split()[-1]
        if model_turns(messages) == 0:
            return Turn(tool_calls=[{"name": "book", "arguments": {"day": day}}])
        return Turn(content=f"{latest_tool_results(messages)[0]} for you")

    killed = threading.Event()

    def hold(body: dict) -> bool:
        """Days 12 on wait for the kill: the run is part-way when killed, whatever the machine's load."""
        return int(body["messages"][0]["content"].split()[-1]) >= 12 and not killed.is_set()

    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "slow.yaml").write_text(KILL_SUITE)
    out = tmp_path / "results"
    with scripted_server_thread(script, hold=hold) as server:
        (tmp_path / "models.yaml").write_text(MODELS.format(base_url=server.base_url))
        proc = start_engine("run", str(tmp_path / "suites"), "--models", str(tmp_path / "models.yaml"),
                            "--out", str(out), "--concurrency", "4", "--quiet", "--no-cache", env={})
        deadline = time.monotonic() + 60
        run_dir = None
        while time.monotonic() < deadline:
            runs = [p for p in out.glob("2*") if p.is_dir()] if out.exists() else []
            if runs and len(_committed_prompts(runs[0])) >= 6:
                run_dir = runs[0]
                break
            time.sleep(0.01)
        assert run_dir is not None, "the run never got going"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed.set()
        committed = _committed_prompts(run_dir)
        assert 6 <= len(committed) < 40, "killed too late to test anything"
        first_turns_before = [r["messages"][0]["content"] for r in server.requests if model_turns(r["messages"]) == 0]
        seen = len(server.requests)
        resumed = engine("run", "--resume", str(run_dir), "--quiet")
        assert resumed.returncode == 0, resumed.stderr
        after = server.requests[seen:]
    df = pd.read_parquet(run_dir)
    assert len(df) == 40 and not df.duplicated(["test_id", "attempt"]).any()
    assert (df["outcome"] == "completed").all() and df["passed"].all() and (df["turns"] == 2).all()
    # no committed conversation was asked again, and every conversation resumed starts from its first turn
    asked_again = {r["messages"][0]["content"].split()[-1] for r in after}
    assert not asked_again & {t.split("-")[-1] for t in committed}
    resumed_first = {r["messages"][0]["content"] for r in after if model_turns(r["messages"]) == 0}
    assert {f"Book day {t.split('-')[-1]}" for t in set(df["test_id"]) - committed} == resumed_first
    # each conversation cut by the kill ran once more, whole: two calls each after the resume
    assert len(after) == 2 * (40 - len(committed))
    # the conversations cut mid-way (asked before the kill, no row) are among those run again
    assert {p for p in first_turns_before if f"book-{p.split()[-1]}" not in committed} <= resumed_first
