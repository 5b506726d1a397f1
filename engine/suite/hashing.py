"""Test identity: a stable content hash of what a test sends and how it is scored.

The id, file, line, tags and repeat count are left out on purpose: moving a test, renaming its file or
retagging it keeps its results comparable; changing its prompt, tools, evaluator, variables, threshold
or sampling settings gives it a new hash, so `resume` and `diff` can tell a changed test apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.base.jsontext import dumps_canonical
from engine.evaluators.judge_prompt import JudgePrompt
from engine.evaluators.registry import COMPOSITIONS, KINDS

__all__ = ["TestHasher", "canonical_json", "chat_json", "judged_spec", "test_hash"]

# The one encoder of canonical JSON (engine/base/jsontext.py; `json.dumps` with these options,
# tests/base/test_jsontext.py): hashes key resume and the caches, so its text never changes.
_ENCODE: Callable[[Any], str] = dumps_canonical


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal text."""
    return _ENCODE(value)


def judged_spec(spec: Any, prompt: JudgePrompt | None) -> Any:
    """The evaluator spec as a test's hash reads it: a suite's `judge_prompt:` beside each judge in it (a judge's
    string form as {rubric: ...}), so a test with a judge changes hash with the prompt and one without keeps its.

    This text is what stored runs were hashed with (tests/suite/test_hash_pins.py); the judges themselves get the
    prompt as a compile option (engine.evaluators.base.CompileOptions), never from here.
    """
    if prompt is None:
        return spec
    if isinstance(spec, list):
        return [judged_spec(item, prompt) for item in spec]
    if not isinstance(spec, Mapping):
        return spec
    out = dict(spec)
    for key, item in spec.items():
        if key == "judge":
            judge = {"rubric": item} if isinstance(item, str) else item
            out[key] = {**judge, _JUDGE_PROMPT_KEY: prompt} if isinstance(judge, Mapping) else item
        elif key in COMPOSITIONS or (key in KINDS and KINDS[key].child):   # where the registry nests evaluators
            out[key] = judged_spec(item, prompt)
    return out


_JUDGE_PROMPT_KEY = "__judge_prompt__"   # the prompt's key in a judge of the hashed text


def test_hash(*, messages: Sequence[Mapping[str, Any]], prompt: str, tools: Sequence[Mapping[str, Any]],
              eval_spec: Any, variables: Mapping[str, Any], max_tokens: int | None, temperature: float | None,
              threshold: float, agent: Mapping[str, Any] | None = None,
              returns: Mapping[str, Any] | None = None, tool_choice: Any = None,
              api_names: Mapping[str, str] | None = None) -> str:
    """The first 16 hex digits of sha256 over the canonical JSON of the test's content.

    Args:
        messages: The chat messages sent.
        prompt: The completions-API prompt.
        tools: The OpenAI tool definitions offered.
        eval_spec: The resolved evaluator spec.
        variables: The template variables the evaluator renders with (golden included).
        max_tokens: The test's max_tokens.
        temperature: The test's temperature.
        threshold: The score needed to pass.
        agent: The test's `agent:` block (defaults merged), or None for a single-turn test.
        returns: Tool name -> its `returns` rules as written, for the offered tools (agent tests only).
        tool_choice: The test's `tool_choice` as sent, or None.
        api_names: Tool key -> the name the API sees, for offered tools declared with a `name:`.
    """
    content = {"messages": list(messages), "prompt": prompt, "tools": list(tools), "eval": eval_spec,
               "variables": dict(variables), "max_tokens": max_tokens, "temperature": temperature,
               "threshold": threshold}
    # Only agent tests carry the new keys, so every single-turn test keeps the hash it had.
    if agent is not None:
        content["agent"] = dict(agent)
        content["returns"] = dict(returns or {})
    # Only tests that set them carry these keys, so every other test keeps its hash.
    if tool_choice is not None:
        content["tool_choice"] = tool_choice
    if api_names:
        content["tool_names"] = dict(api_names)
    return hashlib.sha256(canonical_json(content).encode("utf-8")).hexdigest()[:16]


class TestHasher:
    """`test_hash` for the case rows of one test: what every row shares is encoded once, not once per row.

    The canonical JSON of a mapping is its items in key order, so the text is the shared parts and the row's
    own (messages, prompt, variables) joined in that order: the same text `test_hash` encodes, hence the
    same hash (tests/suite/test_hash_pins.py pins it). The shared parts are the evaluator spec, the tools
    and the settings.

    Args:
        tools, eval_spec, max_tokens, temperature, threshold, agent, returns, tool_choice, api_names: As
            `test_hash` takes them.
    """

    __test__ = False   # not a pytest class, despite its name

    def __init__(self, *, tools: Sequence[Mapping[str, Any]], eval_spec: Any, max_tokens: int | None,
                 temperature: float | None, threshold: float, agent: Mapping[str, Any] | None = None,
                 returns: Mapping[str, Any] | None = None, tools_json: str | None = None, tool_choice: Any = None,
                 api_names: Mapping[str, str] | None = None) -> None:
        """`tools_json`: `canonical_json(list(tools))` when the caller has it (tests that share their tools)."""
        tools_text = _ENCODE(list(tools)) if tools_json is None else tools_json
        eval_text = _ENCODE(eval_spec)
        # The canonical text is the keys in sorted order: agent, eval, max_tokens, messages, prompt, returns,
        # temperature, threshold, tool_choice, tool_names, tools, variables (`agent` and `returns` only for agent
        # tests, `tool_choice` and `tool_names` only when set, as in `test_hash`).
        agent_text = "" if agent is None else f'"agent":{_ENCODE(dict(agent))},'
        choice_text = "" if tool_choice is None else f'"tool_choice":{_ENCODE(tool_choice)},'
        names_text = f'"tool_names":{_ENCODE(dict(api_names))},' if api_names else ""
        returns_text = "" if agent is None else f',"returns":{_ENCODE(dict(returns or {}))}'
        self._before_messages = (f'{{{agent_text}"eval":{eval_text},"max_tokens":{_ENCODE(max_tokens)},'
                                 '"messages":')
        self._before_variables = (f'{returns_text},"temperature":{_ENCODE(temperature)},"threshold":'
                                  f'{_ENCODE(threshold)},{choice_text}{names_text}"tools":{tools_text},"variables":')

    def digest(self, *, messages: Sequence[Mapping[str, Any]], prompt: str, variables: Mapping[str, Any],
               messages_json: str | None = None) -> str:
        """The test hash of one row (what `test_hash` gives for the same arguments).

        `messages_json`: `canonical_json(list(messages))` when the caller has it (`chat_json`).
        """
        if messages_json is None:
            messages_json = _ENCODE(list(messages))
        text = (self._before_messages + messages_json + ',"prompt":' + _ENCODE(prompt)
                + self._before_variables + _ENCODE(variables if type(variables) is dict else dict(variables)) + "}")
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def chat_json(system: str | None, user: str) -> str:
    """`canonical_json` of the messages of a test written with `prompt:`: a system turn when `system` is
    text that is not empty, then the user turn. Its two strings are encoded alone and put in the text the
    encoder writes for these dicts (keys sorted, no spaces); tests/suite/test_hash_pins.py pins the hashes it
    goes into."""
    user_part = '{"content":' + _ENCODE(user) + ',"role":"user"}]'
    if system:
        return '[{"content":' + _ENCODE(system) + ',"role":"system"},' + user_part
    return "[" + user_part
