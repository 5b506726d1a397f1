"""Benchmark `engine run`: client + runner + journal + Parquet CPU per call against a raw aiohttp loop.

Every measurement runs in its own process against `bench/mock_server.py` (a separate process):

- non-streaming: 20,000 calls at concurrency 64 (raw aiohttp loop vs the engine's Runner);
- streaming: 5,000 calls of 50 SSE chunks (raw loop reading the body vs full SSE parsing);
- peak RSS of the engine for 100,000 results;
- the whole `python -m engine run` process for 2,000 calls (suite loading, imports, manifest included).

CPU is the process's CPU time (user + system) spent in the measured loop, divided by the calls.
`--quick` divides the counts by 10 (for a smoke run). Figures go to bench/README.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

BODY = {"model": "bench-model", "messages": [{"role": "user", "content": "say ok"}], "max_tokens": 64,
        "temperature": 0.0}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


async def _raw(base_url: str, calls: int, stream: bool, concurrency: int) -> None:
    """The baseline: the same requests with a bare aiohttp loop.

    It does the least a correct client must: `json.loads` of the whole body, or, for a stream, splitting
    the events and `json.loads` of each payload, joining the content.
    """
    import aiohttp

    body = dict(BODY, stream=stream)
    if stream:
        body["stream_options"] = {"include_usage": True}
    payload = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    url = base_url + "/chat/completions"
    left = iter(range(calls))

    async def worker(session: aiohttp.ClientSession) -> None:
        for _ in left:
            async with session.post(url, data=payload, headers=headers) as resp:
                if stream:
                    buffer = b""
                    parts = []
                    async for chunk in resp.content.iter_any():
                        buffer += chunk
                        *events, buffer = buffer.split(b"\n\n")
                        for event in events:
                            data = event[6:]
                            if data != b"[DONE]":
                                for choice in json.loads(data)["choices"]:
                                    parts.append(choice["delta"].get("content") or "")
                    "".join(parts)
                else:
                    json.loads(await resp.read())

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))


async def _engine(base_url: str, calls: int, stream: bool, concurrency: int, out: Path, repeat: int = 1) -> int:
    from engine.client.openai import RequestSettings
    from engine.evaluators import compile_spec
    from engine.model import ModelConfig, Test
    from engine.results.journal import Journal
    from engine.results.writer import ResultsWriter
    from engine.run.jobs import iter_jobs
    from engine.run.runner import RunConfig, Runner

    spec = {"contains": "ok"}
    evaluator = compile_spec(spec)   # as the loader does: a spec without templates is compiled once

    def tests():
        for i in range(calls // repeat):
            yield Test(suite="bench", id=f"t{i}", file="bench.yaml", line=1,
                       messages=({"role": "user", "content": "say ok"},), prompt="say ok",
                       eval=spec, hash=f"h{i}", max_tokens=64, evaluator=evaluator)

    model = ModelConfig(name="bench", model="bench-model", base_url=base_url, concurrency=concurrency,
                        stream=stream)
    journal = Journal(out / "_journal.sqlite")
    writer = ResultsWriter(out, journal)
    runner = Runner(RunConfig(run_id="bench", concurrency=concurrency, settings=RequestSettings(stream=stream)),
                    journal, writer)
    stats = await runner.run({"bench": (model, iter_jobs(model, list(tests()), repeat))}, calls, {"bench": None})
    journal.close()
    return stats.done


def child(kind: str, base_url: str, calls: int, stream: bool, concurrency: int, repeat: int = 1) -> None:
    """Measure one loop in this process and print a JSON line."""
    import aiohttp  # noqa: F401  (imports are not part of the per-call cost)
    import pyarrow.parquet  # noqa: F401

    import engine.evaluators
    import engine.results.writer  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        cpu0, wall0 = _cpu(), time.perf_counter()
        if kind == "raw":
            asyncio.run(_raw(base_url, calls, stream, concurrency))
            done = calls
        else:
            from engine._gc import tuned_gc

            with tuned_gc():   # the collector setting `engine run` runs under (the CLI enters it)
                done = asyncio.run(_engine(base_url, calls, stream, concurrency, Path(tmp), repeat))
        cpu, wall = _cpu() - cpu0, time.perf_counter() - wall0
    print(json.dumps({"kind": kind, "calls": calls, "done": done, "stream": stream, "cpu_s": cpu, "wall_s": wall,
                      "cpu_us_per_call": 1e6 * cpu / calls, "peak_rss_mb": _peak_rss_mb()}), flush=True)


def _measure(kind: str, base_url: str, calls: int, stream: bool, concurrency: int, repeat: int = 1) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, base_url, str(calls), str(int(stream)),
                          str(concurrency), str(repeat)], capture_output=True, text=True, cwd=ROOT, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{kind} child failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _whole_cli(base_url: str, calls: int) -> float:
    """Wall seconds of a whole `python -m engine run` process for `calls` chat calls."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = "\n".join(f"      - {{n: {i}}}" for i in range(calls))
        (folder / "bench.yaml").write_text(
            "suite: bench\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"say ok {{ n }}\"\n"
            f"    eval: {{contains: ok}}\n    cases:\n{rows}\n")
        (folder / "models.yaml").write_text(
            f"models:\n  bench:\n    base_url: {base_url}\n    model: bench-model\n    concurrency: 64\n")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "engine", "run", str(folder / "bench.yaml"), "--models",
                               str(folder / "models.yaml"), "--out", str(folder / "results"), "--quiet",
                               "--concurrency", "64", "--no-cache"],   # calls, not the response cache
                              capture_output=True, text=True, env=env, cwd=ROOT, check=False)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"engine run failed:\n{done.stderr}")
    return wall


def main() -> int:
    quick = "--quick" in sys.argv
    scale = 10 if quick else 1
    server = subprocess.Popen([sys.executable, str(HERE / "mock_server.py")], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        base_url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
        results = {}
        for label, calls, stream in (("non-streaming", 20_000 // scale, False), ("streaming", 5_000 // scale, True)):
            raw = _measure("raw", base_url, calls, stream, 64)
            eng = _measure("engine", base_url, calls, stream, 64)
            ratio = eng["cpu_us_per_call"] / raw["cpu_us_per_call"]
            results[label] = (raw, eng, ratio)
            print(f"{label}: {calls} calls  raw {raw['cpu_us_per_call']:.0f} us/call CPU "
                  f"({raw['wall_s']:.2f} s wall)  engine {eng['cpu_us_per_call']:.0f} us/call CPU "
                  f"({eng['wall_s']:.2f} s wall)  ratio {ratio:.2f}x (target <= 2x)", flush=True)
        # Results memory: 1,000 tests x 100 attempts. The suite's own Test objects are not results.
        big = _measure("engine", base_url, 100_000 // scale, False, 64, repeat=100)
        print(f"peak RSS for {big['calls']} results (1,000 tests x 100 attempts): {big['peak_rss_mb']:.0f} MB "
              f"(target <= 250 MB); {big['wall_s']:.1f} s wall", flush=True)
        wall = _whole_cli(base_url, 2000)
        print(f"whole `python -m engine run` process, 2000 chat calls: {wall:.2f} s (target < 2 s)", flush=True)
        worst = max(r[2] for r in results.values())
        return 0 if worst <= 2.0 and big["peak_rss_mb"] <= 250 else 1
    finally:
        server.terminate()
        server.wait(5)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, url, n, stream_flag, conc, rep = sys.argv[2:8]
        child(kind, url, int(n), stream_flag == "1", int(conc), int(rep))
    else:
        sys.exit(main())
