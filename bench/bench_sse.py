"""SSE decoding of one huge `data:` line: linear in the input, not quadratic.

A hostile or runaway server may send a whole answer as one 50 MB event. The stream arrives in
socket-sized chunks (64 KB here, what aiohttp's `iter_any` hands over on loopback), so a decoder that
re-joins and re-splits its buffer on every chunk does O(n^2 / chunk) work. Baseline, in the same run:
`b"".join(chunks)` + one `json.loads` of the event, the least any client must do. Figures in bench/README.md.
"""

from __future__ import annotations

import json
import time

from engine.client.sse import SSEDecoder

CHUNK = 64 * 1024
SIZES_MB = (12, 25, 50)


def event_bytes(megabytes: int) -> bytes:
    event = {"choices": [{"index": 0, "delta": {"content": "x" * (megabytes * 1024 * 1024)}, "finish_reason": None}]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def chunks_of(data: bytes) -> list[bytes]:
    return [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]


def baseline(chunks: list[bytes]) -> float:
    started = time.perf_counter()
    raw = b"".join(chunks)
    json.loads(raw[len(b"data: "):].strip())
    return time.perf_counter() - started


def decoder(chunks: list[bytes]) -> float:
    started = time.perf_counter()
    sse = SSEDecoder()
    datas: list[str] = []
    for chunk in chunks:
        datas.extend(sse.feed(chunk))
    datas.extend(sse.close())
    assert len(datas) == 1
    json.loads(datas[0])
    return time.perf_counter() - started


def main() -> None:
    print(f"{'size':>6} {'baseline s':>11} {'decoder s':>10} {'ratio':>7}")
    for mb in SIZES_MB:
        chunks = chunks_of(event_bytes(mb))
        base = min(baseline(chunks) for _ in range(3))
        ours = min(decoder(chunks) for _ in range(2 if mb < 50 else 1))
        print(f"{mb:>4}MB {base:>11.3f} {ours:>10.3f} {ours / base:>6.1f}x", flush=True)


if __name__ == "__main__":
    main()
