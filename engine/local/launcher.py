"""`python -m engine.local.launcher ARGS...`: llama-cpp-python's server, made safe on CPUs that lie about AMX.

llama.cpp built with `GGML_NATIVE` (what `pip install llama-cpp-python` does) turns on its AMX matrix
kernels when the CPU reports AMX. Some virtual machines (Firecracker, measured on this project's CI)
report AMX and grant the permission, yet fault on the first tile instruction: every request then
kills the server with SIGSEGV. The AMX kernels are reached only through llama.cpp's "extra buffer
types" (weight repacking), so this launcher turns those off before the model loads, then runs the
stock server unchanged. The cost is the repacked-weight speed-up, small for a 270M model.

Set `LLM_EVAL_LLAMA_EXTRA_BUFTS=1` to keep llama.cpp's default (faster on machines where AMX works).
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


def main(argv: list[str] | None = None) -> None:
    """Run llama_cpp.server's command line with `argv` (default: this process's arguments).

    Args:
        argv: Server arguments, as `python -m llama_cpp.server` takes them.
    """
    if os.environ.get("LLM_EVAL_LLAMA_EXTRA_BUFTS") != "1":
        _disable_extra_buffer_types()
    from llama_cpp.server.__main__ import main as server_main

    sys.argv = ["llama_cpp.server", *(sys.argv[1:] if argv is None else argv)]
    server_main()


if __name__ == "__main__":
    main()
