"""Benchmark: N calls against a rate-limited server, through the engine, inspect_ai and promptfoo at their defaults.

Each tool runs against a fresh bench/ratelimit_server.py (loopback only), and the table shows, per limit and
tool: rows completed (answered 2xx), the share of requests answered 429, and the serving time (the server's
first request to its last answer) against the limit's bound: (N - burst) / rate + the mean latency, for
requests and for tokens, whichever is longer. Every tool sends the same prompt with max_tokens 64.

    .venv/bin/python bench/bench_ratelimit.py [--calls 400] [--peers-python /tmp/peers-venv/bin/python]
        [--promptfoo ~/.cache/engine-npm/node_modules/.bin/promptfoo] [--tools engine,inspect,promptfoo]

inspect_ai runs from its own venv (`python -m venv /tmp/peers-venv && /tmp/peers-venv/bin/pip install inspect-ai
openai`); a tool that is not installed is skipped. Telemetry and update checks of the peers are off.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine.suite.models_file import HOSTED_CONCURRENCY

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "bench" / "ratelimit_server.py"
MAX_TOKENS = 64
LATENCY_S = 0.3
KEY = "sk-bench-not-a-real-key"
# name -> the server's limits
SCENARIOS: dict[str, list[str]] = {
    "20 req/s": ["--rps", "20"],
    "200 req/s": ["--rps", "200"],
    "tokens bind (20 req/s; 700 tok/s)": ["--rps", "20", "--tps", "700"],
}
QUIET_PROMPTFOO = {"PROMPTFOO_DISABLE_TELEMETRY": "1", "PROMPTFOO_DISABLE_UPDATE": "1",
                   "PROMPTFOO_DISABLE_SHARING": "1", "PROMPTFOO_DISABLE_REMOTE_GENERATION": "1",
                   "PROMPTFOO_DISABLE_REDTEAM_REMOTE_GENERATION": "1", "PROMPTFOO_CACHE_ENABLED": "false",
                   "PROMPTFOO_DISABLE_ERROR_LOG": "1"}
QUIET_INSPECT = {"INSPECT_TELEMETRY": "", "INSPECT_API_KEY_OVERRIDE": "", "INSPECT_DISPLAY": "none",
                 "INSPECT_LOG_LEVEL": "warning", "DO_NOT_TRACK": "1"}


class RateLimitedServer:
    """bench/ratelimit_server.py as a subprocess; `stats()` reads its counters."""

    def __init__(self, args: list[str], python: str = sys.executable) -> None:
        self.proc = subprocess.Popen([python, str(SERVER), "--latency", str(LATENCY_S), *args],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=10) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def __enter__(self) -> RateLimitedServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def bound_s(args: list[str], calls: int, tokens_per_call: float) -> float:
    """The least serving time the server's limits allow for `calls` (burst spent at once, then the rate)."""
    opts = dict(zip(args[::2], (float(v) for v in args[1::2]), strict=True))
    bound = 0.0
    if "--rps" in opts:
        rate = opts["--rps"]
        bound = max(bound, max(0.0, calls - opts.get("--burst", rate)) / rate)
    if "--tps" in opts:
        rate = opts["--tps"]
        bound = max(bound, max(0.0, calls * tokens_per_call - opts.get("--token-burst", rate)) / rate)
    return bound + LATENCY_S


