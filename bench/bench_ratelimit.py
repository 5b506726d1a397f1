"""Benchmark: N calls against a rate-limited server, through the engine, inspect_ai and promptfoo at their defaults.

Each tool runs against a fresh bench/ratelimit_server.py (loopback only), and the table shows, per limit and
tool: rows completed (answered 2xx), the share of requests answered 429, and the serving time (the server's
first request to its last answer) against the limit's bound: (N - burst) / rate + the mean latency, for
requests and for tokens, whichever is longer (the burst is the one-second bucket the server enforces, whatever
its headers say). Every tool sends the same prompt with max_tokens 64; with two models, each model gets half
the calls and both share the one limit of the key, or only the first model is limited (the bound is then its
half's; the other's calls are answered at once, and every one of them must be a row).

    .venv/bin/python bench/bench_ratelimit.py [--calls 400] [--peers-python /tmp/peers-venv/bin/python]
        [--promptfoo ~/.cache/engine-npm/node_modules/.bin/promptfoo] [--tools engine,inspect_ai,promptfoo]
        [--scenarios NAME,...] [--engine-root /path/to/another/tree] [--sim --seeds 1,2,3]

`--sim` runs the engine's own pace against the same limits on a simulated clock (bench/ratelimit_sim.py: the
engine's windows and budgets, not its process, and no peer), once per seed: the same figures in a fraction of
a second, whatever the machine's load; with `--engine-root`, that tree's engine and simulation.

inspect_ai runs from its own venv (`python -m venv /tmp/peers-venv && /tmp/peers-venv/bin/pip install inspect-ai
openai`); a tool that is not installed is skipped. Telemetry and update checks of the peers are off.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "bench" / "ratelimit_server.py"
HEADER_MODES = ("bucket", "minute-limit", "per-minute", "none")
MAX_TOKENS = 64
LATENCY_S = 0.3
KEY = "sk-bench-not-a-real-key"


class Scenario(NamedTuple):
    """The server's limits, how many models share them, the calls (None: `--calls`), and the share of the calls
    the limits bind (the limited model's, when only one of two is)."""

    server: list[str]
    models: int = 1
    calls: int | None = None
    limited_share: float = 1.0


SCENARIOS: dict[str, Scenario] = {
    "20 req/s": Scenario(["--rps", "20"]),
    "20 req/s, one-second bucket under a per-minute limit": Scenario(["--rps", "20", "--headers", "minute-limit"]),
    "20 req/s per second, per-minute headers": Scenario(["--rps", "20", "--headers", "per-minute"]),
    "tokens bind (20 req/s; 700 tok/s)": Scenario(["--rps", "20", "--tps", "700"]),
    "tokens bind, one-second buckets under per-minute limits": Scenario(
        ["--rps", "20", "--tps", "700", "--headers", "minute-limit"]),
    "two models on one key (20 req/s, one-second bucket)": Scenario(
        ["--rps", "20", "--headers", "minute-limit"], models=2),
    "two models on one key, only one limited (20 req/s, one-second bucket)": Scenario(
        ["--rps", "20", "--headers", "minute-limit", "--limited-model", "bench-model-a"], models=2,
        limited_share=0.5),
    "200 req/s, 2,000 calls": Scenario(["--rps", "200"], calls=2000),
    "200 req/s, 2,000 calls, nothing published": Scenario(["--rps", "200", "--headers", "none"], calls=2000),
    "two models on one key, 200 req/s, 2,000 calls": Scenario(["--rps", "200"], models=2, calls=2000),
    "no limit, 2,000 calls (the time is the ramp's: the bound is one reply)": Scenario([], calls=2000),
    "two models on one key (20 req/s), nothing published": Scenario(["--rps", "20", "--headers", "none"], models=2),
    "two models on one key, 200 req/s, 2,000 calls, nothing published": Scenario(
        ["--rps", "200", "--headers", "none"], models=2, calls=2000),
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


def model_names(models: int) -> list[str]:
    return ["bench-model"] if models == 1 else [f"bench-model-{chr(ord('a') + i)}" for i in range(models)]


def run_engine(base_url: str, calls: int, models: int, folder: Path, root: Path, extra: str) -> None:
    rows = "\n".join(f"      - {{n: {i}}}" for i in range(calls // models))
    (folder / "bench.yaml").write_text(
        "suite: bench\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"say ok {{ n }}\"\n"
        f"    eval: {{contains: ok}}\n    cases:\n{rows}\n")
    entries = "".join(f"  {name}:\n    base_url: {base_url}\n    model: {name}\n{extra}"
                      f"    params: {{max_tokens: {MAX_TOKENS}}}\n" for name in model_names(models))
    (folder / "models.yaml").write_text(f"models:\n{entries}")
    env = dict(os.environ, PYTHONPATH=str(root), ENGINE_RESPONSE_CACHE=str(folder / "cache.sqlite"))
    python = root / ".venv" / "bin" / "python"
    subprocess.run([str(python if python.exists() else sys.executable), "-m", "engine", "run",
                    str(folder / "bench.yaml"), "--models", str(folder / "models.yaml"),
                    "--out", str(folder / "results"), "--quiet"],
                   env=env, cwd=root, check=False, stdout=subprocess.DEVNULL)


def run_inspect(base_url: str, calls: int, models: int, folder: Path, python: str) -> None:
    (folder / "task.py").write_text(
        "from inspect_ai import Task, task\nfrom inspect_ai.dataset import Sample\n"
        "from inspect_ai.scorer import includes\nfrom inspect_ai.solver import generate\n\n"
        f"@task\ndef bench():\n    return Task(dataset=[Sample(input=f'say ok {{n}}', target='ok') "
        f"for n in range({calls // models})], solver=generate(), scorer=includes())\n")
    env = dict(os.environ, OPENAI_API_KEY=KEY, OPENAI_BASE_URL=base_url, **QUIET_INSPECT)
    subprocess.run([python, "-m", "inspect_ai", "eval", "task.py", "--model",
                    ",".join(f"openai/{name}" for name in model_names(models)),
                    "-M", "responses_api=false",   # chat completions, as the server (and the peers) speak
                    "--max-tokens", str(MAX_TOKENS), "--log-dir", str(folder / "logs"), "--no-log-samples"],
                   env=env, cwd=folder, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_promptfoo(base_url: str, calls: int, models: int, folder: Path, promptfoo: str) -> None:
    tests = "\n".join(f"  - vars: {{n: {i}}}" for i in range(calls // models))
    providers = "".join(f"  - id: openai:chat:{name}\n    config:\n      apiBaseUrl: {base_url}\n"
                        f"      max_tokens: {MAX_TOKENS}\n" for name in model_names(models))
    (folder / "promptfooconfig.yaml").write_text(
        f"prompts:\n  - 'say ok {{{{n}}}}'\nproviders:\n{providers}"
        f"defaultTest:\n  assert:\n    - type: contains\n      value: ok\ntests:\n{tests}\n")
    home = folder / "home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "PROMPTFOO_CONFIG_DIR": str(home / ".promptfoo"),
           "OPENAI_API_KEY": KEY, "NO_PROXY": "*", **QUIET_PROMPTFOO}
    subprocess.run([promptfoo, "eval", "-c", str(folder / "promptfooconfig.yaml"), "-o",
                    str(folder / "out.json"), "--no-cache", "--no-progress-bar", "--no-table", "--no-write"],
                   env=env, cwd=folder, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(tool: str, scenario: Scenario, calls: int, opts: argparse.Namespace) -> dict[str, Any]:
    with RateLimitedServer(scenario.server) as server, tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        if tool == "engine":
            run_engine(server.base_url, calls, scenario.models, Path(tmp), Path(opts.engine_root), opts.engine_yaml)
        elif tool == "inspect_ai":
            run_inspect(server.base_url, calls, scenario.models, Path(tmp), opts.peers_python)
        else:
            run_promptfoo(server.base_url, calls, scenario.models, Path(tmp), opts.promptfoo)
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)   # the tool's processes (the server is not reaped yet)
        stats = server.stats()
    answered = stats["answered"]
    serving = (stats["last_s"] - stats["first_s"]) if answered else float("nan")
    limits = [a for a in scenario.server if a not in ("--headers", "--limited-model") and a not in HEADER_MODES
              and not a.startswith("bench-model")]
    bound = bound_s(limits, round(calls * scenario.limited_share), stats["tokens"] / answered if answered else 0.0)
    return {"tool": tool, "rows": min(answered, calls), "requests": stats["requests"],
            "limited": stats["limited"], "share_429": stats["limited"] / max(1, stats["requests"]),
            "serving_s": serving, "bound_s": bound, "ratio": serving / bound, "wall_s": wall,
            "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
            "max_in_flight": stats["max_in_flight"]}


def simulate(scenario: Scenario, calls: int, seed: int) -> dict[str, Any]:
    """The engine's pace on a simulated clock against the scenario's limits (bench/ratelimit_sim.py)."""
    import asyncio

    import ratelimit_server
    from ratelimit_sim import SimRun

    cost = ratelimit_server.prompt_tokens({"messages": [{"role": "user", "content": "say ok 0"}],
                                           "max_tokens": MAX_TOKENS})   # what the server counts a call
    sim = SimRun(scenario.server, models=scenario.models, cost=cost, seed=seed)
    asyncio.run(sim.run(calls))
    serving = sim.serving_s()
    limits = [a for a in scenario.server if a not in ("--headers", "--limited-model") and a not in HEADER_MODES
              and not a.startswith("bench-model")]
    bound = bound_s(limits, round(calls * scenario.limited_share), sim.cost)
    return {"tool": f"engine (simulated, seed {seed})", "rows": sim.answered, "requests": sim.sent,
            "limited": sim.refused, "share_429": sim.refused / max(1, sim.sent), "serving_s": serving,
            "bound_s": bound, "ratio": serving / bound, "cpu_s": 0.0, "max_in_flight": sim.max_in_flight}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--peers-python", default="/tmp/peers-venv/bin/python")
    parser.add_argument("--promptfoo", default=str(Path.home() / ".cache/engine-npm/node_modules/.bin/promptfoo"))
    parser.add_argument("--tools", default="engine,inspect_ai,promptfoo")
    parser.add_argument("--scenarios", default=",".join(str(n) for n in range(1, len(SCENARIOS) + 1)),
                        help="comma-separated numbers of SCENARIOS, from 1 (or names without a comma)")
    parser.add_argument("--engine-root", default=str(ROOT), help="the engine's tree to run (a before/after pair)")
    parser.add_argument("--engine-yaml", default="", help="extra lines for each engine model entry "
                        "(`    concurrency: 64\\n`: an old tree's hosted default)")
    parser.add_argument("--sim", action="store_true", help="the engine's pace on a simulated clock, no process")
    parser.add_argument("--seeds", default="3", help="with --sim: the simulated latencies' seeds, one run each")
    opts = parser.parse_args()
    tools = [t for t in opts.tools.split(",") if t and not opts.sim]
    if opts.sim:   # the simulation imports the engine: that tree's, ahead of this one
        sys.path[:0] = [str(Path(opts.engine_root) / "bench"), str(opts.engine_root)]
    if "inspect_ai" in tools and not Path(opts.peers_python).exists():
        print(f"inspect_ai skipped: no {opts.peers_python}", file=sys.stderr)
        tools.remove("inspect_ai")
    if "promptfoo" in tools and not Path(opts.promptfoo).exists():
        print(f"promptfoo skipped: no {opts.promptfoo}", file=sys.stderr)
        tools.remove("promptfoo")
    print("| limit | tool | rows completed | requests answered 429 | serving time / bound | max in flight | CPU |")
    print("|---|---|---|---|---|---|---|")
    opts.engine_yaml = opts.engine_yaml.encode().decode("unicode_escape")
    names = list(SCENARIOS)
    for name in opts.scenarios.split(","):
        name = names[int(name) - 1] if name.isdigit() else name
        scenario = SCENARIOS[name]
        calls = scenario.calls or opts.calls
        if opts.sim:
            results = (simulate(scenario, calls, int(seed)) for seed in opts.seeds.split(","))
        else:
            results = (measure(tool, scenario, calls, opts) for tool in tools)
        for r in results:
            print(f"| {name} | {r['tool']} | {r['rows']} / {calls} | {100 * r['share_429']:.1f}% "
                  f"({r['limited']} of {r['requests']}) | {r['serving_s']:.1f} s / {r['bound_s']:.1f} s = "
                  f"{r['ratio']:.2f}x | {r['max_in_flight']} | {r['cpu_s']:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
