"""The APIs the client speaks: one module each, the whole catalogue in one visible dict.

    PROVIDERS["anthropic"].build(request)        -> the wire body
    PROVIDERS["anthropic"].parse(raw, result)    a whole reply -> the CallResult
    PROVIDERS["anthropic"].stream(result)        a streamed reply, event by event -> the CallResult
    PROVIDERS["anthropic"].classify(status, ...) a failed reply -> its error and retry delay

A new provider is one entry here, its module and its tests, nothing else:

1. Write `engine/client/providers/<api>.py` ending in `PROVIDER = Provider(...)` (`base.Provider` says what each
   field does): `build` turns the engine's request (OpenAI chat messages and tools, `base.WireRequest`) into the
   API's body; `parse` and `stream` read its replies along the documented paths only, a value of the wrong type
   there a `retry.bad_response` naming the place; finish reasons go onto the engine's scale (`stop`, `length`
   for a reply cut by its token limit, `tool_calls`), other stops keep their own name; prompt tokens count
   cached ones (`cached_tokens`, `cache_write_tokens` say how many), completion tokens count reasoning ones.
2. Add it to `PROVIDERS` below, and its name to the `api` enum of engine/suite/models_schema.py (then
   `python -m engine.suite.schema_source`).
3. Test it against a loopback server that speaks its wire format as documented (tests/fake_anthropic.py is one),
   and run the providers' end-to-end suite on it (tests/run/test_providers_run.py).
4. When the API has a batch method, give it a `batch` entry: `<api>_batch.py` ending in a `Batch(...)`
   (`batch.py` says what it gives, `batch_wire.py` holds the shared reading), tested against a loopback batch
   server mounted on its live fake (tests/fake_batches.py) in tests/client/test_batch_wire.py.

Sending, retries, rate-limit pacing, size caps, key masking and "a reply that started is paid once" are the
client's (`engine.client.client`, its tries sent by `engine.client.transport`), the same for every provider.
"""

from __future__ import annotations

from engine.client.providers import anthropic, gemini, openai_chat, openai_completions
from engine.client.providers.base import Provider, WireRequest, method_url

__all__ = ["PROVIDERS", "Provider", "WireRequest", "method_url", "provider"]

PROVIDERS: dict[str, Provider] = {
    "chat": openai_chat.PROVIDER,
    "completions": openai_completions.PROVIDER,
    "anthropic": anthropic.PROVIDER,
    "gemini": gemini.PROVIDER,
}


def provider(api: str) -> Provider:
    """The provider of an `api:` value (the models file's schema admits only the registry's names)."""
    return PROVIDERS[api]
