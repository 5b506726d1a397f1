"""MCP servers as tool sources, end to end: `engine run` subprocesses, a scripted model on loopback, real servers.

The stdio server is `mcp-server-time` from PyPI (the dev extra installs it); the HTTP one, and the servers
that crash, stall, never answer or answer garbage, are tests/agent/mcp_fixture_server.py (the HTTP one made
with the SDK, the stdio ones fast-starting hand-written JSON-RPC, so their timeouts can be seconds).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.agent.scripted_server import Turn, latest_tool_results, model_turns
from tests.engine_proc import run_engine
from tests.run.agent_project import scripted_server_thread, task_of

FIXTURE = Path(__file__).with_name("mcp_fixture_server.py")
MODELS = """\
models:
  scripted:
    base_url: {base_url}
    model: scripted-1
    max_retries: 0
"""

# What the scripted model calls first, per TASK word; it then answers with the first tool result it got.
FIRST_CALLS: dict[str, dict[str, Any]] = {
    "tokyo": {"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}},
    "paris": {"name": "get_current_time", "arguments": {"timezone": "Europe/Paris"}},
    "convert": {"name": "convert_time", "arguments": {"source_timezone": "Europe/Paris", "time": "16:30",
                                                      "target_timezone": "Asia/Tokyo"}},
    "invent": {"name": "get_time", "arguments": {"timezone": "UTC"}},
    "bad": {"name": "get_current_time", "arguments": {"zone": "UTC"}},
    "order": {"name": "lookup_order", "arguments": {"order_id": "A-17"}},
    "whoami": {"name": "whoami", "arguments": {}},
    "crash": {"name": "boom", "arguments": {}},
    "stall": {"name": "stall", "arguments": {}},
}


def model(messages: list[dict[str, Any]]) -> Turn:
    task = task_of(messages)
    if model_turns(messages) == 0:
        return Turn(tool_calls=[FIRST_CALLS[task]])
    results = latest_tool_results(messages)
    return Turn(content=f"The tool said: {json.dumps(results[0]) if results else 'nothing'}")


def _run(tmp_path: Path, suite: str, base_url: str, *extra: str, env: dict[str, str] | None = None,
         out: str = "out") -> pd.DataFrame:
    (tmp_path / "suite.yaml").write_text(suite)
    (tmp_path / "models.yaml").write_text(MODELS.format(base_url=base_url))
    done = run_engine("run", str(tmp_path / "suite.yaml"), "--models", str(tmp_path / "models.yaml"), "--out",
                      str(tmp_path / out), "--quiet", *extra, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_parquet(tmp_path / out / "latest").set_index("test_id")
    df["reason"] = [" | ".join(str(node["reason"]) for node in nodes) if nodes is not None else ""
                    for nodes in df["evaluators"]]
    return df


TIME_SUITE = """\
suite: clock
mcp:
  name: clock
  command: [mcp-server-time, --local-timezone, UTC]
  timeout_s: 120
defaults:
  agent: {max_turns: 3}
tests:
  - id: tokyo
    prompt: "TASK tokyo: what time is it in Tokyo?"
    eval:
      all:
        - tool_call: {name: get_current_time, args: {timezone: [Asia/Tokyo]}}
        - final_answer: {contains: "Asia/Tokyo"}
  - id: asked-paris-not-tokyo
    prompt: "TASK paris: what time is it in Tokyo?"
    eval: {tool_call: {name: get_current_time, args: {timezone: [Asia/Tokyo]}}}
  - id: convert
    prompt: "TASK convert: 16:30 in Paris is what time in Tokyo?"
    eval:
      all:
        - tool_sequence: [convert_time]
        - final_answer: {contains: "00:30"}
  - id: invent
    prompt: "TASK invent: what time is it?"
    eval: {no_invented_tools: true}
  - id: bad
    prompt: "TASK bad: what time is it?"
    eval: {bad_arguments: {max: 0}}
