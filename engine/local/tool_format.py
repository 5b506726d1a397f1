"""A ChatML chat format for llama-cpp-python's server in which a small model calls tools through a grammar.

Registered as `engine-chatml-tools` by `engine.local.launcher`, in the server process (it imports llama_cpp,
which only the `[local]` extra installs). A request without tools is plain ChatML chat (llama-cpp-python's
own `chatml` handler: streaming, `response_format` schemas for judges, and so on). A request with tools is
answered in three constrained steps:

1. the model chooses, under a grammar, between `message:` and `functions.NAME:` for one of the offered
   names (it cannot invent a tool); `tool_choice: required` leaves `message:` out, and a `tool_choice` naming
   one function makes the choice itself (that function, called once);
2. for a call, it writes the arguments under a grammar made from that tool's JSON Schema, then chooses
   again between another call (parallel calls, at most MAX_CALLS) and the end of its turn;
3. for a message, it writes free text up to the end of its turn.

The grammar decides only the *shape*: which tool and which argument values are the model's choice, so a
wrong tool, a wrong restaurant or a made-up date are the model's own mistakes, scored as such.

Why not llama-cpp-python's `chatml-function-calling` (0.3.36), which works the same way: three faults,
read in its source and the first one measured with SmolLM2-135M-Instruct:
- its text replies are always empty: the text after `message:` is generated under the grammar
  `functions | "<|im_end|>"`, so the only text it can write is nothing (3 of 3 message replies were "");
- it lists the tools only inside a system message: a conversation without one never sees their
  descriptions, only their names (through the grammar);
- it renders no `tool` message: the model never reads what its calls returned.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any, cast

__all__ = ["FORMAT_NAME", "MAX_CALLS", "chatml_tools", "named_function", "register", "render_prompt"]

FORMAT_NAME = "engine-chatml-tools"
# The most calls one turn may make; the example suites need two at once (compare-two-restaurants).
MAX_CALLS = 4
END = "<|im_end|>"
# The system prompt SmolLM2's own chat template adds when a conversation has none (its GGUF metadata).
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

_INSTRUCTIONS = (
    "\n\nYou can call these functions:\n{listing}\n"
    "To call a function, reply with its name and its arguments as JSON, one call per block:\n"
    "functions.<name>:\n{{\"argument\": \"value\"}}\n"
    "To reply to the user in words, write:\nmessage:\n<your reply>"
)


def _literal(text: str) -> str:
    """A GBNF string literal (GBNF escapes like JSON)."""
    return json.dumps(text)


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def render_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """The ChatML prompt of a conversation with tools, ending where the assistant's turn starts.

    Args:
        messages: The OpenAI-style messages (system, user, assistant with or without `tool_calls`, tool).
        tools: The OpenAI-style tool definitions offered.
    """
    listing = "\n".join(
        f"functions.{t['function']['name']}: {t['function'].get('description', '')}\n"
        f"  arguments (JSON Schema): {json.dumps(t['function'].get('parameters', {}))}"
        for t in tools)
    has_system = bool(messages) and messages[0].get("role") == "system"
    system = (_content(messages[0]) if has_system else DEFAULT_SYSTEM) + _INSTRUCTIONS.format(listing=listing)
    parts = [f"<|im_start|>system\n{system}{END}\n"]
    for message in messages[1:] if has_system else messages:
        role = message.get("role")
        if role == "assistant":
            text = f"message:\n{_content(message)}" if _content(message) else ""
            calls = "".join(f"functions.{c['function']['name']}:\n{c['function'].get('arguments', '{}')}\n"
                            for c in message.get("tool_calls") or [])
            parts.append(f"<|im_start|>assistant\n{calls}{text}".rstrip("\n") + f"{END}\n")
        elif role == "tool":
            parts.append(f"<|im_start|>tool\n{_content(message)}{END}\n")
        else:
            parts.append(f"<|im_start|>{role}\n{_content(message)}{END}\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def chatml_tools(llama: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                 tool_choice: Any = None, stream: bool = False, max_tokens: int | None = None,
                 stop: str | list[str] | None = None, temperature: float = 0.2, **kwargs: Any) -> Any:
    """llama-cpp-python chat handler: plain ChatML without tools, grammar-constrained tool calls with them.

    Args:
        llama: The `llama_cpp.Llama` serving the request.
        messages: The request's messages.
        tools: The request's tools (None or empty: plain chat).
        tool_choice: `auto` (and absent): the model decides; `required`: it calls at least one tool; `none`:
            plain chat; `{"type": "function", "function": {"name": NAME}}`: it calls NAME once.
        stream: Server-sent events; a tool-call turn is sent as one chunk (it is decided whole).
        max_tokens: The reply's token limit (also each call's arguments' limit).
        stop: Extra stop strings for text replies.
        temperature: Sampling temperature of every step.
        kwargs: The other sampling fields, passed to llama-cpp-python unchanged.
    """
    from llama_cpp import llama_chat_format

    if not tools or tool_choice == "none":
        if not messages or messages[0].get("role") != "system":
            messages = [{"role": "system", "content": DEFAULT_SYSTEM}, *messages]
        chatml: Any = llama_chat_format.get_chat_completion_handler("chatml")
        return chatml(llama=llama, messages=messages, stream=stream, max_tokens=max_tokens, stop=stop,
                      temperature=temperature, **kwargs)
    by_name = {t["function"]["name"]: t for t in tools}
    forced = named_function(tool_choice)
    if forced is not None and forced not in by_name:
        raise ValueError(f"tool_choice names the function {forced!r}, which is not among the tools offered "
                         f"({', '.join(sorted(by_name))})")
    sampling = {k: v for k, v in kwargs.items() if k in _SAMPLING}
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    prompt = render_prompt(messages, tools)
    if forced is not None:
        first = f"functions.{forced}:"
    else:
        names = " | ".join(_literal(f"functions.{name}:") for name in by_name)
        choices = names if tool_choice == "required" else f'"message:" | {names}'
        first = _choose(llama, prompt, f"root ::= {choices}", temperature, sampling)
    if first == "message:":
        completion = llama.create_completion(prompt=prompt + "message:\n", max_tokens=max_tokens,
                                             stop=[*stops, END], temperature=temperature, stream=stream,
                                             **sampling)
        return llama_chat_format._convert_completion_to_chat(completion, stream=stream)
    calls: list[dict[str, Any]] = []
    name = first[len("functions."):-1]
    finish = "tool_calls"   # "length" once a call's arguments ran out of max_tokens (then the turn ends)
    while name in by_name and len(calls) < MAX_CALLS:
        prompt += f"functions.{name}:\n"
        schema = by_name[name]["function"].get("parameters") or {"type": "object"}
        grammar = _grammar(schema)
        done = llama.create_completion(prompt=prompt, max_tokens=max_tokens, temperature=temperature,
                                       grammar=grammar, stream=False, **sampling)
        arguments = done["choices"][0]["text"]
        finish = "length" if done["choices"][0].get("finish_reason") == "length" else finish
        calls.append({"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                      "function": {"name": name, "arguments": arguments}})
        if finish != "tool_calls" or forced is not None:
            break
        prompt += arguments + "\n"
        name = _next_call(llama, prompt, by_name, temperature, sampling)
    response = {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": 0,
        "model": kwargs.get("model") or "",
        "choices": [{"index": 0, "finish_reason": finish, "logprobs": None,
                     "message": {"role": "assistant", "content": None, "tool_calls": calls}}],
    }   # its `usage` is added by the launcher's meter (engine.local.launcher), which counts every step
    return _as_stream(response) if stream else response


# llama-cpp-python sampling fields a handler may pass on to `create_completion`.
_SAMPLING = ("top_p", "top_k", "min_p", "typical_p", "presence_penalty", "frequency_penalty", "repeat_penalty",
             "tfs_z", "mirostat_mode", "mirostat_tau", "mirostat_eta", "seed", "logit_bias", "model")


def named_function(tool_choice: Any) -> str | None:
    """The function a `tool_choice` names (`{"type": "function", "function": {"name": NAME}}`), else None."""
    if isinstance(tool_choice, dict) and isinstance(tool_choice.get("function"), dict):
        name = tool_choice["function"].get("name")
        return name if isinstance(name, str) else None
    return None


def _choose(llama: Any, prompt: str, gbnf: str, temperature: float, sampling: dict[str, Any]) -> str:
    """The model's choice among the grammar's few alternatives (a handful of tokens)."""
    from llama_cpp import llama_grammar

    grammar = llama_grammar.LlamaGrammar.from_string(gbnf, verbose=False)
    done = llama.create_completion(prompt=prompt, max_tokens=24, temperature=temperature, grammar=grammar,
                                   stream=False, **sampling)
    return str(done["choices"][0]["text"])


def _next_call(llama: Any, prompt: str, by_name: dict[str, Any], temperature: float,
               sampling: dict[str, Any]) -> str:
    """The name of the turn's next call, or "" when the model ends its turn.

    Free generation, not a grammar: ChatML's end of turn is one special token, which a grammar can only
    spell out character by character (measured: under the grammar `"<|im_end|>" | functions`, the model
    never ended its turn and every turn ran to MAX_CALLS calls).
    """
    done = llama.create_completion(prompt=prompt, max_tokens=16, temperature=temperature, stop=[END, ":"],
                                   stream=False, **sampling)
    text = str(done["choices"][0]["text"]).strip()
    return text[len("functions."):] if text.startswith("functions.") and text[len("functions."):] in by_name else ""


def _grammar(schema: dict[str, Any]) -> Any:
    """A grammar for one call's arguments: the tool's JSON Schema, else any JSON object."""
    from llama_cpp import llama_grammar

    try:
        return llama_grammar.LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
    except Exception:  # noqa: BLE001 - a schema the converter cannot read: still JSON
        return llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=False)


def _as_stream(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A whole tool-call turn as server-sent chunks: the calls in one delta, then the finish reason."""
    calls = response["choices"][0]["message"]["tool_calls"]
    finish = response["choices"][0]["finish_reason"]
    head = {"id": response["id"], "object": "chat.completion.chunk", "created": 0, "model": response["model"]}
    yield {**head, "choices": [{"index": 0, "finish_reason": None, "logprobs": None, "delta": {
        "role": "assistant", "content": None,
        "tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}}]}
    yield {**head, "choices": [{"index": 0, "finish_reason": finish, "logprobs": None, "delta": {}}]}


def register() -> None:
    """Register the format with llama-cpp-python (call in the server process before it loads the model)."""
    from llama_cpp import llama_chat_format

    llama_chat_format.LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
        FORMAT_NAME, cast(Any, chatml_tools), overwrite=True)
