"""Frozen dataclasses every layer shares: tests, answers, verdicts, model configs.

Data walks one way: suite loader -> Test -> runner -> client -> Answer -> evaluators -> Verdict -> results.
Nothing here does I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.base.jsontext import dumps_ascii, dumps_unicode

if TYPE_CHECKING:
    from engine.evaluators.node import Node
    from engine.suite.agent import AgentSettings, GoldenTurn
    from engine.suite.cases_from import CaseOrigin
    from engine.suite.tools import Tool
    from engine.workspace.spec import WorkspaceSpec


@dataclass(frozen=True)
class ToolCall:
    """One function call the model made.

    Args:
        name: The function name as the model wrote it.
        arguments: The decoded arguments (usually a dict); None when `raw_arguments` was not valid JSON,
            or was the JSON `null` (then `valid_json` is True, and evaluators fail it as not an object).
        raw_arguments: The argument text exactly as received.
        valid_json: False when `raw_arguments` did not decode as JSON (the call is flagged, not dropped).
        id: The provider's call id, when it sent one.
    """

    name: str
    arguments: Any = None
    raw_arguments: str = ""
    valid_json: bool = True
    id: str | None = None

    @classmethod
    def from_arguments(cls, name: str, arguments: Any, id: str | None = None) -> ToolCall:
        """Build a call from already-decoded arguments (goldens, replayed data).

        `raw_arguments` is `json.dumps(arguments)`'s text, from the encoder engine.base.jsontext builds once.
        """
        return cls(name=name, arguments=arguments, raw_arguments=dumps_ascii(arguments), valid_json=True, id=id)

    @classmethod
    def from_raw(cls, name: str, raw_arguments: str, id: str | None = None) -> ToolCall:
        """Build a call from argument text as streamed; invalid JSON is flagged."""
        text = raw_arguments.strip() or "{}"
        try:
            return cls(name=name, arguments=json.loads(text), raw_arguments=raw_arguments, valid_json=True, id=id)
        except ValueError:
            return cls(name=name, arguments=None, raw_arguments=raw_arguments, valid_json=False, id=id)


@dataclass(frozen=True)
class Answer:
    """What the model said, as the evaluators see it.

    Args:
        text: The visible answer text (a leading `<think>` block already moved to `reasoning` by the client).
        tool_calls: The calls the model made, in order.
        finish_reason: "stop", "length", "tool_calls", ... or None when unknown.
        reasoning: Reasoning text, kept for the record and never scored.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    reasoning: str | None = None

    @classmethod
    def from_golden(cls, golden: Any) -> Answer:
        """The answer a model would give if it gave the golden answer.

        Text stays text; a JSON value is scored as its JSON text; a mapping with `tool_calls`
        (and optional `content`) is a tool-call envelope.
        """
        if type(golden) is str:   # the usual golden: text, answered before `Mapping`'s slower ABC check
            return cls(text=golden, finish_reason="stop")
        if isinstance(golden, Mapping) and "tool_calls" in golden:
            calls = tuple(
                ToolCall.from_arguments(str(c.get("name", "")), c.get("arguments", {}))
                for c in golden.get("tool_calls") or ()
            )
            return cls(text=str(golden.get("content") or ""), tool_calls=calls,
                       finish_reason="tool_calls" if calls else "stop")
        if isinstance(golden, str):
            return cls(text=golden, finish_reason="stop")
        # `json.dumps(golden, ensure_ascii=False)`'s text, its encoder built once.
        return cls(text=dumps_unicode(golden), finish_reason="stop")


