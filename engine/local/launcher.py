"""`python -m engine.local.launcher ARGS...`: llama-cpp-python's server, made safe on CPUs that lie about AMX.

llama.cpp built with `GGML_NATIVE` (what `pip install llama-cpp-python` does) turns on its AMX matrix
kernels when the CPU reports AMX. Some virtual machines (Firecracker, measured on this project's CI)
report AMX and grant the permission, yet fault on the first tile instruction: every request then
kills the server with SIGSEGV. The AMX kernels are reached only through llama.cpp's "extra buffer
types" (weight repacking), so this launcher turns those off before the model loads, then runs the
stock server unchanged. The cost is the repacked-weight speed-up, small for a 270M model.

Set `LLM_EVAL_LLAMA_EXTRA_BUFTS=1` to keep llama.cpp's default (faster on machines where AMX works).

Two more additions, neither changing a stock behaviour the engine relies on:
- the chat format `engine-chatml-tools` (engine.local.tool_format), with which a small ChatML model calls
  tools under a grammar;
- a model served with `--embedding True` pools by the mean unless the caller chose a pooling: for a GGUF
  that names none (SmolLM2's), llama.cpp would return one vector per *token*, which `/v1/embeddings`
  cannot carry as one vector per text (the server has no pooling option).
"""

from __future__ import annotations

import os
import sys


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


def main(argv: list[str] | None = None) -> None:
    """Run llama_cpp.server's command line with `argv` (default: this process's arguments).

    Args:
        argv: Server arguments, as `python -m llama_cpp.server` takes them.
    """
    if os.environ.get("LLM_EVAL_LLAMA_EXTRA_BUFTS") != "1":
        _disable_extra_buffer_types()
    _mean_pooling_for_embeddings()
    from engine.local.tool_format import register

    register()
    from llama_cpp.server.__main__ import main as server_main

    sys.argv = ["llama_cpp.server", *(sys.argv[1:] if argv is None else argv)]
    server_main()


if __name__ == "__main__":
    main()