"""


def test_an_agent_calls_a_real_mcp_server_from_pypi_and_its_calls_are_checked(tmp_path: Path) -> None:
    with scripted_server_thread(model) as server:
        df = _run(tmp_path, TIME_SUITE, server.base_url, "--cache", env={**os.environ,
                                                                       "ENGINE_RESPONSE_CACHE": str(tmp_path / "c")})
        first_run = len(server.requests)
        again = _run(tmp_path, TIME_SUITE, server.base_url, "--cache", out="out2",
                     env={**os.environ, "ENGINE_RESPONSE_CACHE": str(tmp_path / "c")})
        replayed = server.requests[first_run:]
    offered = {tool["function"]["name"] for tool in server.requests[0]["tools"]}
    assert offered == {"get_current_time", "convert_time"}   # listed by the server at start, offered as they are
    tokyo = df.loc["tokyo"]
    assert tokyo["passed"] and tokyo["outcome"] == "completed", tokyo["reason"]
    (event,) = tokyo["tool_events"]
    assert event["name"] == "get_current_time" and event["status"] == "ok" and event["ended_s"] > event["started_s"]
    answered = json.loads(tokyo["transcript"][2]["content"])   # the server's own result, as the tool turn
    assert tokyo["transcript"][2]["role"] == "tool" and answered["timezone"] == "Asia/Tokyo"
    assert answered["datetime"].endswith("+09:00") and len(tokyo["ledger"]) == 2
    failed = df.loc["asked-paris-not-tokyo"]
    assert not failed["passed"] and "Europe/Paris" in failed["reason"], failed["reason"]
    assert df.loc["convert"]["passed"], df.loc["convert"]["reason"]
    invent, bad = df.loc["invent"], df.loc["bad"]
    assert not invent["passed"] and invent["invented_tools"] == 1 and invent["tool_events"][0]["status"] == "invented"
    assert not bad["passed"] and bad["bad_tool_args"] == 1 and bad["tool_events"][0]["status"] == "bad_args"
    # The response cache keys each turn by every earlier tool result: convert_time answers the same again, so
    # its whole conversation is replayed; the current time differs, so tokyo's second turn is asked again.
    asked_again = sorted(task_of(body["messages"]) for body in replayed)
    assert asked_again == ["paris", "tokyo"], asked_again
    assert again.loc["convert"]["passed"] and again.loc["convert"]["tool_events"][0]["status"] == "ok"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(FIXTURE), "http", str(port), "tok-s3cret-42"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the fixture HTTP server did not start"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


HTTP_SUITE = """\
suite: crm
tests:
  - id: order
    prompt: "TASK order: where is order A-17?"
    mcp: {{name: crm, url: "{url}", headers_env: {{Authorization: CRM_TOKEN}}, prefix: crm_, tools: [lookup_order]}}
    eval:
      all:
        - tool_call: {{name: crm_lookup_order, args: {{order_id: [A-17]}}}}
        - final_answer: {{contains: shipped}}
  - id: order-expected-b4
    prompt: "TASK order: where is order B-4?"
    mcp: {{name: crm, url: "{url}", headers_env: {{Authorization: CRM_TOKEN}}, prefix: crm_, tools: [lookup_order]}}
    eval: {{tool_call: {{name: crm_lookup_order, args: {{order_id: [B-4]}}}}}}
