"""A real run for `engine view` tests: `engine run` against the fake OpenAI server, with an agent test whose model
calls a tool, tests that fail, and an answer carrying an XSS payload; and a live `engine view` server over it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from tests.engine_proc import checkout_env, run_engine
from tests.fake_openai import FakeOpenAI, Reply

#: docs/viewing.md, whose example link the tests open.
DOC = (Path(__file__).resolve().parents[2] / "docs" / "viewing.md").read_text(encoding="utf-8")

HOSTILE = "<script>alert('xss')</script><img src=x onerror=alert(1)>"

SUITE = """\
suite: geo
tags: [geo]
tools:
  get_weather:
    description: Current weather for a city.
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    returns:
      - when: {city: [Paris]}
        result: {temp_c: 18, sky: cloudy}
      - error: unknown city
tests:
  - id: france
    prompt: "What is the capital of France?"
    eval: {contains: Paris}
  - id: "country-{{ name }}"
    prompt: "What is the capital of {{ name }}?"
    cases:
      - {name: Italy, capital: Rome}
      - {name: Spain, capital: Madrid}
    eval: {contains: "{{ capital }}"}
  - id: weather
    tags: [agent]
    prompt: What should I wear in Paris today?
    tools: [get_weather]
    agent: {max_turns: 4}
    eval:
      all:
        - tool_sequence: [get_weather]
        - final_answer: {contains: "18"}
"""

MODELS = """\
models:
  fast:
    base_url: {base_url}
    model: fast-1
    api_key_env: ENGINE_TEST_KEY
    timeout_s: 10
    price: {{input: 1.0, output: 2.0}}
  other:
    base_url: {base_url}
    model: other-1
    timeout_s: 10
"""


def respond(body: dict[str, Any], *, fixed: bool = False) -> Reply:
    """`fast` answers well; `other` misses Spain (unless `fixed`) and answers the weather from memory; Italy gets
    the payload."""
    messages = body.get("messages") or []
    model = body.get("model")
    last = messages[-1] if messages else {}
    text = str(last.get("content") or "")
    if body.get("tools"):
        if model == "fast-1" and last.get("role") != "tool":
            return Reply(content="", tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
        if model == "fast-1":
            return Reply(content="It is 18°C and cloudy in Paris: a light jacket will do.")
        return Reply(content="Probably sunny; wear a t-shirt.")
    if "France" in text:
        return Reply(content="Paris")
    if "Italy" in text:
        return Reply(content=f"Rome {HOSTILE}")
    return Reply(content="Madrid" if model == "fast-1" or fixed else "Barcelona")


def make_run(folder: Path, *, fixed: bool = False) -> Path:
    """`engine run` the suite against a fake server into `folder/results` (a second call adds a second run)."""
    server = FakeOpenAI().start()
    try:
        server.responder = lambda body: respond(body, fixed=fixed)
        (folder / "suites").mkdir(parents=True, exist_ok=True)
        (folder / "suites" / "geo.yaml").write_text(SUITE, encoding="utf-8")
        (folder / "models.yaml").write_text(MODELS.format(base_url=server.base_url), encoding="utf-8")
        env = {**os.environ, "ENGINE_TEST_KEY": "sk-test-not-a-real-key",
               "ENGINE_RESPONSE_CACHE": str(folder / "responses.sqlite"),
               "ENGINE_JUDGE_CACHE": str(folder / "judge.sqlite")}
        done = run_engine("run", folder / "suites", "--models", folder / "models.yaml", "--model", "fast",
                          "--model", "other", "--out", folder / "results", env=env, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        server.stop()
    return folder / "results"


class ViewServer:
    """`engine view` as a real subprocess; `url` is what it printed."""

    def __init__(self, path: Path, *args: str) -> None:
        env = checkout_env({**os.environ, "ENGINE_TEST_KEY": "sk-test-not-a-real-key"})
        self.process = subprocess.Popen([sys.executable, "-m", "engine", "view", str(path), *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        found = re.search(r"(http://\S+)", line)
        if not found:
            self.stop()
            error = self.process.stderr.read() if self.process.stderr else ""
            raise AssertionError(f"engine view printed no URL: {line!r} {error}")
        self.url = found.group(1)
        self.base = self.url.split("?")[0].rstrip("/")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=20)


def documented_link(run: str) -> tuple[str, dict[str, str]]:
    """docs/viewing.md's example link, its run replaced: (the page, the query after `#/page?`)."""
    found = re.search(r"^http://127\.0\.0\.1:40123/#/(\w+)\?(\S+)$", DOC, flags=re.M)
    assert found, "no example link in docs/viewing.md"
    return found.group(1), {**dict(parse_qsl(found.group(2))), "run": run}
