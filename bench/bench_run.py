"""Benchmark `engine run`: client + runner + journal + Parquet CPU per call against a raw aiohttp loop.

Every measurement runs in its own process against `bench/mock_server.py` (a separate process):

- non-streaming: 20,000 calls at concurrency 64 (raw aiohttp loop vs the engine's Runner);
- streaming: 5,000 calls of 50 SSE chunks (raw loop reading the body vs full SSE parsing);
- peak RSS of the engine for 100,000 results;
- the whole `python -m engine run` process for 2,000 calls (suite loading, imports, manifest included),
  paired with a whole bare-loop process making the same 2,000 streamed calls and one `contains` check each.

CPU is the process's CPU time (user + system) spent in the measured loop, divided by the calls.
`--quick` divides the counts by 10 (for a smoke run). Figures go to bench/README.md.

`--rounds N [--against TREE]`: N paired rounds instead: each round runs the raw loop, TREE's
engine (an export of an older commit, run with its own bench/bench_run.py) and this tree's, in turns first,
and the raw loop again against one mock server, non-streaming and streaming; then the whole processes (bare
loop, then the two `engine run`s in turns); each engine's ratio is taken against its round's raw runs.
Medians and ranges are printed, and every round as a JSON line.

`--whole-rounds N [--calls C] [--against TREE] [--against-python PY]`: N paired rounds of the whole processes
only, C calls each (2,000 by default; see `whole_rounds`): this tree against TREE, or against this tree run by
another interpreter (a virtualenv).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
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


def _raw_request(base_url: str, stream: bool) -> tuple[bytes, dict[str, str], str]:
    """The bare loops' request: body bytes, headers and URL."""
    body = dict(BODY, stream=stream)
    if stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode(), {"Content-Type": "application/json"}, base_url + "/chat/completions"


def _take_events(buffer: bytes, parts: list[str]) -> bytes:
    """The bare loops' SSE reading: split the whole events off `buffer`, add each one's content to `parts`.

    Returns the rest of `buffer` (an event not yet complete).
    """
    *events, rest = buffer.split(b"\n\n")
    for event in events:
        data = event[6:]
        if data != b"[DONE]":
            for choice in json.loads(data)["choices"]:
                parts.append(choice["delta"].get("content") or "")
    return rest


async def _raw(base_url: str, calls: int, stream: bool, concurrency: int) -> None:
    """The baseline: the same requests with a bare aiohttp loop.

    It does the least a correct client must: `json.loads` of the whole body, or, for a stream, splitting
    the events and `json.loads` of each payload, joining the content.
    """
    import aiohttp

    payload, headers, url = _raw_request(base_url, stream)
    left = iter(range(calls))

    async def worker(session: aiohttp.ClientSession) -> None:
        for _ in left:
            async with session.post(url, data=payload, headers=headers) as resp:
                if stream:
                    buffer = b""
                    parts: list[str] = []
                    async for chunk in resp.content.iter_any():
                        buffer = _take_events(buffer + chunk, parts)
                    "".join(parts)
                else:
                    json.loads(await resp.read())

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))


