"""Benchmark how long `engine run` takes to end on SIGTERM (or Ctrl-C twice) while a check is at work.

The server (`--server`, a raw asyncio process) answers "ok" to quick prompts at once and 3 MB of short sentences to
the slow one after a second; the slow test's check (a loose `ifeval` sentence count that no variant follows, under
`timeout_s: 3600`) is linear in its answer and still a minute of work. Once the quick rows are committed and the
slow answer has been sent, the bench waits 2 s, signals the run, and times how long the process takes to exit; it
then checks that every quick row is in the Parquet and that the slow one is kept, marked not scored.

Run: `.venv/bin/python bench/bench_stop.py [--rounds 5]`. Target: the run ends within 2 s of the signal.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUICK = 5
SLOW_ANSWER = "a. " * 1_000_000


def _sse(text: str) -> bytes:
    step = 65536
    events = [{"choices": [{"index": 0, "delta": {"content": text[i:i + step]}, "finish_reason": None}]}
              for i in range(0, len(text), step)]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body = b"".join(b"data: " + json.dumps({"id": "x", "model": "m", **e}).encode() + b"\n\n" for e in events)
    return body + b"data: [DONE]\n\n"


async def _serve(port_out: multiprocessing.connection.Connection) -> None:
    quick, slow = _sse("ok"), _sse(SLOW_ANSWER)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line[15:]) for line in head.split(b"\r\n")
                               if line[:15].lower() == b"content-length:"), 0)
                body = json.loads(await reader.readexactly(length))
                is_slow = body["messages"][-1]["content"] == "slow"
                if is_slow:
                    await asyncio.sleep(1.0)
                data = slow if is_slow else quick
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: "
                             + str(len(data)).encode() + b"\r\n\r\n" + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port_out.send(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def _server_main(port_out: multiprocessing.connection.Connection) -> None:
    asyncio.run(_serve(port_out))


def _committed(out: Path) -> int:
    for journal in out.glob("*/_journal.sqlite"):
        try:
            with sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=1) as db:
                return int(db.execute("SELECT count(*) FROM rows").fetchone()[0])
        except sqlite3.OperationalError:
            return 0
    return 0


def _round(base: str, how: str) -> dict[str, float | bool]:
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tests = [{"id": f"q{i}", "prompt": f"quick {i}", "eval": {"contains": "ok"}} for i in range(QUICK)]
        tests.append({"id": "slow", "prompt": "slow", "eval": {"ifeval": {
            "id": "length_constraints:number_sentences", "relation": "less than", "num_sentences": 2,
            "loose": True}, "timeout_s": 3600}})
        (folder / "s.yaml").write_text("suite: s\ntests:\n" + "".join(f"  - {json.dumps(t)}\n" for t in tests))
        (folder / "models.yaml").write_text(f"models:\n  m:\n    base_url: {base}/v1\n    model: m\n")
        out = folder / "out"
        proc = subprocess.Popen([sys.executable, "-m", "engine", "run", str(folder / "s.yaml"), "--models",
                                 str(folder / "models.yaml"), "--out", str(out), "--quiet", "--no-cache"],
                                cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while _committed(out) < QUICK and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(3.0)   # the slow answer arrives (the server waits 1 s) and its check is at work
        sent = time.perf_counter()
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGINT)
            time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=600)
        took = time.perf_counter() - sent
        table = pq.read_table(next(out.glob("*/_manifest.json")).parent,
                              columns=["test_id", "passed", "error_message"]).to_pylist()
        by_id = {row["test_id"]: row for row in table}
        kept = (all(by_id.get(f"q{i}", {}).get("passed") for i in range(QUICK))
                and str(by_id.get("slow", {}).get("error_message", "")).startswith("not scored"))
        return {"seconds": took, "every_row": kept}


def main() -> int:
    args = sys.argv[1:]
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 5
    context = multiprocessing.get_context("spawn")
    port_in, port_out = context.Pipe(duplex=False)
    server = context.Process(target=_server_main, args=(port_out,), daemon=True)
    server.start()
    base = f"http://127.0.0.1:{port_in.recv()}"
    found: dict[str, list[dict[str, float | bool]]] = {"sigterm": [], "ctrl-c twice": []}
    try:
        for n in range(rounds):
            for how in found:
                result = _round(base, how)
                found[how].append(result)
                print(json.dumps({"round": n, "signal": how, **result}), flush=True)
    finally:
        server.terminate()
    worst = 0.0
    for how, results in found.items():
        seconds = [float(r["seconds"]) for r in results]
        worst = max(worst, *seconds)
        print(f"{how}: signal to exit {statistics.median(seconds):.2f} s median ({min(seconds):.2f}-"
              f"{max(seconds):.2f}) over {rounds} rounds; every finished row in the Parquet: "
              f"{sum(bool(r['every_row']) for r in results)}/{rounds}")
    return 0 if worst <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
