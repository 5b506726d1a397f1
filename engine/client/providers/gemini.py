"""`api: gemini`: Google's Gemini API (base_url `https://generativelanguage.googleapis.com/v1beta`).

Methods: `POST /models/{model}:generateContent`, `:streamGenerateContent?alt=sse` when streamed (each event a
whole `GenerateContentResponse` chunk, events separated by `\\r\\n\\r\\n` or `\\n\\n`), `:batchEmbedContents` for
`similar`. The key goes in `x-goog-api-key`.

Request: system messages become `systemInstruction`; turns become `contents` with roles user / model and parts
(text, `inlineData` images, `functionCall` for the assistant's calls, `functionResponse` for the tools' answers,
named after the call they answer); tools as `tools: [{functionDeclarations: [...]}]`, their parameters mapped
onto the API's schema subset (`gemini_schema`); `toolConfig.functionCallingConfig.mode` AUTO / ANY / NONE
(`allowedFunctionNames` for one named tool); `generationConfig` with maxOutputTokens, temperature, seed and the
model's `params` (top-level request fields among them, `safetySettings`, `cachedContent`, stay at the top).
An image by http(s) URL is sent as `fileData` (the API fetches what it can and refuses the rest with a 400).

Reply: the first candidate's parts (text; `thought: true` parts -> reasoning; functionCall -> tool calls),
`modelVersion` (the served model), `finishReason` (STOP -> stop, or tool_calls when it called a function;
MAX_TOKENS -> length; SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII... by their own name in lower
case), `promptFeedback.blockReason` (no candidate: `blocked_<reason>`), `usageMetadata`: promptTokenCount
(cached included, `cachedContentTokenCount` also `cached_tokens`), candidatesTokenCount + thoughtsTokenCount as
the completion (`thoughtsTokenCount` also `reasoning_tokens`). A functionCall part's `thoughtSignature` (thinking
models) is kept by call (`base.ECHO`) and sent back on that call's part, as the API asks.

Failures: 429 RESOURCE_EXHAUSTED waits for its `RetryInfo.retryDelay`, 503 UNAVAILABLE is waited out; an error
body is shown as its `STATUS: message`.
"""

from __future__ import annotations

import json
import mimetypes
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from engine.client import retry
from engine.client.providers.base import (
    ECHO,
    Embeddings,
    Provider,
    WireRequest,
    add_turn,
    call_arguments,
    data_url_parts,
    error_message,
    error_object,
    fold_events,
    reply_body,
    system_text,
)
from engine.client.providers.gemini_batch import BATCH
from engine.client.response import CallResult, count
from engine.client.retry import wrong_type
from engine.client.tool_calls import arguments_text, optional_str, tool_call
from engine.errors import ClientError
from engine.model.model_config import ModelConfig
from engine.redact import Redactor

__all__ = ["PROVIDER", "finish_reason", "gemini_schema", "retry_delay"]

_SAMPLING = ("max_tokens", "temperature", "seed", "stream")
_TOP_LEVEL = frozenset({"safetySettings", "cachedContent", "labels", "toolConfig", "tools"})
_CHOICES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}
# The schema keys the API's `Schema` object takes; every other JSON Schema key is dropped.
_SCHEMA_KEYS = frozenset({"type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems",
                          "properties", "required", "minProperties", "maxProperties", "minLength", "maxLength",
                          "pattern", "example", "anyOf", "propertyOrdering", "default", "items", "minimum",
                          "maximum"})
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _model_path(model: ModelConfig) -> str:
    name = model.model.removeprefix("models/")
    return "/models/" + quote(name, safe="-._~@")


def path(model: ModelConfig, stream: bool) -> str:
    """`/models/{model}:generateContent`, or `:streamGenerateContent?alt=sse` for a stream."""
    return _model_path(model) + (":streamGenerateContent?alt=sse" if stream else ":generateContent")


def headers(key: str | None) -> dict[str, str]:
    """JSON both ways, the key in `x-goog-api-key`."""
    out = {"Content-Type": "application/json", "Accept": "application/json"}
    if key:
        out["x-goog-api-key"] = key
    return out


