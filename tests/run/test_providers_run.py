"""One suite run by `engine run` against servers speaking Anthropic's Messages API and Google's Gemini API.

The suite: a single-turn answer under a system prompt, a reply cut by its token limit, an agent conversation with a
tool (arguments streamed in pieces), an overload waited out and retried, a refused request (400). Each runs
streamed and whole (`--no-stream`); the rows carry the verdicts, tokens (cache and thinking), served models,
finish reasons and cost, and the key is in no output. `engine analyze` then compares the two providers' models.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests import fake_anthropic, fake_gemini
from tests.fake_anthropic import FakeAnthropic
from tests.fake_gemini import FakeGemini
from tests.run.e2e import engine

KEY = "sk-provider-test-SECRET-4242424242"

SUITE = """\
suite: providers
tools:
  get_weather:
    description: Current weather for a city.
    parameters: {type: object, properties: {city: {type: string}}, required: [city], additionalProperties: false}
    returns:
      - when: {city: [Paris]}
        result: {temp_c: 18, sky: cloudy}
      - error: "unknown city {{ city }}"
defaults:
  max_tokens: 64
tests:
  - id: capital
    system: Answer with one word.
    prompt: "TASK capital: What is the capital of France?"
    eval: {contains: Paris}
  - id: long
    prompt: "TASK long: Tell me everything."
    eval: {contains: Paris}
  - id: agent
    prompt: "TASK agent: what should I wear in Paris?"
    tools: [get_weather]
    agent: {max_turns: 4}
    eval: {contains: "18"}
  - id: overload
    prompt: "TASK overload: What is the capital of France?"
    eval: {contains: Paris}
  - id: bad
    prompt: "TASK bad: x"
    eval: {contains: Paris}
"""

MODELS = """\
models:
  claude:
    api: anthropic
    base_url: {anthropic}
    model: claude-test
    api_key_env: PROVIDER_TEST_KEY
    timeout_s: 10
    price: {{input: 3, output: 15, cache_read: 0.3, cache_write: 3.75}}
  gemini:
    api: gemini
    base_url: {gemini}
    model: gemini-test
    api_key_env: PROVIDER_TEST_KEY
    timeout_s: 10
    price: {{input: 1, output: 4, cache_read: 0.25}}
"""


class Counter:
    """Requests seen per task (the overload fault is answered on the first ones only)."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def next(self, task: str) -> int:
        with self._lock:
            self.seen[task] = self.seen.get(task, 0) + 1
            return self.seen[task]


def anthropic_responder(counter: Counter) -> Callable[[dict[str, Any]], fake_anthropic.Reply]:
    usage = {"input_tokens": 20, "output_tokens": 6, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 10}
    Reply = fake_anthropic.Reply

    def respond(body: dict[str, Any]) -> fake_anthropic.Reply:
        first = body["messages"][0]["content"][0]["text"]
        task = first.split()[1].rstrip(":")
        answered = [b for m in body["messages"] for b in m["content"] if b["type"] == "tool_result"]
        n = counter.next(task)
        if task == "capital":
            return Reply(text="Paris", thinking="France's capital.", usage=usage, model="claude-test-20250101")
        if task == "long":
            return Reply(text="Once upon a", stop="max_tokens", usage=usage)
        if task == "agent":
            if not answered:
                return Reply(text="Let me check.", tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}],
                             usage=usage)
            return Reply(text=f"It is {json.loads(answered[0]['content'])['temp_c']} degrees: take a jacket.",
                         usage=usage)
        if task == "overload":
            if n == 1:
                return Reply(status=529, message="Overloaded", retry_after="0.05")
            return Reply(text="Paris", usage=usage)
        return Reply(status=400, message="messages: the first message\nmust use the user role")

    return respond


