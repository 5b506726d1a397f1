"""The embedded models (gemma-3-270m, SmolLM2-135M-Instruct) under llama-cpp-python, started and stopped by the engine.

Public API (used by the runner):
    serve_builtin(name, *, log_path, alias) -> context manager yielding "http://127.0.0.1:PORT/v1"
    default_models() -> the model configurations `engine run` uses without `--models`
    helper_models() -> the default configurations that answer no test (the `similar` embedding model)
"""

from __future__ import annotations

from engine.local.registry import BUILTINS, DEFAULT_ALIAS, INSTALL_HINT, default_models, helper_models
from engine.local.server import cache_identity, check_dependencies, model_file, serve_builtin

__all__ = [
           "BUILTINS",
           "DEFAULT_ALIAS",
           "INSTALL_HINT",
           "cache_identity",
           "check_dependencies",
           "default_models",
           "helper_models",
           "model_file",
           "serve_builtin",
]