def _bench_tests(calls: int, repeat: int) -> list:
    """The suite's tests, as the loader hands them to `engine run` (built before the measured loop)."""
    from engine.evaluators import compile_spec
    from engine.model.test import Test

    spec = {"contains": "ok"}
    evaluator = compile_spec(spec)   # as the loader does: a spec without templates is compiled once
    return [Test(suite="bench", id=f"t{i}", file="bench.yaml", line=1,
                 messages=({"role": "user", "content": "say ok"},), prompt="say ok",
                 eval=spec, hash=f"h{i}", max_tokens=64, evaluator=evaluator) for i in range(calls // repeat)]


async def _engine(base_url: str, calls: int, stream: bool, concurrency: int, out: Path, tests: list,
                  repeat: int = 1) -> int:
    from engine.client.request import RequestSettings
    from engine.model.model_config import ModelConfig
    from engine.results.journal import Journal
    from engine.results.writer import ResultsWriter
    from engine.run.jobs import iter_jobs
    from engine.run.runner import RunConfig, Runner

    model = ModelConfig(name="bench", model="bench-model", base_url=base_url, concurrency=concurrency,
                        stream=stream)
    journal = Journal(out / "_journal.sqlite")
    writer = ResultsWriter(out, journal)
    runner = Runner(RunConfig(run_id="bench", concurrency=concurrency, settings=RequestSettings(stream=stream)),
                    journal, writer)
    stats = await runner.run({"bench": (model, iter_jobs(model, tests, repeat))}, calls, {"bench": None})
    journal.close()
    return stats.done


def child(kind: str, base_url: str, calls: int, stream: bool, concurrency: int, repeat: int = 1) -> None:
    """Measure one loop in this process and print a JSON line."""
    if kind == "engine":
        # Arrow's memory pool as `engine run` has it: engine.cli chooses it before pyarrow loads (an older
        # tree, --against, chose it with `prefer_system_allocator`, or not at all).
        import engine.cli
        try:
            from engine._gc import prefer_system_allocator  # type: ignore[attr-defined]
        except ImportError:
            pass
        else:
            prefer_system_allocator()
    import aiohttp  # noqa: F401  (imports are not part of the per-call cost)
    if os.environ.get("BENCH_ARROW") != "numpy":
        # Both loops' processes hold the modules `engine run` holds, pyarrow loaded as it loads it: an older
        # tree (--against) that hid numpy from pyarrow in its runs hides it here too; this tree imports pyarrow
        # the normal way. BENCH_ARROW=numpy keeps numpy-aware pyarrow for an older tree as well.
        try:
            from engine._arrow import load_pyarrow_without_numpy  # type: ignore[import-not-found]
        except ImportError:   # this tree, or a tree older than the hook
            pass
        else:
            load_pyarrow_without_numpy()
    import pyarrow.parquet  # noqa: F401

    import engine.evaluators
    import engine.results.writer

    tests: list = []
    if kind == "engine":
        # Imported and built before `cpu0`, as aiohttp is for the raw loop: the modules a run imports and the
        # suite's Test objects are not per-call cost (before 2026-12-03's fourth pass they were inside the
        # measured window, so figures from before it are not comparable with later ones: bench/README.md).
        import engine.client.client
        import engine.results.journal
        import engine.run.jobs
        import engine.run.runner  # noqa: F401  (imported before `cpu0`, as the lines above)
        from engine._gc import tuned_gc

        tests = _bench_tests(calls, repeat)
    with tempfile.TemporaryDirectory() as tmp:
        cpu0, wall0 = _cpu(), time.perf_counter()
        if kind == "raw":
            asyncio.run(_raw(base_url, calls, stream, concurrency))
            done = calls
        else:
            with tuned_gc():   # the collector setting `engine run` runs under (the CLI enters it)
                done = asyncio.run(_engine(base_url, calls, stream, concurrency, Path(tmp), tests, repeat))
        cpu, wall = _cpu() - cpu0, time.perf_counter() - wall0
    print(json.dumps({"kind": kind, "calls": calls, "done": done, "stream": stream, "cpu_s": cpu, "wall_s": wall,
                      "cpu_us_per_call": 1e6 * cpu / calls, "peak_rss_mb": _peak_rss_mb()}), flush=True)


def _measure(kind: str, base_url: str, calls: int, stream: bool, concurrency: int, repeat: int = 1,
             tree: Path = ROOT) -> dict:
    out = subprocess.run([sys.executable, str(tree / "bench" / "bench_run.py"), "--child", kind, base_url, str(calls),
                          str(int(stream)), str(concurrency), str(repeat)], capture_output=True, text=True, cwd=tree,
                         check=False)
    if out.returncode != 0:
        raise SystemExit(f"{kind} child failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _bare_process(base_url: str, calls: int) -> None:
    """The whole-process baseline: what `_whole_cli` asks, as a bare aiohttp loop in a process of its own.

    The same 2,000 requests as the engine's (a prompt per case, streamed, max_tokens 1024, temperature 0),
    at concurrency 64, each answer's events split and decoded and one `contains` check made on it.
    """
    import aiohttp

    url = base_url + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    left = iter(range(calls))
    passed = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal passed
        for i in left:
            payload = json.dumps({"model": "bench-model", "messages": [{"role": "user", "content": f"say ok {i}"}],
                                  "max_tokens": 1024, "temperature": 0.0, "stream": True,
                                  "stream_options": {"include_usage": True}}).encode()
            async with session.post(url, data=payload, headers=headers) as resp:
                buffer = b""
                parts: list[str] = []
                async for chunk in resp.content.iter_any():
                    buffer = _take_events(buffer + chunk, parts)
                passed += "ok" in "".join(parts)

    async def main() -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:
            await asyncio.gather(*(worker(session) for _ in range(64)))

    asyncio.run(main())
    if passed != calls:
        raise SystemExit(f"bare loop: {passed} of {calls} answers passed")


def whole_process(argv: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> dict:
    """Run one whole process; its wall seconds, CPU seconds (user + system) and peak RSS in MB."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[1:4]} failed:\n{err.decode(errors='replace')}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024.0}


def _write_cli_suite(folder: Path, base_url: str, calls: int) -> None:
    rows = "\n".join(f"      - {{n: {i}}}" for i in range(calls))
    (folder / "bench.yaml").write_text(
        "suite: bench\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"say ok {{ n }}\"\n"
        f"    eval: {{contains: ok}}\n    cases:\n{rows}\n")
    (folder / "models.yaml").write_text(
        f"models:\n  bench:\n    base_url: {base_url}\n    model: bench-model\n    concurrency: 64\n")


def _whole_cli(base_url: str, calls: int, tree: Path = ROOT, python: str = sys.executable) -> dict:
    """A whole `python -m engine run` process for `calls` chat calls, as a user runs it.

    Default settings (streamed; the response cache on, as at temperature 0 by default) with a new, empty
    cache file and results folder each time, so every call is made and stored.
    """
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _write_cli_suite(folder, base_url, calls)
        env = dict(os.environ, PYTHONPATH=str(tree), ENGINE_RESPONSE_CACHE=str(folder / "cache.sqlite"))
        return whole_process([python, "-m", "engine", "run", str(folder / "bench.yaml"), "--models",
                               str(folder / "models.yaml"), "--out", str(folder / "results"), "--quiet",
                               "--concurrency", "64"], env=env, cwd=tree)


def whole_rounds(base_url: str, count: int, against: Path | None, against_python: str | None,
                 calls: int = 2000) -> None:
    """Paired rounds of the whole processes only: bare loop, the two engines (order alternating), bare loop.

    "after" is this tree with this interpreter; "before" is TREE (`--against`, default this tree) run by
    `--against-python` (default this interpreter), e.g. another virtualenv with another typer. Each engine's
    CPU is divided by the mean of its round's two bare runs, and after's by before's of the same round.
    """
    engines = {"after": (ROOT, sys.executable)}
    if against is not None or against_python is not None:
        engines["before"] = (against or ROOT, against_python or sys.executable)
    series: dict[str, list[float]] = {}
    for n in range(count):
        first = _whole_bare(base_url, calls)
        order = list(engines) if n % 2 == 0 else list(reversed(engines))
        runs = {name: _whole_cli(base_url, calls, *engines[name]) for name in order}
        last = _whole_bare(base_url, calls)
        bare = (first["cpu_s"] + last["cpu_s"]) / 2
        series.setdefault("bare cpu s", []).append(bare)
        series.setdefault("bare peak MB", []).append(max(first["peak_rss_mb"], last["peak_rss_mb"]))
        for name, run in runs.items():
            series.setdefault(f"{name} cpu s", []).append(run["cpu_s"])
            series.setdefault(f"{name} / bare", []).append(run["cpu_s"] / bare)
            series.setdefault(f"{name} peak MB", []).append(run["peak_rss_mb"])
        if "before" in runs:
            series.setdefault("after / before", []).append(runs["after"]["cpu_s"] / runs["before"]["cpu_s"])
        print(json.dumps({"round": n, "order": order, "bare": [first, last], **runs}), flush=True)
    print(f"{count} paired rounds of whole processes ({calls:,} streamed calls): median (min-max)")
    for key, values in series.items():
        print(f"  {key}: {_spread(values)}")


def _whole_bare(base_url: str, calls: int) -> dict:
    return whole_process([sys.executable, __file__, "--bare-process", base_url, str(calls)])


def _spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return (fmt + " (" + fmt + "-" + fmt + ")").format(statistics.median(values), min(values), max(values))


def rounds(base_url: str, count: int, against: Path | None, scale: int) -> None:
    """Paired rounds: raw loop, the older tree's engine, this engine, raw loop again (see the module doc)."""
    trees = ([("before", against)] if against is not None else []) + [("after", ROOT)]
    ratios: dict[str, list[float]] = {}
    for n in range(count):
        record: dict = {"round": n}
        # The two engines take turns going first: a fixed order read the second one 1.01x of the first where
        # alternating pairs of the same trees read 0.93-0.99x (bench/README.md, 2026-12-04 evening).
        order = trees if n % 2 == 0 else list(reversed(trees))
        for label, calls, stream in (("non-streaming", 20_000 // scale, False), ("streaming", 5_000 // scale, True)):
            first = _measure("raw", base_url, calls, stream, 64)
            engines = {name: _measure("engine", base_url, calls, stream, 64, tree=tree) for name, tree in order}
            last = _measure("raw", base_url, calls, stream, 64)
            raw_us = (first["cpu_us_per_call"] + last["cpu_us_per_call"]) / 2
            record[label] = {"raw_us": raw_us}
            for name, eng in engines.items():
                ratio = eng["cpu_us_per_call"] / raw_us
                record[label][name] = {"us": eng["cpu_us_per_call"], "ratio": ratio}
                ratios.setdefault(f"{label} {name} ratio", []).append(ratio)
                ratios.setdefault(f"{label} {name} us", []).append(eng["cpu_us_per_call"])
            ratios.setdefault(f"{label} raw us", []).append(raw_us)
            if len(engines) == 2:
                ratios.setdefault(f"{label} after / before", []).append(
                    engines["after"]["cpu_us_per_call"] / engines["before"]["cpu_us_per_call"])
        bare = _whole_bare(base_url, 2000)
        record["whole"] = {"bare": bare}
        for name, tree in order:
            whole = record["whole"][name] = _whole_cli(base_url, 2000, tree)
            ratios.setdefault(f"whole {name} cpu s", []).append(whole["cpu_s"])
            ratios.setdefault(f"whole {name} peak MB", []).append(whole["peak_rss_mb"])
            ratios.setdefault(f"whole {name} ratio", []).append(whole["cpu_s"] / bare["cpu_s"])
        ratios.setdefault("whole bare cpu s", []).append(bare["cpu_s"])
        ratios.setdefault("whole bare peak MB", []).append(bare["peak_rss_mb"])
        print(json.dumps(record), flush=True)
    for name, tree in trees:
        big = _measure("engine", base_url, 100_000 // scale, False, 64, repeat=100, tree=tree)
        ratios[f"100k results {name} peak MB"] = [big["peak_rss_mb"]]
    print(f"{count} paired rounds: median (min-max)")
    for key, values in ratios.items():
        print(f"  {key}: {_spread(values)}")


def main() -> int:
    quick = "--quick" in sys.argv
    scale = 10 if quick else 1
    server = subprocess.Popen([sys.executable, str(HERE / "mock_server.py")], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        base_url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
        if "--whole-rounds" in sys.argv:
            against = sys.argv[sys.argv.index("--against") + 1] if "--against" in sys.argv else None
            python = sys.argv[sys.argv.index("--against-python") + 1] if "--against-python" in sys.argv else None
            calls = int(sys.argv[sys.argv.index("--calls") + 1]) if "--calls" in sys.argv else 2000
            whole_rounds(base_url, int(sys.argv[sys.argv.index("--whole-rounds") + 1]),
                         None if against is None else Path(against).resolve(), python, calls)
            return 0
        if "--rounds" in sys.argv:
            against = sys.argv[sys.argv.index("--against") + 1] if "--against" in sys.argv else None
            rounds(base_url, int(sys.argv[sys.argv.index("--rounds") + 1]),
                   None if against is None else Path(against).resolve(), scale)
            return 0
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
        bare, whole = _whole_bare(base_url, 2000), _whole_cli(base_url, 2000)
        print(f"whole process, 2000 streamed chat calls + `contains`: bare aiohttp loop {bare['cpu_s']:.2f} s CPU, "
              f"{bare['peak_rss_mb']:.0f} MB; `python -m engine run` {whole['cpu_s']:.2f} s CPU "
              f"({whole['wall_s']:.2f} s wall), {whole['peak_rss_mb']:.0f} MB: "
              f"{whole['cpu_s'] / bare['cpu_s']:.2f}x", flush=True)
        worst = max(r[2] for r in results.values())
        return 0 if worst <= 2.0 and big["peak_rss_mb"] <= 250 else 1
    finally:
        server.terminate()
        server.wait(5)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, url, n, stream_flag, conc, rep = sys.argv[2:8]
        child(kind, url, int(n), stream_flag == "1", int(conc), int(rep))
    elif len(sys.argv) > 1 and sys.argv[1] == "--bare-process":
        _bare_process(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())
