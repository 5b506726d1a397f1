"""Request building and response parsing for OpenAI-compatible endpoints, nothing else.

One `OpenAIClient` wraps one aiohttp session (one bounded connector) for the whole run. `call`
sends a prepared body, retries as `engine.client.retry` decides, and always returns a `CallResult`:
a failed call is a result with `error` set, never an exception, so the runner can write its row.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.base.jsontext import dumps_ascii
from engine.client import retry
from engine.client.deadline import Deadlines, TaskDeadline
from engine.client.sse import SSEDecoder
from engine.errors import ClientError
from engine.model import ModelConfig, Test, ToolCall

if TYPE_CHECKING:
    import aiohttp

DEFAULT_MAX_TOKENS = 1024
DEFAULT_TEMPERATURE = 0.0
_ERROR_BODY_CHARS = 2000


@dataclass(slots=True)
class CallResult:
    """Everything one call produced, success or not.

    Times are seconds measured from the start of the last try (retries and their waits are counted
    in `retries` and `rate_limit_wait_s`, not in `latency_s`). Token counts are None when the server
    sent none - never 0.
    """

    text: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    served_model: str | None = None
    system_fingerprint: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    latency_s: float | None = None
    ttft_provider_s: float | None = None
    ttft_visible_s: float | None = None
    retries: int = 0
    rate_limit_wait_s: float = 0.0
    truncated: bool = False
    error: ClientError | None = None


@dataclass(frozen=True)
class RequestSettings:
    """Run-wide request settings from the command line (None = not given).

    Args:
        temperature: `--temperature`: used when the test sets none.
        max_tokens: `--max-tokens`: the default floor; a test's larger value wins.
        seed: `--seed`: sent as `seed` (overrides a seed in the model's params).
        stream: False for `--no-stream`.
    """

    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stream: bool = True


@dataclass(frozen=True)
class PreparedRequest:
    """A request ready to send, and the resolved settings the results row records."""

    url: str
    body: dict[str, Any]
    stream: bool
    temperature: float | None
    max_tokens: int
    seed: int | None
    extra: dict[str, Any] = field(default_factory=dict)


def endpoint_url(model: ModelConfig) -> str:
    """The full URL of the model's endpoint (`.../v1/chat/completions` or `.../v1/completions`)."""
    base = (model.base_url or "").rstrip("/")
    return base + ("/completions" if model.api == "completions" else "/chat/completions")


def prepare(model: ModelConfig, test: Test, settings: RequestSettings) -> PreparedRequest:
    """Build the request body for one test.

    Precedence: temperature = the test's, else `--temperature`, else the model's params, else 0;
    max_tokens = max(floor, the test's), where the floor is `--max-tokens`, else the model's
    `params.max_tokens`, else 1024 (a test's value only raises the floor);
    seed = `--seed`, else the model's params.

    Args:
        model: The model config (its `params` are passed through).
        test: The rendered test.
        settings: The run-wide settings.
    """
    params = model.params   # read, never changed: no copy
    temperature = test.temperature
    if temperature is None:
        temperature = settings.temperature
    if temperature is None:
        temperature = params.get("temperature", DEFAULT_TEMPERATURE)
    floor = settings.max_tokens if settings.max_tokens is not None else params.get("max_tokens", DEFAULT_MAX_TOKENS)
    max_tokens = max(floor, test.max_tokens or 0)
    seed = settings.seed if settings.seed is not None else params.get("seed")
    stream = settings.stream and model.stream
    body: dict[str, Any] = {"model": model.model}
    if model.api == "completions":
        body["prompt"] = test.prompt
    else:
        body["messages"] = list(test.messages)
        if test.tools:
            body["tools"] = list(test.tools)
            body["tool_choice"] = "auto"
    body.update(params)
    body["max_tokens"] = max_tokens
    if temperature is not None:
        body["temperature"] = temperature
    if seed is not None:
        body["seed"] = seed
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    return PreparedRequest(endpoint_url(model), body, stream, temperature, max_tokens, seed)


class _Failed(Exception):
    """One failed try: the classified error and the headers its retry delay comes from."""

    def __init__(self, error: ClientError, headers: Mapping[str, str] | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.headers = headers


class OpenAIClient:
    """Calls OpenAI-compatible endpoints over one shared aiohttp session.

    Args:
        session: The run's session (its connector bounds the open connections).
        api_keys: model name -> API key, read from the env by the caller. Keys are put in the
            Authorization header and nowhere else (never in results, errors or logs).
    """

    def __init__(self, session: aiohttp.ClientSession, api_keys: Mapping[str, str | None]) -> None:
        self._session = session
        self._deadlines = Deadlines()
        self._secrets = [key for key in api_keys.values() if key]
        self.retrying = 0   # calls waiting out a retry delay now (the progress display shows it)
        self._headers: dict[str, dict[str, str]] = {}
        for name, key in api_keys.items():
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            if key:
                headers["Authorization"] = f"Bearer {key}"
            self._headers[name] = headers

    def task_deadline(self) -> TaskDeadline:
        """The deadline keeper of the running task, for a task that makes many calls to pass to `call`."""
        return self._deadlines.current()

    async def call(self, model: ModelConfig, request: PreparedRequest,
                   deadline: TaskDeadline | None = None) -> CallResult:
        """Send one request, retrying as `retry.py` decides; each try is bounded by `timeout_s`.

        Args:
            model: The model config (timeout_s, max_retries, name for the key).
            request: The prepared request.
            deadline: `task_deadline()` of the calling task, when it has it at hand (saves looking
                the task up on every call); found here otherwise.

        Returns:
            The result; `error` is set when the call failed for good.
        """
        payload = dumps_ascii(request.body).encode()   # what json.dumps(body) writes
        headers = self._headers.get(model.name) or {"Content-Type": "application/json"}
        result = CallResult()
        retries = 0
        waited = 0.0
        timeout_s = model.timeout_s
        if timeout_s is None:
            deadline = None
        elif deadline is None:
            deadline = self._deadlines.current()
        while True:
            # `timeout_s` bounds each try, as openai-python's timeout does; a try that runs out is
            # retried like a connection error, so a call takes at most (max_retries + 1) tries.
            failed: _Failed | None = None
            try:
                if deadline is not None:
                    deadline.begin(timeout_s)
                try:
                    await self._once(request, payload, headers, result)
                finally:
                    if deadline is not None:
                        deadline.end()
            except _Failed as caught:
                failed = caught
            except TimeoutError:
                failed = _Failed(retry.timeout_error(timeout_s), None)
            except asyncio.CancelledError:
                if deadline is None or not deadline.cancelled_by_deadline():
                    raise
                failed = _Failed(retry.timeout_error(timeout_s), None)
            if failed is None:
                break
            if not failed.error.retryable or retries >= model.max_retries:
                result.error = failed.error
                if failed.error.kind == "timeout":
                    result.truncated = True
                break
            delay = retry.retry_delay(failed.headers, retries)
            if failed.error.status == 429:
                waited += delay
            retries += 1
            self.retrying += 1
            try:
                await asyncio.sleep(delay)
            finally:
                self.retrying -= 1
            result = CallResult()   # each try starts afresh
        result.retries = retries
        result.rate_limit_wait_s = waited
        if result.error is not None and self._secrets:
            result.error = self._redacted(result.error)
        return result

    def _redacted(self, error: ClientError) -> ClientError:
        """The error with any API key the server echoed back (some gateways do) masked."""
        message = str(error)
        clean = message
        for key in self._secrets:
            clean = clean.replace(key, "***")
        if clean == message:
            return error
        return type(error)(clean, kind=error.kind, retryable=error.retryable, status=error.status)

    async def _once(self, request: PreparedRequest, payload: bytes, headers: dict[str, str],
                    result: CallResult) -> None:
        import aiohttp

        started = time.perf_counter()
        try:
            async with self._session.post(request.url, data=payload, headers=headers) as resp:
                if resp.status >= 300:
                    body = (await resp.content.read(_ERROR_BODY_CHARS)).decode("utf-8", "replace")
                    raise _Failed(retry.status_error(resp.status, resp.headers, body), resp.headers)
                if request.stream:
                    await _read_stream(resp, result, started, completions="prompt" in request.body)
                else:
                    raw = await resp.read()
                    result.ttft_provider_s = time.perf_counter() - started
                    _parse_whole(raw, result)
        except aiohttp.ClientError as exc:
            during = "reading the response" if result.ttft_provider_s is not None else "connecting"
            raise _Failed(retry.transport_error(exc, during=during), None) from None
        except ClientError as exc:  # a stream error found while parsing
            raise _Failed(exc, None) from None
        finally:
            result.latency_s = time.perf_counter() - started
        _split_think(result)
        if result.finish_reason == "length":
            result.truncated = True


async def _read_stream(resp: aiohttp.ClientResponse, result: CallResult, started: float,
                       completions: bool) -> None:
    """Read an SSE response into `result`; raise a stream error when it is malformed or cut short."""
    decoder = SSEDecoder()
    text: list[str] = []
    reasoning: list[str] = []
    calls = _ToolCallAccumulator()
    done = False
    visible = False
    perf = time.perf_counter
    async for chunk in resp.content.iter_any():
        if result.ttft_provider_s is None:
            result.ttft_provider_s = perf() - started
        datas = decoder.feed(chunk)
        if not datas:
            continue
        if "[DONE]" in datas:
            datas = datas[:datas.index("[DONE]")]
            done = True
        for event in _decode_events(datas):
            if _apply_event(event, result, text, reasoning, calls, completions) and not visible:
                visible = True
                result.ttft_visible_s = perf() - started
        if done:
            break
    else:
        datas = decoder.close()
        if "[DONE]" in datas:
            datas = datas[:datas.index("[DONE]")]
            done = True
        for event in _decode_events(datas):
            _apply_event(event, result, text, reasoning, calls, completions)
    result.text = "".join(text)
    result.reasoning = "".join(reasoning) if reasoning else None
    result.tool_calls = calls.finish()
    if not done:
        result.truncated = True
        raise retry.stream_error("the stream ended without [DONE]: the answer may be cut short")
    if result.finish_reason is None:
        result.truncated = True
        raise retry.stream_error("the stream ended without a finish reason")


def _decode_events(datas: list[str]) -> list[dict[str, Any]]:
    """Decode the JSON payloads of several events at once.

    One `json.loads` of `[a,b,c]` costs far less than three calls (the per-call overhead dominates for
    small chunks); when the batch does not decode into exactly one object per event, each payload
    is decoded alone so the bad one is named.
    """
    if not datas:
        return []
    if len(datas) > 1:
        try:
            events = json.loads("[" + ",".join(datas) + "]")
        except ValueError:
            events = None
        if isinstance(events, list) and len(events) == len(datas) and all(type(e) is dict for e in events):
            return events
    out = []
    for data in datas:
        try:
            event = json.loads(data)
        except ValueError:
            raise retry.stream_error(f"malformed server-sent event: not JSON: {data[:80]!r}") from None
        if not isinstance(event, dict):
            raise retry.stream_error(f"malformed server-sent event: expected an object, got {data[:80]!r}")
        out.append(event)
    return out


def _apply_event(event: dict[str, Any], result: CallResult, text: list[str], reasoning: list[str],
                 calls: _ToolCallAccumulator, completions: bool) -> bool:
    """Fold one streamed chunk into the result; True when it carried visible content."""
    choices = event.get("choices")
    if choices is None and "error" in event:
        err = event.get("error")
        message = err.get("message") if isinstance(err, dict) else err
        raise retry.stream_error(f"the server sent an error inside the stream: {str(message)[:300]}")
    if result.served_model is None and event.get("model"):
        result.served_model = str(event["model"])
    fingerprint = event.get("system_fingerprint")
    if fingerprint:
        result.system_fingerprint = str(fingerprint)
    usage = event.get("usage")
    if usage:
        _apply_usage(usage, result)
    visible = False
    for choice in choices or ():
        if choice.get("index", 0) != 0:
            continue
        if completions:
            piece = choice.get("text")
            if piece:
                text.append(piece)
                visible = not piece.isspace()
        else:
            delta = choice.get("delta")
            if delta:
                piece = delta.get("content")
                if piece:
                    text.append(piece)
                    visible = not piece.isspace()
                if len(delta) > 1 or "content" not in delta:  # more than plain text: rarer fields
                    thought = delta.get("reasoning_content") or delta.get("reasoning")
                    if thought:
                        reasoning.append(thought)
                    tool_deltas = delta.get("tool_calls")
                    if tool_deltas:
                        calls.add(tool_deltas)
                        visible = True
        reason = choice.get("finish_reason")
        if reason:
            result.finish_reason = str(reason)
    return visible


def _apply_usage(usage: Mapping[str, Any], result: CallResult) -> None:
    result.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
    result.completion_tokens = _int_or_none(usage.get("completion_tokens"))
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    result.cached_tokens = _int_or_none(prompt_details.get("cached_tokens"))
    result.reasoning_tokens = _int_or_none(completion_details.get("reasoning_tokens"))


def _int_or_none(value: Any) -> int | None:
    if type(value) is int:   # the usual case, first
        return value
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _parse_whole(raw: bytes, result: CallResult) -> None:
    """Parse a non-streaming response body."""
    try:
        data = json.loads(raw)
    except ValueError:
        raise retry.stream_error(f"the response body is not JSON: {raw[:80]!r}") from None
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
        raise retry.stream_error(f"the response has no choices: {raw[:120]!r}")
    result.served_model = str(data["model"]) if data.get("model") else None
    result.system_fingerprint = data.get("system_fingerprint") or None
    if data.get("usage"):
        _apply_usage(data["usage"], result)
    choice = data["choices"][0]
    result.finish_reason = choice.get("finish_reason")
    if "text" in choice and "message" not in choice:
        result.text = choice.get("text") or ""
        return
    message = choice.get("message") or {}
    result.text = message.get("content") or ""
    result.reasoning = message.get("reasoning_content") or message.get("reasoning") or None
    calls = []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        arguments = fn.get("arguments")
        raw_args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        calls.append(ToolCall.from_raw(str(fn.get("name") or ""), raw_args, id=call.get("id")))
    result.tool_calls = tuple(calls)


_THINK_END = re.compile(r"</think>", re.IGNORECASE)


def _split_think(result: CallResult) -> None:
    """Move a leading `<think>...</think>` block (any case) from the answer to the reasoning.

    The one place reasoning is split off: evaluators score `text` as it is. A block the model never
    closed (cut by max_tokens) is all reasoning.
    """
    first = result.text[:1]
    if first != "<" and not first.isspace():   # the usual answer: no copy of it made to find out
        return
    stripped = result.text.lstrip()
    if stripped[:7].lower() != "<think>":
        return
    end = _THINK_END.search(stripped, 7)
    inner, sep, rest = (stripped[7:], "", "") if end is None else (stripped[7:end.start()], "</think>",
                                                                  stripped[end.end():])
    thought = inner.strip()
    result.reasoning = (result.reasoning + "\n" + thought) if result.reasoning else thought
    result.text = rest.lstrip() if sep else ""


class _ToolCallAccumulator:
    """Joins streamed tool-call deltas: by `index`, falling back to `id` when indices collide or lack."""

    __slots__ = ("_by_id", "_by_index", "_calls")

    def __init__(self) -> None:
        self._calls: list[list[Any]] = []   # [id, name, [argument pieces]]
        self._by_index: dict[int, list[Any]] = {}
        self._by_id: dict[str, list[Any]] = {}

    def add(self, deltas: list[dict[str, Any]]) -> None:
        for delta in deltas:
            index = delta.get("index")
            call_id = delta.get("id") or None
            entry = None
            if call_id is not None and call_id in self._by_id:
                entry = self._by_id[call_id]
            elif index is not None and index in self._by_index:
                known = self._by_index[index]
                if call_id is None or known[0] in (None, call_id):
                    entry = known   # same index, and no different id: a continuation
            elif index is None and call_id is None and self._calls:
                entry = self._calls[-1]
            if entry is None:
                entry = [call_id, "", []]
                self._calls.append(entry)
                if index is not None:
                    self._by_index[index] = entry
            if call_id is not None:
                entry[0] = entry[0] or call_id
                self._by_id[call_id] = entry
            fn = delta.get("function") or {}
            name = fn.get("name")
            if name and name != entry[1]:
                entry[1] = entry[1] + name if entry[1] else name
            arguments = fn.get("arguments")
            if arguments:
                entry[2].append(arguments if isinstance(arguments, str) else json.dumps(arguments))

    def finish(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall.from_raw(name, "".join(pieces), id=call_id) for call_id, name, pieces in self._calls)
