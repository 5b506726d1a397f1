"""`python -m engine.local.launcher ARGS...`: llama-cpp-python's server, made safe on CPUs that lie about AMX.

llama.cpp built with `GGML_NATIVE` (what `pip install llama-cpp-python` does) turns on its AMX matrix
kernels when the CPU reports AMX. Some virtual machines (Firecracker, measured on this project's CI)
report AMX and grant the permission, yet fault on the first tile instruction: every request then
kills the server with SIGSEGV. The AMX kernels are reached only through llama.cpp's "extra buffer
types" (weight repacking), so this launcher turns those off before the model loads, then runs the
stock server unchanged. The cost is the repacked-weight speed-up, small for a 270M model.

Set `LLM_EVAL_LLAMA_EXTRA_BUFTS=1` to keep llama.cpp's default (faster on machines where AMX works).

Three more additions, none changing a stock behaviour the engine relies on:
- the chat format `engine-chatml-tools` (engine.local.tool_format), with which a small ChatML model calls
  tools under a grammar;
- a model served with `--embedding True` pools by the mean unless the caller chose a pooling: for a GGUF
  that names none (SmolLM2's), llama.cpp would return one vector per *token*, which `/v1/embeddings`
  cannot carry as one vector per text (the server has no pooling option);
- usage for every reply, streamed or not, and a streamed reply's failure said in the stream (`_metered`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any


def _disable_extra_buffer_types() -> None:
    """Patch llama-cpp-python's default model params so `use_extra_bufts` is False."""
    import llama_cpp.llama_cpp as c_api

    original = c_api.llama_model_default_params
    if not any(name == "use_extra_bufts" for name, _ in getattr(original.restype, "_fields_", ())):
        return  # an older llama.cpp without the switch: nothing to turn off

    def default_params_without_extra_bufts():  # type: ignore[no-untyped-def]
        params = original()
        params.use_extra_bufts = False
        return params

    c_api.llama_model_default_params = default_params_without_extra_bufts


def _mean_pooling_for_embeddings() -> None:
    """Make `Llama(embedding=True)` pool by the mean when neither the caller nor the GGUF chose a pooling."""
    import llama_cpp

    original = llama_cpp.Llama.__init__

    def init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if kwargs.get("embedding") and kwargs.get("pooling_type", llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED) \
                == llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED:
            kwargs["pooling_type"] = llama_cpp.LLAMA_POOLING_TYPE_MEAN
        original(self, *args, **kwargs)

    llama_cpp.Llama.__init__ = init  # type: ignore[method-assign]


class _Meter:
    """The tokens one request read and wrote, counted as llama.cpp reads and generates them."""

    __slots__ = ("completion", "prompt")

    def __init__(self) -> None:
        self.prompt: int | None = None
        self.completion = 0

    def usage(self) -> dict[str, int]:
        prompt = self.prompt or 0
        return {"prompt_tokens": prompt, "completion_tokens": self.completion,
                "total_tokens": prompt + self.completion}


def _metered() -> None:
    """Report every chat and completions reply's usage, streamed or not, and a stream's failure in the stream.

    llama-cpp-python's server reports `usage` only in a whole reply (it drops `stream_options`), and a chat
    format made of several generations (engine.local.tool_format) sums what it chooses. Here each request gets
    a meter that `Llama.generate` counts into: the prompt of the request's first generation, and every token
    generated but an end-of-turn one (what llama-cpp-python's own `usage` counts). A whole reply's `usage` is
    the meter's; a stream ends with one more chunk carrying it, with `choices: []`, as OpenAI's
    `stream_options: {include_usage: true}` does. The server serves one request at a time, so one meter per
    model is enough.

    An exception while a reply streams (after the server sent its 200) would end the stream without `[DONE]`
    and leave its reason in the server log only; it becomes an `error` event, as OpenAI's streams say one.
    """
    import llama_cpp
    from llama_cpp.llama_cpp import llama_vocab_is_eog

    generate = llama_cpp.Llama.generate

    def counted_generate(self, tokens, *args, **kwargs):  # type: ignore[no-untyped-def]
        meter = getattr(self, "_engine_meter", None)
        tokens_out = generate(self, tokens, *args, **kwargs)
        if meter is None:
            yield from tokens_out
            return
        if meter.prompt is None:
            meter.prompt = len(tokens)
        vocab = self._model.vocab
        try:
            for token in tokens_out:
                if not llama_vocab_is_eog(vocab, token):
                    meter.completion += 1
                yield token
        finally:
            tokens_out.close()

    def metered(method):  # type: ignore[no-untyped-def]
        def call(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            meter = self._engine_meter = _Meter()
            if not kwargs.get("stream"):
                try:
                    reply = method(self, *args, **kwargs)
                finally:
                    self._engine_meter = None
                if isinstance(reply, dict):
                    reply["usage"] = meter.usage()
                return reply
            try:
                chunks = method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - said in the stream, which has already begun
                self._engine_meter = None
                return iter([_error_event(exc)])
            return _with_usage(self, chunks, meter)

        return call

    llama_cpp.Llama.generate = counted_generate  # type: ignore[method-assign]
    llama_cpp.Llama.__call__ = metered(llama_cpp.Llama.__call__)  # type: ignore[method-assign]
    llama_cpp.Llama.create_chat_completion = metered(  # type: ignore[method-assign]
        llama_cpp.Llama.create_chat_completion)


def _with_usage(llama: Any, chunks: Iterator[dict[str, Any]], meter: _Meter) -> Iterator[dict[str, Any]]:
    """The stream's chunks, then its usage chunk; an exception on the way ends it with an error event."""
    last: dict[str, Any] = {}
    try:
        for chunk in chunks:
            last = chunk
            yield chunk
    except Exception as exc:  # noqa: BLE001 - said in the stream, which has already begun
        yield _error_event(exc)
        return
    finally:
        llama._engine_meter = None
    yield {"id": last.get("id", ""), "object": last.get("object", "chat.completion.chunk"),
           "created": last.get("created", 0), "model": last.get("model", ""), "choices": [], "usage": meter.usage()}


def _error_event(exc: Exception) -> dict[str, Any]:
    """An exception as the `error` object of an OpenAI error reply."""
    return {"error": {"message": str(exc) or type(exc).__name__, "type": type(exc).__name__}}


def main(argv: list[str] | None = None) -> None:
    """Run llama_cpp.server's command line with `argv` (default: this process's arguments).

    Args:
        argv: Server arguments, as `python -m llama_cpp.server` takes them.
    """
    if os.environ.get("LLM_EVAL_LLAMA_EXTRA_BUFTS") != "1":
        _disable_extra_buffer_types()
    _mean_pooling_for_embeddings()
    _metered()
    from engine.local.tool_format import register

    register()
    from llama_cpp.server.__main__ import main as server_main

    sys.argv = ["llama_cpp.server", *(sys.argv[1:] if argv is None else argv)]
    server_main()


if __name__ == "__main__":
    main()