"""


def test_a_streamable_http_server_with_a_secret_header_from_the_environment(tmp_path: Path, http_server: str) -> None:
    def renamed(messages: list[dict[str, Any]]) -> Turn:
        turn = model(messages)
        turn.tool_calls = [{**call, "name": "crm_" + call["name"]} for call in turn.tool_calls]
        return turn

    with scripted_server_thread(renamed) as server:
        df = _run(tmp_path, HTTP_SUITE.format(url=http_server), server.base_url,
                  env={**os.environ, "CRM_TOKEN": "Bearer tok-s3cret-42"})
        refused = _run(tmp_path, HTTP_SUITE.format(url=http_server), server.base_url, out="out2",
                       env={**os.environ, "CRM_TOKEN": "Bearer wrong"})
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["crm_lookup_order"]
    assert df.loc["order"]["passed"], df.loc["order"]["reason"]
    assert not df.loc["order-expected-b4"]["passed"]
    assert "A-17" in df.loc["order-expected-b4"]["reason"]
    # a refused header is an error row naming the server, and the secret is nowhere in the run folder
    assert (refused["error_kind"] == "mcp").all() and refused["error_message"].str.contains("MCP server 'crm'").all()
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert b"tok-s3cret-42" not in path.read_bytes(), path


FAILING_SUITE = """\
suite: failing
defaults:
  agent: {{max_turns: 3}}
  eval: {{contains: shipped}}
mcp:
  name: fixture
  command: [{python}, {fixture}, raw]
  env: {{GREETING: hello}}
  timeout_s: 30
tests:
  - id: crash
    prompt: "TASK crash: go"
  - id: stall
    prompt: "TASK stall: go"
    mcp: {{name: fixture, command: [{python}, {fixture}, raw], timeout_s: 10}}
  - id: after
    prompt: "TASK order: where is A-17?"
  - id: whoami
    prompt: "TASK whoami: who are you?"
    eval: {{contains: hello}}
  - id: silent
    prompt: "TASK order: go"
    mcp: {{name: fixture, command: [{python}, {fixture}, silent], timeout_s: 3}}
  - id: garbage
    prompt: "TASK order: go"
    mcp: {{name: fixture, command: [{python}, {fixture}, garbage], timeout_s: 30}}
"""


def test_a_crashing_a_stalling_and_a_silent_server_give_error_rows_in_time_and_the_run_goes_on(
        tmp_path: Path) -> None:
    suite = FAILING_SUITE.format(python=sys.executable, fixture=FIXTURE)
    with scripted_server_thread(model) as server:
        df = _run(tmp_path, suite, server.base_url, env={**os.environ, "OPENAI_API_KEY": "sk-engine-secret"})
    crash, stall, silent, garbage = (df.loc[name] for name in ("crash", "stall", "silent", "garbage"))
    for row in (crash, stall, silent, garbage):
        assert row["outcome"] == "error" and row["error_kind"] == "mcp" and pd.isna(row["passed"]), row
    assert "closed its connection during a call of boom" in crash["error_message"]
    assert "about to crash on purpose" in crash["error_message"]   # the server's stderr tail
    assert "did not answer a call of stall within 10 s" in stall["error_message"]
    assert stall["tool_events"][0]["status"] == "error" and 10 <= stall["latency_s"] < 10 + 10
    assert "did not start within 3 s" in silent["error_message"]
    assert "not MCP's JSON-RPC" in garbage["error_message"]
    assert df.loc["after"]["passed"], df.loc["after"]["reason"]
    seen = json.loads(df.loc["whoami"]["transcript"][2]["content"])
    assert seen["greeting"] == "hello" and "OPENAI_API_KEY" not in seen["env"], seen
    assert set(seen["env"]) <= {"GREETING", "HOME", "PATH", "LC_CTYPE"} and "engine-mcp-" in seen["home"]
    assert seen["cwd"] == str(tmp_path)   # the folder of the suite that declared it


SHARED_SUITE = """\
suite: shared
defaults:
  agent: {max_turns: 3}
  eval: {contains: pid}
tests:
  - id: "who-{{ n }}"
    prompt: "TASK whoami: {{ n }}"
    cases: [{n: 1}, {n: 2}, {n: 3}, {n: 4}, {n: 5}, {n: 6}]
"""
MODEL_MCP = """\
    mcp: {{name: fixture, command: [{python}, {fixture}, raw], scope: {scope}, timeout_s: 20}}
