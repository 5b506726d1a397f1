"""Benchmark how late `engine run` stamps the first token at 64 calls in flight, against a bare aiohttp loop.

A run's `ttft_visible_s` is stamped by the event loop when it reads the first content chunk; if that loop is also
scoring answers, encoding rows and committing them, the chunk waits and the recorded time to first token is late.
Lateness of one call = the recorded TTFT minus the server's own (from the request read to the first chunk
written), both on this machine's clock. The server (`--server`, a raw asyncio process of its own) streams every
answer after a fixed wait, first chunk alone, the rest in small steps, and logs its own TTFT per prompt.

Each round runs, against the same server and at the same concurrency, a bare aiohttp loop (the least a client
does: split the events, `json.loads` each, stamp the first content) and a whole `python -m engine run` of a
suite whose checks cost what real ones do (`contains`, two `ifeval` instructions, a `json_schema`), then
compares the p50/p95/p99 lateness. `--burn N` keeps N busy processes running through both (a loaded machine).
`--against DIR` adds another tree's `engine run` (an export of an older commit) to every round.

Run: `.venv/bin/python bench/bench_ttft.py [--calls 3000] [--rounds 3] [--burn 0] [--against DIR]`.
Target: the engine's p95 lateness within 1.5x the bare loop's. Figures go to bench/README.md.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONCURRENCY = 64
FIRST_CHUNK_S = 0.040   # the server's time to first token
STEP_S = 0.002          # between the other chunks
CHUNKS = 24
# An answer of ~2 KB: JSON the schema check reads, words the ifeval checks count.
WORDS = ("The quick brown fox jumps over the lazy dog, and then it rests. " * 3).split()


def _answer_chunks() -> list[bytes]:
    text = json.dumps({"name": "fox", "items": list(range(40)), "note": " ".join(WORDS * 4)})
    size = len(text) // CHUNKS + 1
    pieces = [text[i:i + size] for i in range(0, len(text), size)]
    events = [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 400, "total_tokens": 410}})
    return [b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "model": "m", **e}).encode()
            + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


# ------------------------------------------------------------------------------------------ the server

async def _serve(port_out: multiprocessing.connection.Connection) -> None:
    chunks = _answer_chunks()
    log: dict[str, float] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                received = time.time()
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length) if length else b""
                if head.startswith(b"GET /log"):
                    data = json.dumps(log).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                 + str(len(data)).encode() + b"\r\n\r\n" + data)
                    await writer.drain()
                    continue
                prompt = json.loads(body)["messages"][-1]["content"]
                await asyncio.sleep(FIRST_CHUNK_S)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked"
                             b"\r\n\r\n")
                first = True
                for chunk in chunks:
                    writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    await writer.drain()
                    if first:
                        log[prompt] = time.time() - received
                        first = False
                    await asyncio.sleep(STEP_S)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    port_out.send(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def _server_main(port_out: multiprocessing.connection.Connection) -> None:
    asyncio.run(_serve(port_out))


def _server_log(base: str) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(base + "/log") as reply:
        return json.loads(reply.read())


# ------------------------------------------------------------------------------------------ the two clients

def _bare(base: str, prompts: list[str]) -> dict[str, float]:
    """The bare aiohttp loop: each prompt's TTFT as it stamps it (first content chunk decoded)."""
    import aiohttp

    url = base + "/v1/chat/completions"
    left = iter(prompts)
    found: dict[str, float] = {}

    async def worker(session: aiohttp.ClientSession) -> None:
        for prompt in left:
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}], "stream": True,
                               "max_tokens": 1024}).encode()
            started = time.perf_counter()
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                buffer = b""
                async for chunk in resp.content.iter_any():
                    *events, buffer = (buffer + chunk).split(b"\n\n")
                    for event in events:
                        data = event[6:]
                        if data != b"[DONE]" and prompt not in found:
                            delta = json.loads(data)["choices"][0]["delta"]
                            if delta.get("content"):
                                found[prompt] = time.perf_counter() - started

    async def main() -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as session:
            await asyncio.gather(*(worker(session) for _ in range(CONCURRENCY)))

    asyncio.run(main())
    return found


_SUITE = """\
suite: ttft
tests:
  - id: "q-{{ n }}"
    prompt: "{{ prompt }}"
    eval:
      all:
        - {contains: fox}
        - {ifeval: {id: length_constraints:number_words, relation: at least, num_words: 50}}
        - {ifeval: {id: change_case:capital_word_frequency, capital_frequency: 3, capital_relation: less than}}
        - json_schema: {type: object, required: [name, items], properties: {items: {type: array,
                        items: {type: integer}}, name: {type: string, pattern: "^[a-z]+$"}}}
    cases:
"""


