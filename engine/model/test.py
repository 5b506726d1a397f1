"""A runnable test and the suite file it came from, as the suite loader builds them.

Data walks one way: suite loader -> Test -> runner -> client -> Answer -> evaluators -> Verdict -> results.
Nothing here does I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.base.jsontext import dumps_unicode
from engine.model.agent import AgentSettings, GoldenTurn
from engine.model.cases import CaseOrigin
from engine.model.mcp_server import McpServerSpec
from engine.model.tools import Tool
from engine.model.tree import Node
from engine.model.workspace import WorkspaceSpec


@dataclass(frozen=True, slots=True)
class Test:
    """One runnable test: a test of a suite, expanded for one row of `cases`.

    Prompts and messages are already rendered; `eval` is the evaluator spec exactly as written (results
    show it, the hash covers it) and `evaluator` the tree compiled from it when the suite loaded
    (engine.evaluators.compile_spec: options checked and bound, templates rendered with `variables`).

    Args:
        suite: The suite id.
        id: The test id (rendered, so table-driven tests get one id per case).
        file: The suite file path, for messages.
        line: The line of the test in the file.
        messages: Chat messages [{"role": ..., "content": ...}], system first when there is one.
        prompt: The text sent to completions-API models (see docs/suite-format.md).
        eval: The evaluator spec (a one-key mapping plus common options), or None for "no check".
        golden: The reference answer, or None.
        variables: Template variables: case values, `golden`, `test_id`, `suite`.
        tools: OpenAI tool definitions offered to the model ({"type": "function", "function": {...}}).
        tags: Suite tags then test tags.
        max_tokens: The test's max_tokens (a floor: the run's default never lowers it).
        temperature: The test's temperature, or None for the run default.
        threshold: The score a test needs to pass.
        repeat: How many attempts per model.
        case_index: The row of `cases` this test came from, or None.
        hash: Stable content hash of what is sent and how it is scored.
        suite_dir: The folder of the suite file (harness and data files resolve inside it).
        evaluator: The compiled evaluator tree (`engine.model.tree.Node`), or None: no check, or a Test
            built by hand, which `engine.evaluators.score` compiles from `eval` when it scores.
        agent: The loop's limits when the test has `agent:` (it then runs as a conversation), else None.
        initial_state: The state variables at the start of the conversation (`agent.state`).
        agent_tools: The offered tools compiled with their `returns` rules, by name (agent tests only);
            shared by every test of the suite (compiled once per suite).
        golden_turns: An agent test's golden conversation, compiled (the model's turns), or () when none.
        case_origin: The file and row of `cases_from` this test's case came from, for messages; None for
            inline cases. Not compared: a test is the same test wherever its row is written.
        variant: The suite's `variants:` entry this test runs under, or None when the suite has none.
        images: (image as written, line, column) of each image part in `messages` (engine.suite.content_parts),
            for messages that name where an image cannot go; () for a text-only test.
        workspace: A workspace test's `workspace:` block and offered built-in tools (engine.workspace), or None.
        tool_choice: The test's `tool_choice` as the request carries it (`auto`, `required`, `none`, or
            {"type": "function", "function": {"name": key}}), or None: not sent. Sent only with tools.
        api_names: Tool key -> the name the API sees, for offered tools declared with a `name:` of their own;
            the request carries those names and replies are read back to the keys (engine.suite.conversation).
        mcp: The MCP servers whose tools an agent test is offered (the suite's `mcp:` and its own), or ().
    """

    __test__ = False  # not a pytest test class, despite the name

    suite: str
    id: str
    file: str
    line: int
    messages: tuple[Mapping[str, Any], ...]
    prompt: str
    eval: Mapping[str, Any] | None
    golden: Any = None
    variables: Mapping[str, Any] = field(default_factory=dict)
    tools: tuple[Mapping[str, Any], ...] = ()
    tags: tuple[str, ...] = ()
    max_tokens: int | None = None
    temperature: float | None = None
    threshold: float = 1.0
    repeat: int = 1
    case_index: int | None = None
    hash: str = ""
    suite_dir: str = "."
    evaluator: Node | None = field(default=None, compare=False, repr=False)
    agent: AgentSettings | None = None
    initial_state: Mapping[str, Any] = field(default_factory=dict)
    agent_tools: Mapping[str, Tool] = field(default_factory=dict, compare=False, repr=False)
    golden_turns: tuple[GoldenTurn, ...] = field(default=(), compare=False, repr=False)
    case_origin: CaseOrigin | None = field(default=None, compare=False, repr=False)
    variant: str | None = None
    images: tuple[tuple[str, int, int], ...] = field(default=(), compare=False, repr=False)
    workspace: WorkspaceSpec | None = field(default=None, compare=False, repr=False)
    tool_choice: str | Mapping[str, Any] | None = None
    api_names: Mapping[str, str] = field(default_factory=dict)
    mcp: tuple[McpServerSpec, ...] = field(default=(), compare=False, repr=False)
    # Filled on first use by `messages_json` and `golden_json` (not copied by `dataclasses.replace`).
    _messages_json: str | None = field(default=None, init=False, repr=False, compare=False)
    _golden_json: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def messages_json(self) -> str:
        """The messages as JSON text (the results row's `prompt`), computed once: repeats and models share it."""
        text = self._messages_json
        if text is None:
            text = dumps_unicode(list(self.messages))
            object.__setattr__(self, "_messages_json", text)
        return text

    @property
    def golden_json(self) -> str | None:
        """The golden answer as JSON text (the results row's `golden`), or None; computed once."""
        if self.golden is None:
            return None
        text = self._golden_json
        if text is None:
            text = json.dumps(self.golden, ensure_ascii=False, default=str)
            object.__setattr__(self, "_golden_json", text)
        return text

    @property
    def tool_schemas(self) -> dict[str, Mapping[str, Any]]:
        """Offered tools by name: name -> the function's JSON Schema `parameters`."""
        out: dict[str, Mapping[str, Any]] = {}
        for tool in self.tools:
            fn = tool.get("function", tool)
            out[str(fn.get("name"))] = fn.get("parameters") or {}
        return out


class TestKey(Protocol):
    """What names a test, says how often it runs and where it is written, without its messages: what resuming,
    sharding, filtering, the manifest and `engine validate`'s notes read of every test. A Test is one;
    engine.suite.stored_tests reads one without rebuilding the Test."""

    @property
    def suite(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def hash(self) -> str: ...
    @property
    def case_index(self) -> int | None: ...
    @property
    def variant(self) -> str | None: ...
    @property
    def repeat(self) -> int: ...
    @property
    def agent(self) -> AgentSettings | None: ...
    @property
    def tags(self) -> tuple[str, ...]: ...
    @property
    def file(self) -> str: ...
    @property
    def line(self) -> int: ...
    @property
    def max_tokens(self) -> int | None: ...


@dataclass(frozen=True)
class Suite:
    """A loaded, validated suite file; `tests` is an engine.suite.stored_tests.TestSet when the loader made it."""

    id: str
    file: str
    description: str = ""
    tags: tuple[str, ...] = ()
    tests: Sequence[Test] = ()