def run_engine(base_url: str, calls: int, folder: Path) -> None:
    rows = "\n".join(f"      - {{n: {i}}}" for i in range(calls))
    (folder / "bench.yaml").write_text(
        "suite: bench\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"say ok {{ n }}\"\n"
        f"    eval: {{contains: ok}}\n    cases:\n{rows}\n")
    # The engine's default for a hosted API, said out loud: the server is on loopback, where the default
    # ceiling is a local server's (engine/suite/models_file.py).
    (folder / "models.yaml").write_text(
        f"models:\n  bench:\n    base_url: {base_url}\n    model: bench-model\n"
        f"    concurrency: {HOSTED_CONCURRENCY}\n    params: {{max_tokens: {MAX_TOKENS}}}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), ENGINE_RESPONSE_CACHE=str(folder / "cache.sqlite"))
    subprocess.run([sys.executable, "-m", "engine", "run", str(folder / "bench.yaml"), "--models",
                    str(folder / "models.yaml"), "--out", str(folder / "results"), "--quiet"],
                   env=env, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)


def run_inspect(base_url: str, calls: int, folder: Path, python: str) -> None:
    (folder / "task.py").write_text(
        "from inspect_ai import Task, task\nfrom inspect_ai.dataset import Sample\n"
        "from inspect_ai.scorer import includes\nfrom inspect_ai.solver import generate\n\n"
        f"@task\ndef bench():\n    return Task(dataset=[Sample(input=f'say ok {{n}}', target='ok') "
        f"for n in range({calls})], solver=generate(), scorer=includes())\n")
    env = dict(os.environ, OPENAI_API_KEY=KEY, OPENAI_BASE_URL=base_url, **QUIET_INSPECT)
    subprocess.run([python, "-m", "inspect_ai", "eval", "task.py", "--model", "openai/bench-model",
                    "-M", "responses_api=false",   # chat completions, as the server (and the peers) speak
                    "--max-tokens", str(MAX_TOKENS), "--log-dir", str(folder / "logs"), "--no-log-samples"],
                   env=env, cwd=folder, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_promptfoo(base_url: str, calls: int, folder: Path, promptfoo: str) -> None:
    tests = "\n".join(f"  - vars: {{n: {i}}}" for i in range(calls))
    (folder / "promptfooconfig.yaml").write_text(
        "prompts:\n  - 'say ok {{n}}'\nproviders:\n  - id: openai:chat:bench-model\n    config:\n"
        f"      apiBaseUrl: {base_url}\n      max_tokens: {MAX_TOKENS}\n"
        f"defaultTest:\n  assert:\n    - type: contains\n      value: ok\ntests:\n{tests}\n")
    home = folder / "home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "PROMPTFOO_CONFIG_DIR": str(home / ".promptfoo"),
           "OPENAI_API_KEY": KEY, "NO_PROXY": "*", **QUIET_PROMPTFOO}
    subprocess.run([promptfoo, "eval", "-c", str(folder / "promptfooconfig.yaml"), "-o",
                    str(folder / "out.json"), "--no-cache", "--no-progress-bar", "--no-table", "--no-write"],
                   env=env, cwd=folder, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(tool: str, scenario: list[str], calls: int, opts: argparse.Namespace) -> dict[str, Any]:
    with RateLimitedServer(scenario) as server, tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        if tool == "engine":
            run_engine(server.base_url, calls, Path(tmp))
        elif tool == "inspect_ai":
            run_inspect(server.base_url, calls, Path(tmp), opts.peers_python)
        else:
            run_promptfoo(server.base_url, calls, Path(tmp), opts.promptfoo)
        wall = time.monotonic() - started
        stats = server.stats()
    answered = stats["answered"]
    serving = (stats["last_s"] - stats["first_s"]) if answered else float("nan")
    bound = bound_s(scenario, calls, stats["tokens"] / answered if answered else 0.0)
    return {"tool": tool, "rows": min(answered, calls), "requests": stats["requests"],
            "limited": stats["limited"], "share_429": stats["limited"] / max(1, stats["requests"]),
            "serving_s": serving, "bound_s": bound, "ratio": serving / bound, "wall_s": wall,
            "max_in_flight": stats["max_in_flight"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--peers-python", default="/tmp/peers-venv/bin/python")
    parser.add_argument("--promptfoo", default=str(Path.home() / ".cache/engine-npm/node_modules/.bin/promptfoo"))
    parser.add_argument("--tools", default="engine,inspect_ai,promptfoo")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated names of SCENARIOS")
    opts = parser.parse_args()
    tools = [t for t in opts.tools.split(",") if t]
    if "inspect_ai" in tools and not Path(opts.peers_python).exists():
        print(f"inspect_ai skipped: no {opts.peers_python}", file=sys.stderr)
        tools.remove("inspect_ai")
    if "promptfoo" in tools and not Path(opts.promptfoo).exists():
        print(f"promptfoo skipped: no {opts.promptfoo}", file=sys.stderr)
        tools.remove("promptfoo")
    print("| limit | tool | rows completed | requests answered 429 | serving time / bound | max in flight |")
    print("|---|---|---|---|---|---|")
    for name in opts.scenarios.split(","):
        for tool in tools:
            r = measure(tool, SCENARIOS[name], opts.calls, opts)
            print(f"| {name} | {tool} | {r['rows']} / {opts.calls} | {100 * r['share_429']:.1f}% "
                  f"({r['limited']} of {r['requests']}) | {r['serving_s']:.1f} s / {r['bound_s']:.1f} s = "
                  f"{r['ratio']:.2f}x | {r['max_in_flight']} |", flush=True)


if __name__ == "__main__":
    main()