def gemini_schema(schema: Any) -> Any:
    """A JSON Schema on the API's `Schema` subset.

    Kept: type, format, title, description, enum, properties, required, items, anyOf, min/max bounds, pattern,
    default. Mapped: `type: [X, "null"]` -> `type: X, nullable: true`; `const: v` -> `enum: [v]`; `oneOf` ->
    `anyOf`. Dropped: everything else (`additionalProperties`, `$ref`/`$defs`, `allOf`, `not`, `$schema`,
    exclusive bounds, ...): the model sees a looser schema, and evaluators still check the strict one.
    """
    if isinstance(schema, list):
        return [gemini_schema(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, list):
            kinds = [kind for kind in value if kind != "null"]
            if len(kinds) < len(value):
                out["nullable"] = True
            if kinds:
                out["type"] = kinds[0]
        elif key == "const":
            out["enum"] = [value]
        elif key == "oneOf":
            out["anyOf"] = gemini_schema(value)
        elif key == "properties" and isinstance(value, Mapping):
            out["properties"] = {name: gemini_schema(sub) for name, sub in value.items()}
        elif key in ("items", "anyOf"):
            out[key] = gemini_schema(value)
        elif key in _SCHEMA_KEYS:
            out[key] = value
    return out


def build(request: WireRequest) -> dict[str, Any]:
    """The generateContent body."""
    body: dict[str, Any] = {}
    system = [system_text(m.get("content")) for m in request.messages if m.get("role") in ("system", "developer")]
    if any(system):
        body["systemInstruction"] = {"parts": [{"text": "\n\n".join(part for part in system if part)}]}
    body["contents"] = _contents(request.messages) if request.messages else \
        [{"role": "user", "parts": [{"text": request.prompt}]}]
    if request.tools:
        declarations = []
        for tool in request.tools:
            fn = tool.get("function", tool)
            declaration: dict[str, Any] = {"name": fn.get("name")}
            if fn.get("description"):
                declaration["description"] = fn["description"]
            if fn.get("parameters"):
                declaration["parameters"] = gemini_schema(fn["parameters"])
            declarations.append(declaration)
        body["tools"] = [{"functionDeclarations": declarations}]
        choice = request.tool_choice or "auto"
        if isinstance(choice, Mapping):
            config = {"mode": "ANY", "allowedFunctionNames": [(choice.get("function") or {}).get("name")]}
        else:
            config = {"mode": _CHOICES.get(str(choice), "AUTO")}
        body["toolConfig"] = {"functionCallingConfig": config}
    generation: dict[str, Any] = {}
    for key, value in request.params.items():
        if key in _TOP_LEVEL:
            body[key] = value
        elif key not in _SAMPLING:
            generation[key] = value
    generation["maxOutputTokens"] = request.max_tokens
    if request.temperature is not None:
        generation["temperature"] = request.temperature
    if request.seed is not None:
        generation["seed"] = request.seed
    body["generationConfig"] = generation
    return body


def _contents(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Turns as `contents`, consecutive turns of one role merged; a tool answer named after its call."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        if role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            text = system_text(message.get("content"))
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                value = text
            response: dict[str, Any] = {"name": names.get(call_id, ""),
                                        "response": value if isinstance(value, dict) else {"result": value}}
            parts: list[dict[str, Any]] = [{"functionResponse": response}]
            role = "user"
        else:
            parts = _parts(message.get("content"))
            echo = message.get(ECHO)
            signatures = echo if isinstance(echo, list) else []
            for i, call in enumerate(message.get("tool_calls") or ()):
                fn = call.get("function") or {}
                names[str(call.get("id"))] = str(fn.get("name"))
                part: dict[str, Any] = {"functionCall": {"name": fn.get("name"),
                                                         "args": call_arguments(str(fn.get("arguments") or ""))}}
                if i < len(signatures) and isinstance(signatures[i], str):
                    part["thoughtSignature"] = signatures[i]
                parts.append(part)
            role = "model" if role == "assistant" else "user"
        add_turn(out, role, "parts", parts)
    return out


def _parts(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"text": content}]
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "text":
            parts.append({"text": part.get("text", "")})
        elif part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            inline = data_url_parts(url)
            if inline is None:   # a URL: the API fetches what it can, and answers 400 for what it cannot
                mime = mimetypes.guess_type(url.partition("?")[0])[0] or "image/jpeg"
                parts.append({"fileData": {"mimeType": mime, "fileUri": url}})
            else:
                parts.append({"inlineData": {"mimeType": inline[0], "data": inline[1]}})
    return parts


def finish_reason(reason: str, called: bool) -> str:
    """A `finishReason` on the engine's scale: `stop` (or `tool_calls` when the reply called a function),
    `length`, or its own name in lower case (`safety`, `recitation`, `blocklist`, `prohibited_content`...)."""
    if reason == "STOP":
        return "tool_calls" if called else "stop"
    if reason == "MAX_TOKENS":
        return "length"
    return reason.lower()


class _Reply:
    """What the chunks of one reply said so far."""

    __slots__ = ("calls", "done", "reason", "result", "signatures", "text", "thoughts")

    def __init__(self, result: CallResult) -> None:
        self.result = result
        self.text: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[Any] = []
        self.signatures: list[str | None] = []   # by call: its part's thoughtSignature, sent back with it
        self.reason: str | None = None
        self.done = False

    def chunk(self, data: Any, redact: Redactor) -> bool:
        """Fold in one `GenerateContentResponse`; True when it carried visible text or a call."""
        if type(data) is list and len(data) == 1:   # an error sent as a JSON array
            data = data[0]
        if type(data) is not dict:
            raise retry.bad_response(f"a reply is {retry.type_name(data)}, expected an object")
        if "error" in data and "candidates" not in data:
            text = error_message(json.dumps(data))
            raise retry.stream_error(f"the server answered with an error: "
                                     f"{redact.excerpt(text, retry.SERVER_TEXT_CHARS)}")
        result = self.result
        version = optional_str(data, "modelVersion", "")
        if version:
            result.served_model = version
        if data.get("usageMetadata") is not None:
            _usage(data["usageMetadata"], result)
        feedback = data.get("promptFeedback")
        if type(feedback) is dict and feedback.get("blockReason"):
            self.reason = "blocked_" + str(optional_str(feedback, "blockReason", "promptFeedback")).lower()
        candidates = data.get("candidates")
        if candidates is None:
            return False
        if type(candidates) is not list:
            raise wrong_type("candidates", candidates, "a list")
        if not candidates:
            return False
        candidate = candidates[0]
        if type(candidate) is not dict:
            raise wrong_type("candidates[0]", candidate, "an object")
        visible = False
        content = candidate.get("content")
        if content is not None:
            if type(content) is not dict:
                raise wrong_type("candidates[0].content", content, "an object")
            parts = content.get("parts") or []
            if type(parts) is not list:
                raise wrong_type("candidates[0].content.parts", parts, "a list")
            for where, part in retry.objects(parts, "candidates[0].content.parts"):
                if "functionCall" in part:
                    call = part["functionCall"]
                    if type(call) is not dict:
                        raise wrong_type(where + ".functionCall", call, "an object")
                    args = call.get("args")
                    if args is not None and type(args) is not dict:
                        raise wrong_type(where + ".functionCall.args", args, "an object")
                    self.calls.append(tool_call(optional_str(call, "name", where + ".functionCall") or "",
                                                arguments_text(args if args is not None else {}, where),
                                                optional_str(call, "id", where + ".functionCall")))
                    self.signatures.append(optional_str(part, "thoughtSignature", where))
                    visible = True
                    continue
                piece = optional_str(part, "text", where)
                if piece:
                    if part.get("thought") is True:
                        self.thoughts.append(piece)
                    else:
                        self.text.append(piece)
                        visible = visible or not piece.isspace()
        reason = optional_str(candidate, "finishReason", "candidates[0]")
        if reason:
            self.reason = reason
        return visible

    def keep(self) -> None:
        result = self.result
        result.text = "".join(self.text)
        result.reasoning = "".join(self.thoughts) or None
        result.tool_calls = tuple(self.calls)
        result.echo = self.signatures if any(self.signatures) else None
        if self.reason is not None:
            result.finish_reason = (self.reason if self.reason.startswith("blocked_")
                                    else finish_reason(self.reason, bool(self.calls)))


def _usage(usage: Any, result: CallResult) -> None:
    if type(usage) is not dict:
        raise wrong_type("usageMetadata", usage, "an object")
    where = "usageMetadata"
    result.prompt_tokens = count(usage, "promptTokenCount", where, result)
    candidates = count(usage, "candidatesTokenCount", where, result)
    thoughts = count(usage, "thoughtsTokenCount", where, result)
    cached = count(usage, "cachedContentTokenCount", where, result)
    result.cached_tokens = cached
    result.reasoning_tokens = thoughts
    if candidates is not None or thoughts is not None:
        result.completion_tokens = (candidates or 0) + (thoughts or 0)


def parse(raw: bytes, result: CallResult, redact: Redactor) -> None:
    """Read a whole generateContent reply."""
    data = reply_body(raw, redact)
    reply = _Reply(result)
    reply.chunk(data, redact)
    reply.keep()
    if result.finish_reason is None:
        raise retry.bad_response("the reply has no candidate with a finishReason and no promptFeedback.blockReason")


class GeminiStream:
    """Reads a streamGenerateContent stream: whole response chunks, the last with the finish reason and usage."""

    __slots__ = ("_redact", "_reply", "done")

    def __init__(self, result: CallResult, redact: Redactor) -> None:
        self._reply = _Reply(result)
        self._redact = redact
        self.done = False   # the API marks no end: the stream closes after the chunk with the finish reason

    def feed(self, datas: list[str]) -> bool:
        """Fold in the chunks one read completed."""
        return fold_events(self, datas, self._redact, self._chunk)

    def _chunk(self, data: Any) -> bool:
        return self._reply.chunk(data, self._redact)

    def keep(self) -> None:
        """The text, thoughts and calls so far."""
        self._reply.keep()

    def end(self) -> None:
        """Raise when the stream closed before a chunk with a finish reason."""
        self._reply.keep()
        if self._reply.reason is None:
            self._reply.result.truncated = True
            raise retry.stream_error("the stream ended without a finishReason: the answer may be cut short")


def retry_delay(body: str) -> float | None:
    """The `retryDelay` of a `google.rpc.RetryInfo` detail in an error body ("37s" -> 37.0), or None."""
    error = error_object(body)
    details = error.get("details") if error is not None else None
    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, dict) and detail.get("@type") == _RETRY_INFO:
            match = _DURATION.match(str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None


def classify(status: int, headers: Mapping[str, str], body: str) -> tuple[ClientError, float | None]:
    """A non-2xx reply: its `STATUS: message` shown; a 429's RetryInfo delay; 503 UNAVAILABLE waited out."""
    return retry.status_error(status, headers, error_message(body)), retry_delay(body)


def _embed_body(model: ModelConfig, texts: Sequence[str]) -> dict[str, Any]:
    name = "models/" + model.model.removeprefix("models/")
    return {"requests": [{"model": name, "content": {"parts": [{"text": text}]}} for text in texts]}


def _embed_read(data: Any) -> tuple[list[Any], Any]:
    if type(data) is not dict or type(data.get("embeddings")) is not list:
        raise retry.bad_response("the batchEmbedContents reply has no `embeddings` list")
    return [item.get("values") if type(item) is dict else None for item in data["embeddings"]], None


PROVIDER = Provider(name="gemini", chat=True, path=path, headers=headers, build=build, parse=parse,
                    stream=GeminiStream, classify=classify,
                    embeddings=Embeddings(path=lambda model: _model_path(model) + ":batchEmbedContents",
                                          body=_embed_body, read=_embed_read), batch=BATCH)
