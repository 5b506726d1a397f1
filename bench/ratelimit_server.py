"""A rate-limited OpenAI-compatible server on loopback, for pacing benchmarks and tests.

Run `python bench/ratelimit_server.py --rps 20` and read the port from its first stdout line. Every POST to
.../chat/completions takes one request and its tokens (the messages' text at 4 bytes a token, 4 a message,
plus `max_tokens`) from two token buckets (`--rps`/`--burst`, `--tps`/`--token-burst`; a bucket left out does
not limit). A request the buckets cannot pay is answered 429 with `retry-after-ms` and `retry-after` (whole
seconds, rounded up), as OpenAI does; one they can pay is answered after a jittered latency (`--latency`,
uniform within +-30%), whole or as an SSE stream.

What the `x-ratelimit-*` headers on every answer say (`--headers`):

- `bucket` (default): the bucket that is enforced, as it is (OpenAI's headers, honestly);
- `minute-limit`: `limit` as a per-minute figure (60 x the rate) while `remaining` and `reset` count the
  one-second bucket that is enforced: (limit - remaining) / reset is then hundreds of times the real rate;
- `per-minute`: an honest per-minute bucket (60 x the rate, refilled at the rate) while the one-second bucket
  (`--burst`) is enforced too and never published: a burst within one second is refused though `remaining`
  is high, as OpenAI documents its per-minute limits may be enforced over shorter periods;
- `none`: no `x-ratelimit-*` and no `retry-after` (a provider that says nothing; `--no-headers` too).

`--per-model` gives each model (the body's `model`) buckets of its own; `--limited-model NAME` limits that
model only (repeatable), the others are answered at once whatever they send and publish nothing.
`GET /stats` answers the counters as JSON: requests, answered (2xx), limited (429), the largest number in
flight, the monotonic times of the first request and the last answer, the same counts per model, and when each
request arrived, was answered or was refused (`arrived_s`, `answered_s`, `refused_s`: seconds from the first
request, up to `TIMELINE` of each), to see where a run's time went.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from typing import Any

from aiohttp import web

MODEL = "bench-model"
HEADER_MODES = ("bucket", "minute-limit", "per-minute", "none")
TIMELINE = 100_000   # the most arrival and answer times /stats lists


class Bucket:
    """A token bucket: `capacity`, refilled at `rate` a second (None: no limit)."""

    def __init__(self, rate: float | None, capacity: float | None) -> None:
        self.rate = rate
        self.capacity = capacity if capacity is not None else rate
        self.level = self.capacity or 0.0
        self.at = time.monotonic()

    def refill(self, now: float) -> None:
        if self.rate is not None and self.capacity is not None:
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now

    def wait_for(self, cost: float) -> float:
        """Seconds until `cost` fits (0: it fits now)."""
        if self.rate is None:
            return 0.0
        return max(0.0, (min(cost, self.capacity or cost) - self.level) / self.rate)

    def take(self, cost: float) -> None:
        if self.rate is not None:
            self.level -= min(cost, self.capacity or cost)

    def reset_s(self) -> float:
        """Seconds until the bucket is full again."""
        if self.rate is None or self.capacity is None:
            return 0.0
        return max(0.0, (self.capacity - self.level) / self.rate)


def duration(seconds: float) -> str:
    """OpenAI's reset format: `20ms`, `1.5s`, `6m0s`."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    if seconds < 60:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    if seconds < 3600:
        minutes = int(seconds // 60)
        return f"{minutes}m{seconds - 60 * minutes:.0f}s"
    hours = int(seconds // 3600)
    return f"{hours}h{int((seconds - 3600 * hours) // 60)}m{seconds % 60:.0f}s"


def prompt_tokens(body: dict[str, Any]) -> int:
    """The server's count of a request's tokens: its text at 4 bytes a token, 4 a message, plus max_tokens."""
    size, messages = 0, body.get("messages") or []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            size += len(content.encode())
        elif isinstance(content, list):
            size += sum(len(str(p.get("text", "")).encode()) for p in content if isinstance(p, dict))
    reply = body.get("max_tokens") or body.get("max_completion_tokens") or 0
    return size // 4 + 4 * len(messages) + int(reply)


class Limits:
    """One set of limits (the server's, or one model's): the enforced buckets and the ones the headers show."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.mode = "none" if args.no_headers else args.headers
        self.requests = Bucket(args.rps, args.burst)
        self.tokens = Bucket(args.tps, args.token_burst)
        self.minute_requests = Bucket(args.rps, 60 * args.rps) if args.rps and self.mode == "per-minute" else None
        self.minute_tokens = Bucket(args.tps, 60 * args.tps) if args.tps and self.mode == "per-minute" else None

    def _buckets(self) -> list[tuple[Bucket, bool]]:
        """Every enforced bucket, and whether it counts tokens (else requests)."""
        return [(bucket, is_tokens) for bucket, is_tokens in (
            (self.requests, False), (self.tokens, True), (self.minute_requests, False), (self.minute_tokens, True))
            if bucket is not None]

    def wait_for(self, cost: float, now: float) -> float:
        """Seconds until one request of `cost` tokens may go (0: now)."""
        waits = [0.0]
        for bucket, is_tokens in self._buckets():
            bucket.refill(now)
            waits.append(bucket.wait_for(cost if is_tokens else 1))
        return max(waits)

    def take(self, cost: float) -> None:
        for bucket, is_tokens in self._buckets():
            bucket.take(cost if is_tokens else 1)

    def headers(self) -> dict[str, str]:
        if self.mode == "none":
            return {}
        out = {}
        for name, bucket, minute in (("requests", self.requests, self.minute_requests),
                                     ("tokens", self.tokens, self.minute_tokens)):
            if bucket.rate is None or bucket.capacity is None:
                continue
            shown, limit = (minute, minute.capacity) if minute is not None else (bucket, bucket.capacity)
            if self.mode == "minute-limit":
                limit = 60 * bucket.rate
            assert shown is not None and limit is not None
            out[f"x-ratelimit-limit-{name}"] = str(int(limit))
            out[f"x-ratelimit-remaining-{name}"] = str(max(0, int(shown.level)))
            out[f"x-ratelimit-reset-{name}"] = duration(shown.reset_s())
        return out


class Server:
    """The server's state: its limits (one set, or one per model), its counters, its latency."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.shared = Limits(args)
        self.by_model: dict[str, Limits] = {}
        self.latency = args.latency
        self.random = random.Random(args.seed)
        self.stats: dict[str, Any] = {"requests": 0, "answered": 0, "limited": 0, "max_in_flight": 0,
                                      "first_s": None, "last_s": None, "tokens": 0, "models": {},
                                      "arrived_s": [], "answered_s": [], "refused_s": []}
        self.in_flight = 0

    def limits(self, model: str) -> Limits | None:
        """The limits a request for `model` meets; None: not limited."""
        if self.args.limited_model and model not in self.args.limited_model:
            return None
        if not self.args.per_model and not self.args.limited_model:
            return self.shared
        found = self.by_model.get(model)
        if found is None:
            found = self.by_model[model] = Limits(self.args)
        return found

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        now = time.monotonic()
        model = str(body.get("model") or MODEL)
        counts = self.stats["models"].setdefault(model, {"requests": 0, "answered": 0, "limited": 0})
        self.stats["requests"] += 1
        counts["requests"] += 1
        if self.stats["first_s"] is None:
            self.stats["first_s"] = now
        if len(self.stats["arrived_s"]) < TIMELINE:
            self.stats["arrived_s"].append(round(now - self.stats["first_s"], 4))
        cost = prompt_tokens(body)
        limits = self.limits(model)
        headers: dict[str, str] = {}
        if limits is not None:
            wait = limits.wait_for(cost, now)
            if wait > 0:
                self.stats["limited"] += 1
                counts["limited"] += 1
                if len(self.stats["refused_s"]) < TIMELINE:
                    self.stats["refused_s"].append(round(now - self.stats["first_s"], 4))
                headers = limits.headers()
                if limits.mode != "none":
                    headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
                    headers["retry-after"] = str(max(1, math.ceil(wait)))
                return web.json_response({"error": {"message": "Rate limit reached, retry later",
                                                    "type": "requests", "code": "rate_limit_exceeded"}},
                                         status=429, headers=headers)
            limits.take(cost)
            headers = limits.headers()
        self.stats["tokens"] += cost
        self.in_flight += 1
        self.stats["max_in_flight"] = max(self.stats["max_in_flight"], self.in_flight)
        try:
            await asyncio.sleep(self.latency * self.random.uniform(0.7, 1.3))
            reply = await self._reply(request, body, headers)
        finally:
            self.in_flight -= 1
        self.stats["answered"] += 1
        counts["answered"] += 1
        self.stats["last_s"] = time.monotonic()
        if len(self.stats["answered_s"]) < TIMELINE:
            self.stats["answered_s"].append(round(self.stats["last_s"] - self.stats["first_s"], 4))
        return reply

    async def _reply(self, request: web.Request, body: dict[str, Any], headers: dict[str, str]
                     ) -> web.StreamResponse:
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        model = body.get("model") or MODEL
        if not body.get("stream"):
            return web.json_response({
                "id": "rl", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": usage}, headers=headers)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
        await resp.prepare(request)
        for event in ({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"},
                                    "finish_reason": None}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                      {"choices": [], "usage": usage}):
            chunk = {"id": "rl", "object": "chat.completion.chunk", "created": 0, "model": model, **event}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rps", type=float, default=None, help="requests a second (default: no limit)")
    parser.add_argument("--burst", type=float, default=None, help="request bucket size (default: one second's)")
    parser.add_argument("--tps", type=float, default=None, help="tokens a second (default: no limit)")
    parser.add_argument("--token-burst", type=float, default=None, help="token bucket size (default: one second's)")
    parser.add_argument("--latency", type=float, default=0.3, help="mean seconds to answer (jittered +-30%%)")
    parser.add_argument("--headers", choices=HEADER_MODES, default="bucket", help="what x-ratelimit-* say")
    parser.add_argument("--no-headers", action="store_true", help="send no x-ratelimit-* and no retry-after")
    parser.add_argument("--per-model", action="store_true", help="buckets per model (the body's `model`)")
    parser.add_argument("--limited-model", action="append", default=[], help="limit this model only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    server = Server(args)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/stats", server.get_stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=1024)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)  # type: ignore[union-attr]
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