def gemini_responder(counter: Counter) -> Callable[[dict[str, Any]], fake_gemini.Reply]:
    usage = {"promptTokenCount": 50, "candidatesTokenCount": 6, "cachedContentTokenCount": 30,
             "thoughtsTokenCount": 4, "totalTokenCount": 60}
    Reply = fake_gemini.Reply

    def respond(body: dict[str, Any]) -> fake_gemini.Reply:
        first = body["contents"][0]["parts"][0]["text"]
        task = first.split()[1].rstrip(":")
        answered = [p["functionResponse"] for c in body["contents"] for p in c["parts"] if "functionResponse" in p]
        n = counter.next(task)
        if task == "capital":
            return Reply(text="Paris", thought="France's capital.", usage=usage)
        if task == "long":
            return Reply(text="Once upon a", finish="MAX_TOKENS", usage=usage)
        if task == "agent":
            if not answered:
                return Reply(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}], usage=usage)
            return Reply(text=f"It is {answered[0]['response']['temp_c']} degrees: take a jacket.", usage=usage)
        if task == "overload":
            if n == 1:
                return Reply(status=429, message="Resource has been exhausted (e.g. check quota).",
                             retry_delay="0.05s")
            if n == 2:
                return Reply(status=503, message="The model is overloaded. Please try again later.")
            return Reply(text="Paris", usage=usage)
        return Reply(status=400, message="Invalid JSON payload received.\nUnknown name \"x\"")

    return respond


@pytest.fixture
def servers() -> Iterator[tuple[FakeAnthropic, FakeGemini]]:
    claude, gemini = FakeAnthropic(), FakeGemini()
    claude.responder = anthropic_responder(Counter())
    gemini.responder = gemini_responder(Counter())
    claude.start()
    gemini.start()
    yield claude, gemini
    claude.stop()
    gemini.stop()


def _run(tmp_path: Path, claude: FakeAnthropic, gemini: FakeGemini, *extra: str) -> tuple[Path, pd.DataFrame, str]:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "providers.yaml").write_text(SUITE)
    (tmp_path / "models.yaml").write_text(MODELS.format(anthropic=claude.base_url, gemini=gemini.base_url))
    out = tmp_path / "results"
    done = engine("run", str(tmp_path / "suites"), "--models", str(tmp_path / "models.yaml"), "--out", str(out),
                  *extra, env={"PROVIDER_TEST_KEY": KEY})
    assert done.returncode in (0, 1), done.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "latest"]
    return run_dir, pd.read_parquet(run_dir).set_index(["model", "test_id"]), done.stdout + done.stderr


