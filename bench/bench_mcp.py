"""Benchmark an agent run whose conversations call one MCP server at 64 in flight: every call answered, each
answer back in its own conversation (no JSON-RPC id mixed up), and what the server costs against declared tools.

Three variants of one suite, each a whole `python -m engine run` against the same scripted model (a loopback
server in this process) at `--concurrency 64`, every conversation one tool call and one answer:

    returns   the tool declared in YAML (`returns:` echoes the token): the engine's own floor
    run       the tool of one MCP server (`scope: run`): one process, every conversation's calls on one session
    attempt   the same server with `scope: attempt`: a process per conversation (fewer conversations: each start
              imports the SDK, seconds of CPU)

The server (bench/mcp_echo_server.py, made with the SDK) answers each `echo(token)` after a random 0-20 ms, so
answers leave in another order than the calls came, and logs every token it got. A variant passes when every
row passed (its answer holds the token its own conversation sent, and the tool event says `ok`), and, for MCP,
the server's log holds each conversation's token exactly once.

Run: `.venv/bin/python bench/bench_mcp.py [--conversations 512] [--attempt-conversations 64]`. At 64 attempt
conversations, 64 SDK servers start at once (minutes of CPU): run it under `flock /work/bench.lock` then.
Figures go to bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from tests.agent.scripted_server import Turn, latest_tool_results, model_turns  # noqa: E402
from tests.run.agent_project import scripted_server_thread  # noqa: E402

CONCURRENCY = 64
MODELS = """\
models:
  scripted:
    base_url: {base_url}
    model: scripted-1
    concurrency: 64
    max_retries: 0
"""
SUITE = """\
suite: echo
{tools}
tests:
  - id: "c-{{{{ n }}}}"
    prompt: "token tok-{{{{ n }}}}"
    agent: {{max_turns: 3}}
    {offered}
    eval: {{contains: "tok-{{{{ n }}}}"}}
    cases_from: cases.csv
"""
RETURNS = """tools:
  echo:
    description: Answers the token it is given.
    parameters: {type: object, properties: {token: {type: string}}, required: [token]}
    returns: [{result: "{{ token }}"}]"""


def _mcp(scope: str, log: Path) -> str:
    return (f"mcp: {{name: echo, command: [{sys.executable}, {HERE / 'mcp_echo_server.py'}], "
            f"env: {{ECHO_LOG: {log}}}, scope: {scope}, timeout_s: 300}}")


def model(messages: list[dict[str, Any]]) -> Turn:
    token = next(m["content"] for m in messages if m.get("role") == "user").split()[1]
    if model_turns(messages) == 0:
        return Turn(tool_calls=[{"name": "echo", "arguments": {"token": token}}])
    results = latest_tool_results(messages)
    return Turn(content=f"the tool answered {results[0] if results else 'nothing'}")


def _variant(name: str, conversations: int, base_url: str, work: Path) -> dict[str, Any]:
    folder = work / name
    folder.mkdir()
    log = folder / "echo.log"
    log.touch()
    (folder / "cases.csv").write_text("n\n" + "".join(f"{i}\n" for i in range(conversations)))
    tools, offered = (RETURNS, "tools: [echo]") if name == "returns" else (_mcp(name, log), "")
    (folder / "suite.yaml").write_text(SUITE.format(tools=tools, offered=offered))
    (folder / "models.yaml").write_text(MODELS.format(base_url=base_url))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "engine", "run", str(folder / "suite.yaml"), "--models",
                           str(folder / "models.yaml"), "--out", str(folder / "out"), "--concurrency",
                           str(CONCURRENCY), "--no-cache", "--quiet"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{name}: engine run failed:\n{done.stdout}\n{done.stderr}")
    df = pd.read_parquet(folder / "out" / "latest")
    events = [e for row in df["tool_events"] for e in row]
    tool_s = sorted(e["ended_s"] - e["started_s"] for e in events)
    answered = Counter(log.read_text().split()) if name != "returns" else None
    return {
        "variant": name, "conversations": len(df), "passed": int(df["passed"].sum()),
        "tool_calls": len(events), "ok": sum(e["status"] == "ok" for e in events),
        "server_answered": None if answered is None else sum(answered.values()),
        "each_token_once": None if answered is None else (
            set(answered) == {f"tok-{i}" for i in range(conversations)} and set(answered.values()) == {1}),
        "wall_s": round(wall, 2), "per_conversation_ms": round(1000 * wall / len(df), 1),
        "tool_p50_ms": round(1000 * statistics.median(tool_s), 1),
        "tool_p95_ms": round(1000 * tool_s[int(0.95 * (len(tool_s) - 1))], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=512)
    parser.add_argument("--attempt-conversations", type=int, default=64)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp, scripted_server_thread(model) as server:
        for name, count in (("returns", args.conversations), ("run", args.conversations),
                            ("attempt", args.attempt_conversations)):
            results.append(_variant(name, count, server.base_url, Path(tmp)))
            print(json.dumps(results[-1]), flush=True)
    floor = results[0]["per_conversation_ms"]
    for result in results:
        print(f"{result['variant']:8} {result['conversations']:5} conversations, {result['passed']} passed, "
              f"server answered {result['server_answered']}, each token once: {result['each_token_once']}; "
              f"{result['wall_s']} s, {result['per_conversation_ms']} ms a conversation "
              f"({result['per_conversation_ms'] / floor:.2f}x returns), tool p50 {result['tool_p50_ms']} ms, "
              f"p95 {result['tool_p95_ms']} ms")
    if not all(r["passed"] == r["ok"] == r["conversations"] and r["each_token_once"] is not False for r in results):
        raise SystemExit("a conversation failed or a call was lost or answered twice")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
