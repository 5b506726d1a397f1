"""`api: completions`: OpenAI's legacy text completions (`POST {base_url}/completions`): a prompt, no messages.

Everything but the body's `prompt` and the `choices[0].text` of the reply is `api: chat`'s.
"""

from __future__ import annotations

from typing import Any

from engine.client.providers.base import Provider, WireRequest
from engine.client.providers.openai_batch import COMPLETIONS_BATCH
from engine.client.providers.openai_chat import EMBEDDINGS, OpenAIStream, bearer_headers, classify, with_sampling
from engine.client.response import CallResult, parse_whole
from engine.redact import Redactor

__all__ = ["PROVIDER"]


def build(request: WireRequest) -> dict[str, Any]:
    """The completions body."""
    return with_sampling({"model": request.model, "prompt": request.prompt}, request)


def _stream(result: CallResult, redact: Redactor) -> OpenAIStream:
    return OpenAIStream(result, redact, completions=True)


PROVIDER = Provider(name="completions", chat=False, path=lambda model, stream: "/completions",
                    headers=bearer_headers, build=build, parse=parse_whole, stream=_stream, classify=classify,
                    embeddings=EMBEDDINGS, batch=COMPLETIONS_BATCH)