def _engine(base: str, prompts: list[str], tree: Path) -> dict[str, float]:
    """A whole `python -m engine run` of `tree`: each prompt's recorded `ttft_visible_s`."""
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = "".join(f"      - {{n: {i}, prompt: {json.dumps(p)}}}\n" for i, p in enumerate(prompts))
        (folder / "suite.yaml").write_text(_SUITE + rows)
        (folder / "models.yaml").write_text(f"models:\n  m:\n    base_url: {base}/v1\n    model: m\n"
                                            f"    concurrency: {CONCURRENCY}\n")
        env = dict(os.environ, PYTHONPATH=str(tree))
        done = subprocess.run([sys.executable, "-m", "engine", "run", str(folder / "suite.yaml"), "--models",
                               str(folder / "models.yaml"), "--out", str(folder / "out"), "--quiet", "--no-cache",
                               "--concurrency", str(CONCURRENCY)], cwd=tree, env=env, capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"engine run ({tree}) failed:\n{done.stderr[-2000:]}")
        table = pq.read_table(folder / "out" / "latest", columns=["test_id", "ttft_visible_s", "passed"])
        by_id = dict(zip(table.column("test_id").to_pylist(), table.column("ttft_visible_s").to_pylist(),
                         strict=True))
        return {p: by_id[f"q-{i}"] for i, p in enumerate(prompts) if by_id.get(f"q-{i}") is not None}


# ------------------------------------------------------------------------------------------ rounds

def _lateness(recorded: dict[str, float], server: dict[str, float]) -> list[float]:
    return sorted(1000 * (recorded[p] - server[p]) for p in recorded if p in server)


def _quantiles(values: list[float]) -> dict[str, float]:
    cut = statistics.quantiles(values, n=100)
    return {"p50": cut[49], "p95": cut[94], "p99": cut[98], "n": len(values)}


def _burn(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def main() -> int:
    args = sys.argv[1:]
    calls = int(args[args.index("--calls") + 1]) if "--calls" in args else 3000
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 3
    burners = int(args[args.index("--burn") + 1]) if "--burn" in args else 0
    trees = {"engine": ROOT}
    if "--against" in args:
        trees["against"] = Path(args[args.index("--against") + 1]).resolve()
    context = multiprocessing.get_context("spawn")
    port_in, port_out = context.Pipe(duplex=False)
    server = context.Process(target=_server_main, args=(port_out,), daemon=True)
    server.start()
    base = f"http://127.0.0.1:{port_in.recv()}"
    stop = context.Event()
    burning = [context.Process(target=_burn, args=(stop,), daemon=True) for _ in range(burners)]
    for process in burning:
        process.start()
    series: dict[str, list[dict[str, float]]] = {}
    try:
        for n in range(rounds):
            order = ["bare", *trees] if n % 2 == 0 else [*reversed(trees), "bare"]
            for name in order:
                prompts = [f"r{n}-{name}-{i}" for i in range(calls)]
                recorded = _bare(base, prompts) if name == "bare" else _engine(base, prompts, trees[name])
                found = _quantiles(_lateness(recorded, _server_log(base)))
                series.setdefault(name, []).append(found)
                print(json.dumps({"round": n, "client": name, **{k: round(v, 2) for k, v in found.items()}}),
                      flush=True)
    finally:
        stop.set()
        for process in burning:
            process.join(5)
        server.terminate()
    print(f"{rounds} rounds of {calls} streamed calls at {CONCURRENCY} in flight, {burners} busy processes: "
          "lateness of the recorded TTFT, ms, median (min-max) over rounds")
    for name, found in series.items():
        line = "  ".join(f"{q} {statistics.median(f[q] for f in found):.1f} ({min(f[q] for f in found):.1f}-"
                         f"{max(f[q] for f in found):.1f})" for q in ("p50", "p95", "p99"))
        print(f"  {name}: {line}")
    bare95 = statistics.median(f["p95"] for f in series["bare"])
    for name in trees:
        ratios = [e["p95"] / b["p95"] for e, b in zip(series[name], series["bare"], strict=True)]
        print(f"  {name} p95 / bare p95: {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
    engine95 = statistics.median(f["p95"] for f in series["engine"])
    return 0 if engine95 <= 1.5 * bare95 else 1


if __name__ == "__main__":
    sys.exit(main())