def _no_key_anywhere(run_dir: Path, output: str) -> None:
    assert KEY not in output
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_the_suite_runs_on_anthropic_and_gemini(tmp_path: Path, servers: tuple[FakeAnthropic, FakeGemini],
                                               stream: bool) -> None:
    claude, gemini = servers
    run_dir, df, output = _run(tmp_path, claude, gemini, *(() if stream else ("--no-stream",)))
    _no_key_anywhere(run_dir, output)
    assert claude.keys == {KEY} and gemini.keys == {KEY}

    passed = df["passed"].to_dict()
    for model in ("claude", "gemini"):
        assert passed[(model, "capital")] == True and passed[(model, "agent")] == True  # noqa: E712
        assert passed[(model, "overload")] == True  # noqa: E712
    assert set(df["api"]) == {"anthropic", "gemini"}

    # single turn: the answer, its reasoning, the served model, tokens with cache (and thinking) counts, cost
    c = df.loc[("claude", "capital")]
    assert (c["answer"], c["reasoning"], c["finish_reason"], c["served_model"]) == (
        "Paris", "France's capital.", "stop", "claude-test-20250101")
    assert (c["prompt_tokens"], c["completion_tokens"], c["cached_tokens"], c["cache_write_tokens"]) == (60, 6, 30, 10)
    assert c["cost"] == pytest.approx((20 * 3 + 30 * 0.3 + 10 * 3.75 + 6 * 15) / 1e6)
    g = df.loc[("gemini", "capital")]
    assert (g["answer"], g["reasoning"], g["finish_reason"], g["served_model"]) == (
        "Paris", "France's capital.", "stop", "gemini-test-001")
    assert (g["prompt_tokens"], g["completion_tokens"], g["cached_tokens"], g["reasoning_tokens"]) == (50, 10, 30, 4)
    assert g["cost"] == pytest.approx((20 * 1 + 30 * 0.25 + 10 * 4) / 1e6)

    # a reply cut by its token limit
    for model in ("claude", "gemini"):
        long = df.loc[(model, "long")]
        assert (long["finish_reason"], long["truncated"], long["answer"]) == ("length", True, "Once upon a")

    # the agent conversation: a tool call, its result sent back in the API's own blocks, the final answer
    for model in ("claude", "gemini"):
        agent = df.loc[(model, "agent")]
        assert (agent["outcome"], agent["turns"], agent["tool_calls_made"]) == ("completed", 2, 1)
        assert agent["answer"] == "It is 18 degrees: take a jacket."
        assert [e["status"] for e in agent["tool_events"]] == ["ok"]
        assert [e["finish_reason"] for e in agent["ledger"]] == ["tool_calls", "stop"]
    second = [b for b in claude.requests if b["messages"][0]["content"][0]["text"].startswith("TASK agent")][1]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][1]["content"][-1] == {"type": "tool_use", "id": "toolu_0", "name": "get_weather",
                                                    "input": {"city": "Paris"}}
    assert second["messages"][2]["content"][0]["tool_use_id"] == "toolu_0"
    assert second["tools"][0]["input_schema"]["required"] == ["city"]
    assert second["tool_choice"] == {"type": "auto"}
    g_second = [b for b in gemini.requests if b["contents"][0]["parts"][0]["text"].startswith("TASK agent")][1]
    assert [c["role"] for c in g_second["contents"]] == ["user", "model", "user"]
    assert g_second["contents"][2]["parts"][0]["functionResponse"] == {
        "name": "get_weather", "response": {"temp_c": 18, "sky": "cloudy"}}
    declared = g_second["tools"][0]["functionDeclarations"][0]["parameters"]
    assert "additionalProperties" not in declared and declared["required"] == ["city"]
    assert g_second["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}

    # the overload (529; Gemini's 429 with RetryInfo then 503) waited out and retried
    assert df.loc[("claude", "overload")]["retries"] == 1
    assert df.loc[("gemini", "overload")]["retries"] == 2
    assert df.loc[("gemini", "overload")]["rate_limit_wait_s"] >= 0.05

    # a refused request: its message in one line, never retried
    bad = df.loc[("claude", "bad")]
    assert bad["error_kind"] == "http_400" and bad["retries"] == 0
    assert "invalid_request_error: messages: the first message must use the user role" in bad["error_message"]
    g_bad = df.loc[("gemini", "bad")]
    assert g_bad["error_kind"] == "http_400" and g_bad["retries"] == 0
    assert 'INVALID_ARGUMENT: Invalid JSON payload received. Unknown name "x"' in g_bad["error_message"]

    # the wire: the system prompt where each API takes it, the method each streams by
    capital = next(b for b in claude.requests if b["messages"][0]["content"][0]["text"].startswith("TASK capital"))
    # max_tokens: the run default (a test's value only raises it)
    assert capital["system"] == "Answer with one word." and capital["max_tokens"] == 1024
    assert capital.get("stream", False) is stream
    g_capital = next(b for b in gemini.requests if b["contents"][0]["parts"][0]["text"].startswith("TASK capital"))
    assert g_capital["systemInstruction"] == {"parts": [{"text": "Answer with one word."}]}
    assert g_capital["generationConfig"]["maxOutputTokens"] == 1024
    method = ":streamGenerateContent?alt=sse" if stream else ":generateContent"
    assert set(gemini.paths) == {f"/v1beta/models/gemini-test{method}"}
    assert set(claude.paths) == {"/v1/messages"}


def test_engine_analyze_compares_the_providers_models(tmp_path: Path,
                                                      servers: tuple[FakeAnthropic, FakeGemini]) -> None:
    run_dir, _, _ = _run(tmp_path, *servers)
    analyzed = engine("analyze", str(run_dir), "--format", "json")
    assert analyzed.returncode == 0, analyzed.stderr
    report = analyzed.stdout
    assert "claude" in report and "gemini" in report
    assert KEY not in report


THINKING_SUITE = """\
suite: thinking
tools:
  get_weather:
    description: Current weather for a city.
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    returns:
      - result: {temp_c: 18, sky: cloudy}
tests:
  - id: agent
    prompt: "TASK agent: what should I wear in Paris?"
    tools: [get_weather]
    agent: {max_turns: 4}
    eval: {contains: "18"}
"""

THINKING_MODELS = """\
models:
  claude:
    api: anthropic
    base_url: {anthropic}
    model: claude-test
    api_key_env: PROVIDER_TEST_KEY
    timeout_s: 10
    params: {{thinking: {{type: enabled, budget_tokens: 1024}}}}
  gemini:
    api: gemini
    base_url: {gemini}
    model: gemini-test
    api_key_env: PROVIDER_TEST_KEY
    timeout_s: 10
"""

SIGNATURE = "CsgBAVSoXO5-gemini-thought-signature"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_an_agent_with_thinking_on_sends_its_signed_thinking_back(tmp_path: Path,
                                                                  servers: tuple[FakeAnthropic, FakeGemini],
                                                                  stream: bool) -> None:
    claude, gemini = servers
    weather = [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    claude.script(fake_anthropic.Reply(thinking="I need the weather.", redacted="EmwKAhgBEgy-redacted",
                                       text="Checking.", tool_calls=weather),
                  fake_anthropic.Reply(thinking="18 degrees.", text="It is 18 degrees: take a jacket."))
    gemini.script(fake_gemini.Reply(thought="I need the weather.", tool_calls=weather, signature=SIGNATURE),
                  fake_gemini.Reply(text="It is 18 degrees: take a jacket."))
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "thinking.yaml").write_text(THINKING_SUITE)
    (tmp_path / "models.yaml").write_text(THINKING_MODELS.format(anthropic=claude.base_url, gemini=gemini.base_url))
    out = tmp_path / "results"
    done = engine("run", str(tmp_path / "suites"), "--models", str(tmp_path / "models.yaml"), "--out", str(out),
                  "--no-cache", *(() if stream else ("--no-stream",)), env={"PROVIDER_TEST_KEY": KEY})
    assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "latest"]
    df = pd.read_parquet(run_dir).set_index(["model", "test_id"])
    for model in ("claude", "gemini"):
        agent = df.loc[(model, "agent")]
        assert (agent["outcome"], agent["turns"], agent["passed"]) == ("completed", 2, True), agent["error_message"]

    # the tool_use turn sent back starts with the thinking blocks as the server signed them, then text and call
    first, second = claude.requests
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    turn = second["messages"][1]
    assert turn["role"] == "assistant"
    assert turn["content"][:2] == claude.signed[0]
    assert [b["type"] for b in turn["content"]] == ["thinking", "redacted_thinking", "text", "tool_use"]
    # Gemini: the call's part carries its thoughtSignature back
    g_turn = gemini.requests[1]["contents"][1]
    assert g_turn["role"] == "model" and g_turn["parts"][0]["thoughtSignature"] == SIGNATURE
    # the thinking is the row's reasoning; the signatures are in no Parquet file
    assert "I need the weather." in json.dumps(df.loc[("claude", "agent")]["transcript"].tolist(), default=str)
    for path in run_dir.rglob("*.parquet"):
        data = path.read_bytes()
        assert b"-sig-" not in data and b"redacted" not in data and SIGNATURE.encode() not in data, path


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_gemini_replicas_take_the_method_of_the_request(tmp_path: Path, stream: bool) -> None:
    replicas = [FakeGemini().start() for _ in range(2)]
    try:
        for server in replicas:
            server.responder = lambda body: fake_gemini.Reply(text="Paris")
        (tmp_path / "suites").mkdir()
        tests = "".join(f"  - id: t{i}\n    prompt: \"Capital {i}?\"\n    eval: {{contains: Paris}}\n"
                        for i in range(4))
        (tmp_path / "suites" / "replicas.yaml").write_text(f"suite: replicas\ntests:\n{tests}")
        (tmp_path / "models.yaml").write_text(
            "models:\n  gemini:\n    api: gemini\n    model: gemini-test\n    api_key_env: PROVIDER_TEST_KEY\n"
            f"    base_urls: [{replicas[0].base_url}, {replicas[1].base_url}]\n")
        done = engine("run", str(tmp_path / "suites"), "--models", str(tmp_path / "models.yaml"), "--out",
                      str(tmp_path / "results"), "--no-cache", *(() if stream else ("--no-stream",)),
                      env={"PROVIDER_TEST_KEY": KEY})
        assert done.returncode == 0, done.stdout + done.stderr
        method = ":streamGenerateContent?alt=sse" if stream else ":generateContent"
        for server in replicas:
            assert server.paths and set(server.paths) == {f"/v1beta/models/gemini-test{method}"}
    finally:
        for server in replicas:
            server.stop()
