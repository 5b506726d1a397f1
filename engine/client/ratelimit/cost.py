"""What a request costs against a token limit, estimated from its wire body before it is sent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.base.jsontext import dumps_compact

__all__ = ["IMAGE_TOKENS", "request_tokens"]

IMAGE_TOKENS = 1000         # an image part's cost estimate (providers charge a few hundred to ~1,500)


def _text_bytes(content: Any) -> int:
    """UTF-8 bytes of what a message says: text, text parts, a tool call or result as sent; an image at a fixed
    estimate. Every API's shapes: OpenAI's `content` parts, Anthropic's blocks, Gemini's `parts`."""
    if isinstance(content, str):
        return len(content.encode("utf-8", "replace"))
    if isinstance(content, list):
        return sum(_text_bytes(part) for part in content)
    if not isinstance(content, Mapping):
        return 0
    if isinstance(content.get("text"), str):
        return len(content["text"].encode("utf-8", "replace"))
    if content.get("type") in ("image", "image_url") or "inlineData" in content or "fileData" in content:
        return 4 * IMAGE_TOKENS
    try:   # a tool call or a tool's result: its JSON text, as the provider counts it
        return len(dumps_compact(content))
    except TypeError:
        return 0


def request_tokens(body: Mapping[str, Any]) -> int:
    """The tokens a request costs against a token limit: its reply's room and its prompt at 4 bytes a token.

    Reads every API's wire body: `messages` (OpenAI, Anthropic; with Anthropic's `system`), `contents` and
    `systemInstruction` (Gemini), `prompt` / `input`; the reply's room is `max_tokens` or Gemini's
    `generationConfig.maxOutputTokens`.
    """
    size = 0
    for key in ("messages", "contents"):
        turns = body.get(key)
        if isinstance(turns, list):
            for turn in turns:
                if isinstance(turn, Mapping):   # a turn's framing: a few tokens
                    size += 16 + _text_bytes(turn.get("content", turn.get("parts")))
                    size += _text_bytes(turn.get("tool_calls"))
    size += _text_bytes(body.get("system"))
    instruction = body.get("systemInstruction")
    if isinstance(instruction, Mapping):
        size += _text_bytes(instruction.get("parts"))
    for key in ("prompt", "input"):
        value = body.get(key)
        if isinstance(value, str):
            size += len(value.encode("utf-8", "replace"))
        elif isinstance(value, list):
            size += sum(len(v.encode("utf-8", "replace")) for v in value if isinstance(v, str))
    tools = body.get("tools")
    if isinstance(tools, list):
        size += 64 * len(tools)   # a rough floor: definitions are sent as text
    reply = body.get("max_tokens")
    config = body.get("generationConfig")
    if reply is None and isinstance(config, Mapping):
        reply = config.get("maxOutputTokens")
    return size // 4 + (reply if isinstance(reply, int) and not isinstance(reply, bool) and reply > 0 else 0)