@dataclass(frozen=True)
class Verdict:
    """An evaluator's judgement of one answer.

    Args:
        score: In [0, 1]. 0 for an error verdict.
        passed: Whether the node passed (its threshold, or score == 1 for leaves without one).
        reason: One line a person can read: "expected 'Paris', got 'Lyon'".
        kind: The evaluator key (`contains`, `all`, ...).
        name: The optional `name:` the author gave the node.
        weight: The node's weight inside its parent (0 = reported, not counted).
        error: True when the evaluator could not judge (bad config at run time, a crash) - not a fail.
        children: Verdicts of child nodes, for compositions.
        details: Extra facts for the results row (e.g. {"isolation": "pidns+netns"} from exec).
    """

    score: float
    passed: bool
    reason: str
    kind: str = ""
    name: str | None = None
    weight: float = 1.0
    error: bool = False
    children: tuple[Verdict, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    def walk(self, path: str = "") -> Iterator[tuple[str, Verdict]]:
        """Yield (path, verdict) for this node and every descendant, depth first.

        Paths look like `all`, `all/0.contains`, `all/1.not/0.regex`.
        """
        here = path or self.kind
        yield here, self
        for i, child in enumerate(self.children):
            yield from child.walk(f"{here}/{i}.{child.kind}")


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
        evaluator: The compiled evaluator tree (`engine.evaluators.Node`), or None: no check, or a Test
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


@dataclass(frozen=True)
class Suite:
    """A loaded, validated suite file."""

    id: str
    file: str
    description: str = ""
    tags: tuple[str, ...] = ()
    tests: tuple[Test, ...] = ()


@dataclass(frozen=True)
class RateLimit:
    """Limits a provider enforces on one endpoint and key, as declared in models.yaml (None: not limited).

    Args:
        requests_per_minute: Requests a minute.
        tokens_per_minute: Tokens a minute (prompt and `max_tokens` together, as providers count them).
    """

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None


@dataclass(frozen=True)
class ModelConfig:
    """One named model from models.yaml.

    Args:
        name: The name rows are reported under (`--model NAME`).
        model: The model id sent to the server.
        base_url: The API's base URL (`.../v1`; the method's path is added). None for builtin models until started.
        api: The provider that speaks the API (`engine.client.providers`): "chat", "completions", "anthropic"
            or "gemini".
        api_key_env: Name of the environment variable holding the key (never the key itself).
        api_key_header: Send the key in this header (`api-key`, Azure OpenAI) instead of `Authorization: Bearer`.
        api_key_query: Send the key as this query parameter (`key`) of every request instead of a header.
        concurrency: Calls in flight at most for this model (a ceiling: the rate-limit budget paces the calls).
        timeout_s: Time limit of each try; a try timed out before its reply started is retried (at most
            max_retries times), one whose reply was still arriving is not (engine.client.retry).
        connect_timeout_s: Time limit of opening a connection (the TCP connect, and TLS), within `timeout_s`:
            an unreachable host fails fast and the try is retried.
        max_retries: Retries after the first try.
        stream: Use server-sent events (default) or one JSON response.
        params: Extra request fields passed through (seed, top_p, ...).
        price_in: Price per 1M input tokens, or None.
        price_out: Price per 1M output tokens, or None.
        price_cache_read: Price per 1M prompt tokens read from the provider's cache, or None: `price_in`.
        price_cache_write: Price per 1M prompt tokens written to the provider's cache, or None: `price_in`.
        builtin: The name of an embedded model the engine starts itself (e.g. "gemma-3-270m").
        max_response_mb: The most bytes one reply may take (MiB); a larger one is an error row.
        structured_output: The server accepts `response_format: {type: json_schema}`: judge calls to
            this model send their reply schema that way (default off: a strict parse and one re-ask).
        context_tokens: The model's context in tokens (prompt and reply), or None: agent conversations that
            outgrow it are trimmed (`engine.agent.context`).
        base_urls: Replicas serving this model (`base_urls:` in models.yaml); calls spread over them
            (`engine.client.replicas`) and `base_url` is the first. Empty for a single endpoint.
        rate_limit: The provider's limits as declared in models.yaml (`rate_limit:`), for providers that publish
            no rate-limit headers; None: paced by the headers and 429s alone (`engine.client.ratelimit`).
        rate_limit_deadline_s: How long one call may wait for the rate limit (paced, or retrying 429, 529 and
            503 answers) before its row is an error.
        cache_identity: What the response and judge caches key this model's endpoint by in place of
            `base_url`: set for an embedded model once its server runs (its port changes every run; the
            identity names the model file's package, the llama-cpp-python release and the engine's server
            code instead, engine.local.cache_identity). None: the URL.
    """

    name: str
    model: str
    base_url: str | None = None
    api: str = "chat"
    api_key_env: str | None = None
    api_key_header: str | None = None
    api_key_query: str | None = None
    concurrency: int = 8
    timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    max_retries: int = 2
    stream: bool = True
    params: Mapping[str, Any] = field(default_factory=dict)
    price_in: float | None = None
    price_out: float | None = None
    price_cache_read: float | None = None
    price_cache_write: float | None = None
    builtin: str | None = None
    max_response_mb: float = 32.0
    structured_output: bool = False
    context_tokens: int | None = None
    base_urls: tuple[str, ...] = ()
    rate_limit: RateLimit | None = None
    rate_limit_deadline_s: float = 600.0
    cache_identity: str | None = None


# The max_tokens floor of a model whose `params` set none: room for a reasoning model's thinking and its answer.
DEFAULT_MAX_TOKENS = 1024


def max_tokens_floor(model: ModelConfig) -> int:
    """The least max_tokens a request to `model` goes with: its `params.max_tokens`, else DEFAULT_MAX_TOKENS.

    A floor, not a default: a test that asks for more gets more, one that asks for less is raised to it, so a
    suite written for small models never starves a reasoning model of the tokens it thinks with
    (`engine run --max-tokens` replaces it for a run).
    """
    return int(model.params.get("max_tokens", DEFAULT_MAX_TOKENS))


def cost_of(model: ModelConfig, prompt_tokens: int | None, completion_tokens: int | None,
            cached_tokens: int | None = None, cache_write_tokens: int | None = None) -> float | None:
    """Priced spend of one call in the price's currency; None when unpriced or tokens unknown.

    The prompt tokens count the cached ones: those read from the cache (`cached_tokens`) are priced at
    `price_cache_read` and those written to it at `price_cache_write` when the model has them, the rest at
    `price_in`.
    """
    if model.price_in is None and model.price_out is None:
        return None
    if prompt_tokens is None or completion_tokens is None:
        return None
    price_in = model.price_in or 0.0
    cost = prompt_tokens * price_in + completion_tokens * (model.price_out or 0.0)
    if cached_tokens and model.price_cache_read is not None:
        cost += cached_tokens * (model.price_cache_read - price_in)
    if cache_write_tokens and model.price_cache_write is not None:
        cost += cache_write_tokens * (model.price_cache_write - price_in)
    return cost / 1e6
