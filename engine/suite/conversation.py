"""Conversations that start mid-way, tool names the API accepts, and `tool_choice` (docs/suite-format.md).

A test's `messages:` may hold assistant turns that call tools and `tool` turns with their results, in
OpenAI's shape::

    - {role: user, content: Book a table for two}
    - role: assistant
      content: null
      tool_calls:
        - {id: call_1, type: function, function: {name: find_slots, arguments: {party: 2}}}
    - {role: tool, tool_call_id: call_1, content: '{"slots": ["19:00"]}'}

`check_conversation` checks the order (every result answers an earlier call not yet answered; every call is
answered before the conversation goes on; the tool is one the test offers); `sent_turn` renders one turn as
the request carries it (arguments written as a mapping become their JSON text). Tools are named by their
key under `tools:` everywhere in a suite; a key the API refuses needs a `name:` for the API
(`api_name_problems`), which only the request and the model see (`engine.client` maps it both ways).
`uncallable_choices` says which tests demand a call that a models file's completions-API models cannot make.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from engine.base.diagnostic import Path, Problem
from engine.base.jsontext import dumps_unicode
from engine.base.words import did_you_mean
from engine.errors import Diagnostic
from engine.model.model_config import ModelConfig
from engine.model.test import Test

__all__ = ["API_NAME", "API_NAME_PATTERN", "CHOICE_MODES", "api_name_problems", "api_names", "check_conversation",
           "named_for_api", "sent_turn", "tool_choice", "uncallable_choices"]

#: The tool names OpenAI's API accepts; other APIs accept at least these.
API_NAME_PATTERN = "^[a-zA-Z0-9_-]{1,64}$"
API_NAME = re.compile(API_NAME_PATTERN)
#: The `tool_choice` words; anything else names one tool.
CHOICE_MODES = ("auto", "required", "none")


def api_names(tools: Mapping[str, Any]) -> dict[str, str]:
    """Tool key -> the name the API sees, for the tools declared with a `name:` of their own."""
    return {str(key): str(spec["name"]) for key, spec in tools.items()
            if isinstance(spec, Mapping) and isinstance(spec.get("name"), str) and spec["name"] != key}


def api_name_problems(tools: Mapping[str, Any]) -> list[Problem]:
    """A problem at each tool key the API would refuse (without a `name:`), and at each API name used twice."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for key, spec in tools.items():
        named = spec.get("name") if isinstance(spec, Mapping) else None
        if not isinstance(named, str) and not API_NAME.fullmatch(str(key)):
            suggestion = re.sub(r"[^a-zA-Z0-9_-]", "_", str(key))[:64]
            problems.append(Problem(("tools", key), f"the tool name '{key}' is refused by the OpenAI API (letters, "
                                    "digits, _ and - only, at most 64); keep the key and give the API another "
                                    f"name under it: `name: {suggestion}`", key=True))
            continue
        wire = named if isinstance(named, str) else str(key)
        if wire in seen:
            problems.append(Problem(("tools", key, "name") if isinstance(named, str) else ("tools", key),
                                    f"tools '{seen[wire]}' and '{key}' would both reach the API as '{wire}'; give "
                                    "one of them another `name:`", key=not isinstance(named, str)))
        else:
            seen[wire] = str(key)
    return problems


def tool_choice(value: Any, offered: Collection[str], path: Path) -> tuple[Any, list[Problem]]:
    """A test's `tool_choice:` as the request carries it (the one tool named by its key), and its problems.

    Args:
        value: `auto`, `required`, `none`, a tool's key, or `{name: key}` (schema-checked).
        offered: The keys of the tools the test offers.
        path: Where the value is written.
    """
    if isinstance(value, str) and value in CHOICE_MODES:
        return value, []
    name = str(value["name"]) if isinstance(value, Mapping) else str(value)
    where = path + ("name",) if isinstance(value, Mapping) else path
    if name not in offered:
        if not offered:
            return None, [Problem(where, f"`tool_choice` names the tool '{name}', but this test offers no tools; "
                                  f"add `tools: [{name}]` to the test")]
        guess = did_you_mean(name, offered)
        hint = f"did you mean '{guess}'?" if guess else (f"the test offers {', '.join(sorted(offered))}; use one "
                                                         f"of them, or {', '.join(CHOICE_MODES)}")
        return None, [Problem(where, f"`tool_choice` names the tool '{name}', which this test does not offer; "
                                     f"{hint}")]
    return {"type": "function", "function": {"name": name}}, []


def uncallable_choices(tests: Iterable[Test], models: Iterable[ModelConfig], *, which: str = "") -> list[Diagnostic]:
    """A warning at each test whose `tool_choice` demands a call (`required`, or one tool named) for the
    completions-API models among `models`: a text prompt carries no tools, so the choice cannot be honoured.

    Args:
        tests: The loaded tests.
        models: The models the tests would run on.
        which: Words after the model names saying where they come from (" (the default embedded models)").
    """
    names = sorted(m.name for m in models if m.api == "completions")
    if not names:
        return []
    seen: set[tuple[str, int]] = set()
    out: list[Diagnostic] = []
    for test in tests:
        choice = test.tool_choice
        if choice is None or choice in ("auto", "none") or (test.file, test.line) in seen:
            continue   # one entry's case rows and variants share a line: one warning
        seen.add((test.file, test.line))
        written = choice if isinstance(choice, str) else choice["function"]["name"]
        out.append(Diagnostic(test.file, test.line, 1, (
            f"test '{test.id}' demands a tool call (`tool_choice: {written}`), which the completions-API model(s) "
            f"{', '.join(names)}{which} cannot make: the completions API carries no tools, so neither they nor the "
            "choice are sent to them; give them `api: chat`, or leave them out with --model"), severity="warning"))
    return out