"""


@pytest.mark.parametrize("scope", ["run", "attempt"])
def test_a_models_file_server_serves_every_conversation_of_that_model_by_its_scope(tmp_path: Path, scope: str) -> None:
    with scripted_server_thread(model) as server:
        (tmp_path / "suite.yaml").write_text(SHARED_SUITE)
        (tmp_path / "models.yaml").write_text(MODELS.format(base_url=server.base_url)
                                              + MODEL_MCP.format(python=sys.executable, fixture=FIXTURE, scope=scope))
        done = run_engine("run", str(tmp_path / "suite.yaml"), "--models", str(tmp_path / "models.yaml"), "--out",
                          str(tmp_path / "out"), "--quiet", timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_parquet(tmp_path / "out" / "latest")
    assert df["passed"].all() and len(df) == 6
    pids = {json.loads(transcript[2]["content"])["pid"] for transcript in df["transcript"]}
    assert len(pids) == (1 if scope == "run" else 6)


BOXED_SUITE = """\
suite: boxed
defaults:
  agent: {{max_turns: 3}}
  eval: {{contains: pid}}
tests:
  - id: boxed
    prompt: "TASK whoami: who?"
    workspace: {{files: {{server.py: {source}}}}}
    mcp: {{name: fixture, command: [{system_python}, server.py, raw], env: {{PROBE: {probe}}}, sandbox: true,
          timeout_s: 60}}
  - id: private-install
    prompt: "TASK whoami: who?"
    workspace: {{files: {{server.py: {source}}}}}
    mcp: {{name: fixture, command: [{python}, server.py, raw], sandbox: true, timeout_s: 60}}
  - id: unboxed
    prompt: "TASK whoami: who?"
    workspace: {{files: {{server.py: {source}}}}}
    mcp: {{name: fixture, command: [{python}, server.py, raw], env: {{PROBE: {probe}}}, timeout_s: 60}}
"""


def test_a_sandboxed_server_runs_as_the_workspaces_uid_and_sees_only_the_workspace(tmp_path: Path) -> None:
    from engine.harness.isolation import isolation_report

    level = isolation_report().level
    if not level.startswith("bwrap") or not level.endswith("uid"):
        pytest.skip(f"needs bubblewrap and a private uid (this machine: {level})")
    source = json.dumps(FIXTURE.read_text(encoding="utf-8"))
    probe = Path(__file__).resolve()   # a file of the engine's checkout: on this machine, not in the sandbox
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if system_python is None:
        pytest.skip("needs the system's python3 (/usr/bin), which every sandbox shows")
    suite = BOXED_SUITE.format(source=source, python=sys.executable, system_python=system_python, probe=probe)
    with scripted_server_thread(model) as server:
        df = _run(tmp_path, suite, server.base_url)
    assert df.loc["boxed"]["outcome"] == "completed", df.loc["boxed"]["error_message"]
    boxed = json.loads(df.loc["boxed"]["transcript"][2]["content"])
    unboxed = json.loads(df.loc["unboxed"]["transcript"][2]["content"])
    assert df.loc["boxed"]["passed"] and df.loc["unboxed"]["passed"]
    assert unboxed["uid"] == os.getuid() and unboxed["sees"] is True
    assert boxed["uid"] != os.getuid() and boxed["sees"] is False, boxed
    assert boxed["cwd"].endswith("/work") and unboxed["cwd"].endswith("/work")   # each attempt's workspace
    assert set(boxed["env"]) <= {"HOME", "PATH", "PROBE", "LC_CTYPE"}
    private = df.loc["private-install"]
    interpreter = Path(os.path.realpath(sys.executable))
    if any(not folder.stat().st_mode & 0o001 for folder in interpreter.parents):   # e.g. a Python under /root
        assert private["error_kind"] == "mcp" and "cannot be read by the sandbox's own user" in private["error_message"]
    else:
        assert private["passed"], private["error_message"]
