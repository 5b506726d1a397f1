"""The response cache: what is one request (the key), what is kept, and the client answering from it."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine.client.client import ModelClient
from engine.client.request import RequestSettings, prepare
from engine.client.response import CallResult
from engine.client.response_cache import ResponseCache, cache_key, default_path, storable, use_cache
from engine.client.session import Sessions
from engine.errors import ClientError
from engine.judge.cache import JudgeCache
from engine.model.model_config import ModelConfig
from tests.factories import make_test
from tests.fake_openai import FakeOpenAI, Reply

TEST = make_test(messages=({"role": "user", "content": "hi"},), prompt="hi")
URL = "http://127.0.0.1:9/v1/chat/completions"
BODY: dict[str, Any] = {"model": "m-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64,
                        "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}


def test_default_path_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ENGINE_RESPONSE_CACHE", str(tmp_path / "x.sqlite"))
    assert default_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("ENGINE_RESPONSE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_path() == tmp_path / "llm-eval-engine" / "responses" / "responses.sqlite"


@pytest.mark.parametrize("change", [
    {"temperature": 0.5}, {"max_tokens": 65}, {"seed": 1}, {"model": "m-2"},
    {"tools": [{"type": "function", "function": {"name": "f"}}]}, {"tool_choice": "required"},
    {"response_format": {"type": "json_object"}}, {"top_p": 0.9},
    {"messages": [{"role": "user", "content": "hi!"}]},
])
def test_anything_that_changes_the_reply_changes_the_key(change: dict[str, Any]) -> None:
    assert cache_key(URL, {**BODY, **change}, 0) != cache_key(URL, BODY, 0)


def test_endpoint_sample_and_streaming_flags() -> None:
    key = cache_key(URL, BODY, 0)
    assert cache_key(URL.replace(":9/", ":10/"), BODY, 0) != key
    assert cache_key(URL.replace("chat/completions", "completions"), BODY, 0) != key
    assert cache_key(URL, BODY, 1) != key                        # another sample of a repeated test
    whole = {k: v for k, v in BODY.items() if k != "stream_options"} | {"stream": False}
    assert cache_key(URL, whole, 0) == key                       # streamed or whole: the same answer
    assert cache_key(URL, dict(reversed(list(BODY.items()))), 0) == key
    # credentials in the URL are masked before hashing: the key is the same whoever asks
    assert cache_key("http://u:pw@127.0.0.1:9/v1/chat/completions", BODY, 0) == \
        cache_key("http://x:other@127.0.0.1:9/v1/chat/completions", BODY, 0)


def test_when_the_cache_is_used() -> None:
    model = ModelConfig(name="m", model="m-1", base_url="http://127.0.0.1:9/v1")
    assert use_cache(None, model, 0.0, 1)
    assert not use_cache(None, model, 0.7, 1)                    # not deterministic
    assert not use_cache(None, model, None, 1)                   # the server's default temperature
    assert not use_cache(None, model, 0.0, 3)                    # repeats are independent samples
    assert use_cache(True, model, 0.7, 3)                        # --cache: asked for
    assert not use_cache(False, model, 0.0, 1)                   # --no-cache
    assert not use_cache(True, replace(model, builtin="qwen"), 0.0, 1)   # engine-served, its server not started
    # once its server runs, an embedded model is cached under its identity (engine.local.cache_identity)
    assert use_cache(None, replace(model, builtin="qwen", cache_identity="builtin://qwen/x=1/v1"), 0.0, 1)


def test_only_complete_successes_are_storable() -> None:
    assert storable(CallResult(text="ok", finish_reason="stop"))
    assert not storable(CallResult(error=ClientError("boom", kind="http_500")))
    assert not storable(CallResult(text="cut", finish_reason="length", truncated=True))
    assert not storable(CallResult(text="ok", cached=True))


def test_store_read_clear(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c" / "r.sqlite")
    assert cache.usable and cache.get("k") is None
    cache.put("k", "http://u:pw@h/v1/chat/completions?key=q", "m-1", CallResult(
        text="Paris", reasoning="hmm", finish_reason="stop", served_model="m-1", prompt_tokens=3,
        completion_tokens=1, latency_s=2.0, notes=["a note"]))
    cache.put("bad", URL, "m-1", CallResult(error=ClientError("x", kind="http_500")))
    cache.put("cut", URL, "m-2", CallResult(text="Par", truncated=True))
    hit = cache.get("k")
    assert hit is not None and hit.cached and (hit.text, hit.reasoning, hit.prompt_tokens) == ("Paris", "hmm", 3)
    assert hit.latency_s is None and hit.ttft_visible_s is None and hit.notes == ["a note"]
    assert cache.get("bad") is None and cache.get("cut") is None and (cache.hits, cache.stored) == (1, 1)
    with sqlite3.connect(cache.path) as db:   # the endpoint is kept without credentials or query
        assert db.execute("SELECT endpoint FROM responses").fetchall() == [("http://***@h/v1/chat/completions",)]
    cache.put("k2", URL, "m-2", CallResult(text="Rome"))
    info = cache.info()
    assert (info.entries, info.by_model, info.problem) == (2, {"m-1": 1, "m-2": 1}, None) and info.size_bytes > 0
    with sqlite3.connect(cache.path) as db:
        db.execute("UPDATE responses SET created = ? WHERE key = 'k'", (time.time() - 3 * 86400,))
    assert cache.clear(older_than_days=2) == 1 and cache.get("k") is None and cache.get("k2") is not None
    assert cache.clear(model="m-9") == 0 and cache.clear() == 1 and cache.info().entries == 0
    cache.close()


def test_a_corrupt_file_fails_soft(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    path.write_bytes(b"not a database at all " * 200)
    cache = ResponseCache(path)
    assert not cache.usable and "could not be opened" in (cache.problem or "")
    cache.put("k", URL, "m", CallResult(text="x"))
    assert cache.get("k") is None
    judge = JudgeCache(path)   # the same shared file handling: the judge cache fails the same way
    assert judge.problem is not None and judge.problem.endswith("judgements are not cached")
    assert judge.get("k") is None


@pytest.mark.parametrize("stream", [True, False])
async def test_the_client_answers_a_repeated_request_from_the_cache(fake_openai: FakeOpenAI, tmp_path: Path,
                                                                   stream: bool) -> None:
    fake_openai.responder = lambda body: Reply(content="Paris", tool_calls=[{"name": "f", "arguments": {"a": 1}}])
    model = ModelConfig(name="m", model="fake-1", base_url=fake_openai.base_url, timeout_s=5.0)
    request = prepare(model, TEST, RequestSettings(stream=stream))
    cache = ResponseCache(tmp_path / "r.sqlite")
    async with Sessions(64) as sessions:
        client = ModelClient(sessions, {"m": "sk-secret-value"}, cache)
        first = await client.call(model, request, cache_as=0)
        second = await client.call(model, request, cache_as=0)
        other_sample = await client.call(model, request, cache_as=1)
        uncached = await client.call(model, request)
    assert len(fake_openai.requests) == 3                        # first, sample 1, and the call without cache_as
    assert not first.cached and second.cached and not other_sample.cached and not uncached.cached
    assert (second.text, second.finish_reason, second.served_model) == (first.text, first.finish_reason,
                                                                         first.served_model)
    assert second.tool_calls == first.tool_calls and second.tool_calls[0].arguments == {"a": 1}
    cache.close()
    assert b"sk-secret-value" not in (tmp_path / "r.sqlite").read_bytes()


async def test_an_embedded_model_is_answered_from_the_cache_on_another_port(fake_openai: FakeOpenAI,
                                                                           tmp_path: Path) -> None:
    """An embedded model's server gets a new port every run: its calls are keyed by its cache_identity."""
    fake_openai.responder = lambda body: Reply(content="Paris")
    identity = "builtin://qwen/qwen-pkg=1.0/llama-cpp-python=0.3.36/engine=abc/v1"
    run1 = ModelConfig(name="m", model="fake-1", base_url=fake_openai.base_url, builtin="qwen",
                       cache_identity=identity, timeout_s=5.0)
    # the second run's server listens elsewhere (an unused port: a call there would fail)
    run2 = replace(run1, base_url="http://127.0.0.1:9/v1")
    cache = ResponseCache(tmp_path / "r.sqlite")
    async with Sessions(64) as sessions:
        client = ModelClient(sessions, {"m": None}, cache)
        first = await client.call(run1, prepare(run1, TEST, RequestSettings()), cache_as=0)
        second = await client.call(run2, prepare(run2, TEST, RequestSettings()), cache_as=0)
        changed = replace(run2, cache_identity=identity.replace("engine=abc", "engine=def"))
        third = await client.call(changed, prepare(changed, TEST, RequestSettings()), cache_as=0)
    cache.close()
    assert not first.cached and second.cached and second.text == "Paris"
    assert len(fake_openai.requests) == 1
    assert third.error is not None and not third.cached            # a new identity is a new key: asked again
    # the judge cache keys the same way
    from engine.judge.cache import cache_key as judge_key
    assert judge_key(run1, {"x": 1}, 0) == judge_key(run2, {"x": 1}, 0) != judge_key(changed, {"x": 1}, 0)