def check_conversation(messages: Sequence[Mapping[str, Any]], offered: Collection[str],
                       path: Path) -> list[Problem]:
    """What OpenAI's chat API would refuse in a conversation, each at its place with the fix.

    Args:
        messages: The test's `messages:` as written (schema-checked).
        offered: The keys of the tools the test offers (a call must name one).
        path: Where `messages:` is.
    """
    problems: list[Problem] = []
    open_calls: dict[str, int] = {}   # call id -> the message that made it, until a result answers it
    answered: set[str] = set()
    made: set[str] = set()

    def unanswered(at: int) -> None:
        for call_id, turn in open_calls.items():
            problems.append(Problem(path + (turn,), f"the call '{call_id}' of this assistant turn is never "
                                    f"answered before message {at + 1}; add a turn `{{role: tool, tool_call_id: "
                                    f"{call_id}, content: ...}}` right after it (the API refuses a call without "
                                    "its result)"))
        open_calls.clear()

    for i, message in enumerate(messages):
        here = path + (i,)
        role = message.get("role")
        if role != "tool":
            unanswered(i)
        if "tool_calls" in message and role != "assistant":
            problems.append(Problem(here + ("tool_calls",), f"only an assistant turn can call tools, not {_a(role)} "
                                    "one; make it `role: assistant`", key=True))
        if "tool_call_id" in message and role != "tool":
            problems.append(Problem(here + ("tool_call_id",), f"`tool_call_id` belongs to a tool turn, not {_a(role)} "
                                    "one; make it `role: tool` or remove the key", key=True))
        if message.get("content") is None and not (role == "assistant" and message.get("tool_calls")):
            problems.append(Problem(here + (("content",) if "content" in message else ()),
                                    f"a {role} turn needs `content:` (text); only an assistant turn that calls "
                                    "tools may leave it out", key="content" in message))
        if role == "assistant":
            for j, call in enumerate(message.get("tool_calls") or ()):
                call_id = str(call["id"])
                name = str(call["function"]["name"])
                at = here + ("tool_calls", j)
                if call_id in made:
                    problems.append(Problem(at + ("id",), f"the call id '{call_id}' is used twice; give each call "
                                            "an id of its own"))
                made.add(call_id)
                open_calls[call_id] = i
                if name not in offered:
                    guess = did_you_mean(name, offered)
                    hint = (f"did you mean '{guess}'?" if guess else "add it to the test's `tools: [...]`" +
                            (f" (it offers {', '.join(sorted(offered))})" if offered else ""))
                    problems.append(Problem(at + ("function", "name"), f"this turn calls the tool '{name}', which "
                                            f"the test does not offer; {hint}"))
                arguments = call["function"].get("arguments", {})
                if isinstance(arguments, str) and not _json_object(arguments):
                    problems.append(Problem(at + ("function", "arguments"), "the arguments text must be a JSON "
                                            "object; or write them as a YAML mapping (sent as its JSON text)"))
        elif role == "tool":
            answers = message.get("tool_call_id")
            if answers is None:
                problems.append(Problem(here, "a tool turn needs `tool_call_id:`, the id of the call it answers"))
            elif answers in open_calls:
                del open_calls[answers]
                answered.add(answers)
            else:
                reason = ("is already answered" if answers in answered else
                          "is not made by an assistant turn before it")
                problems.append(Problem(here + ("tool_call_id",), f"this tool result answers the call '{answers}', "
                                        f"which {reason}; a result must follow the assistant turn whose "
                                        "`tool_calls` has that id"))
    unanswered(len(messages))
    return problems


def _a(role: Any) -> str:
    return ("an " if role == "assistant" else "a ") + str(role)


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def sent_turn(message: Mapping[str, Any], render: Callable[[str], str]) -> dict[str, Any] | None:
    """An assistant turn with tool calls, or a tool turn, as the request carries it; None for other turns.

    `content` is rendered as a template; call arguments written as a mapping become their JSON text (as the
    API wants it), a JSON text is sent as written.
    """
    role = message["role"]
    content = message.get("content")
    text = render(content) if isinstance(content, str) else content
    if role == "tool":
        return {"role": "tool", "tool_call_id": str(message["tool_call_id"]), "content": text}
    if role != "assistant" or not message.get("tool_calls"):
        return None
    calls = []
    for call in message["tool_calls"]:
        function = call["function"]
        arguments = function.get("arguments", {})
        calls.append({"id": str(call["id"]), "type": "function", "function": {
            "name": str(function["name"]),
            "arguments": arguments if isinstance(arguments, str) else dumps_unicode(arguments)}})
    return {"role": "assistant", "content": text, "tool_calls": calls}


def named_for_api(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], choice: Any,
                  names: Mapping[str, str]) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]], Any]:
    """The messages, tool definitions and `tool_choice` of a request with each tool key in `names` replaced by
    its API name (`Test.api_names`): in the definitions, the assistant turns' calls and a named choice."""
    def rename(function: Mapping[str, Any]) -> Mapping[str, Any]:
        name = str(function.get("name"))
        return {**function, "name": names[name]} if name in names else function

    tools = [{**t, "function": rename(t["function"])} if isinstance(t.get("function"), Mapping) else t
             for t in tools]
    out: list[Mapping[str, Any]] = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {**message, "tool_calls": [{**c, "function": rename(c["function"])} for c in calls]}
        out.append(message)
    if isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        choice = {**choice, "function": rename(choice["function"])}
    return out, tools, choice
