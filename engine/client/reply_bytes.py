"""A reply's bytes read off the connection under the model's size cap: whole, or as server-sent events.

`engine.client.openai` calls these once the status says the reply is an answer; what the bytes mean is
decided in `engine.client.response` (the one place that knows the reply's shape). Both raise the
`engine.client.retry` errors the call's retry policy classifies: too large, cut short, malformed.
"""

from __future__ import annotations

import time

from engine.client import retry
from engine.client.http1 import Response
from engine.client.response import CallResult, ToolCallAccumulator, apply_event, decode_events
from engine.client.sse import SSEDecoder
from engine.redact import Redactor

__all__ = ["read_body", "read_stream"]


async def read_body(resp: Response, limit: int) -> bytes:
    """A whole response body, refused as soon as it passes `limit` bytes (before any, by its Content-Length)."""
    length = resp.content_length
    if length is not None and length > limit:
        raise retry.too_large(limit)
    parts = []
    size = 0
    while chunk := await resp.next_chunk():
        size += len(chunk)
        if size > limit:
            raise retry.too_large(limit)
        parts.append(chunk)
    return b"".join(parts)


async def read_stream(resp: Response, result: CallResult, started: float, completions: bool,
                       redact: Redactor, limit: int) -> None:
    """Read an SSE response into `result`; raise when it is malformed, cut short or over `limit` bytes."""
    decoder = SSEDecoder()
    text: list[str] = []
    reasoning: list[str] = []
    calls = ToolCallAccumulator()
    done = False
    visible = False
    size = 0
    perf = time.perf_counter
    try:
        while chunk := await resp.next_chunk():
            if result.ttft_provider_s is None:
                result.ttft_provider_s = perf() - started
            size += len(chunk)
            if size > limit:
                result.truncated = True
                raise retry.too_large(limit)
            datas = decoder.feed(chunk)
            if not datas:
                continue
            if "[DONE]" in datas:
                datas = datas[:datas.index("[DONE]")]
                done = True
            for event in decode_events(datas, redact):
                if apply_event(event, result, text, reasoning, calls, completions, redact) and not visible:
                    visible = True
                    result.ttft_visible_s = perf() - started
            if done:
                break
        else:
            datas = decoder.close()
            if "[DONE]" in datas:
                datas = datas[:datas.index("[DONE]")]
                done = True
            for event in decode_events(datas, redact):
                apply_event(event, result, text, reasoning, calls, completions, redact)
    finally:
        # Kept on every way out: a stream cut short keeps the partial answer (marked truncated).
        result.text = "".join(text)
        result.reasoning = "".join(reasoning) if reasoning else None
    result.tool_calls = calls.finish()
    if not done:
        result.truncated = True
        raise retry.stream_error("the stream ended without [DONE]: the answer may be cut short")
    if result.finish_reason is None:
        result.truncated = True
        raise retry.stream_error("the stream ended without a finish reason")
