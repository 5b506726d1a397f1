"""`engine run` against a model whose answers are written to stall the checks: every row scored, the run never held.

Real subprocesses against the loopback fake server. The model answers 80 KB of `!`, `[`, blank lines and `<`
to `ifeval` checks, and 80 KB of `a` to a JSON Schema `pattern` of nested repeats (each took minutes to hours
on Python's backtracking `re`): now each gets its verdict; a check past its `timeout_s` is an error naming the
limit, and the rows beside them are scored as usual. SIGTERM while a check is still at work on a long answer
ends the run with every finished row in the Parquet. Subprocess timeouts here are hang guards only.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import pandas as pd

from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import committed_rows, engine, start_engine

N = 80_000
ANSWERS = {
    "bang": "!" * N + "x",
    "bracket": "[" * N,
    "blank": "\n" * N + "x",
    "angle": "<" * N,
    "pattern": json.dumps({"id": "a" * N + "b"}),
    "key": json.dumps({"a" * N + "b": 1}),
    "words": "hello world " * (N // 12),
}

# (test id, the answer it gets, its check, the score it must get: each is a verdict, none an error)
CHECKS = [
    ("sentences", "bang", {"ifeval": {"id": "length_constraints:number_sentences", "relation": "at least",
                                      "num_sentences": 2}}, 0.0),
    ("sentences-loose", "bang", {"ifeval": {"id": "length_constraints:number_sentences", "relation": "less than",
                                            "num_sentences": 2, "loose": True}}, 1.0),
    ("placeholders", "bracket", {"ifeval": {"id": "detectable_content:number_placeholders",
                                            "num_placeholders": 1}}, 0.0),
    ("bullets", "blank", {"ifeval": {"id": "detectable_format:number_bullet_lists", "num_bullets": 0}}, 1.0),
    ("postscript", "blank", {"ifeval": {"id": "detectable_content:postscript", "postscript_marker": "P.S.",
                                        "loose": True}}, 0.0),
    ("title", "angle", {"ifeval": {"id": "detectable_format:title"}}, 0.0),
    ("pattern", "pattern", {"json_schema": {"type": "object", "properties": {
        "id": {"type": "string", "pattern": "^(a+)+$"}}}}, 0.0),
    ("pattern-key", "key", {"json_schema": {"type": "object", "patternProperties": {"^(a+)+$": {}},
                                            "additionalProperties": False}}, 0.0),
    ("regex-long", "words", {"regex": "(hello )+world$"}, 0.0),
]


def _yaml(suite: str, tests: list[dict[str, Any]]) -> str:
    """A suite file: its tests written as JSON (which YAML reads) under top-level keys."""
    return f"suite: {suite}\ntests:\n" + "".join(f"  - {json.dumps(test)}\n" for test in tests)


def _suite(folder: Path) -> Path:
    suites = folder / "suites"
    suites.mkdir()
    tests = [{"id": test_id, "prompt": f"{answer} {test_id}", "eval": check} for test_id, answer, check, _ in CHECKS]
    tests.append({"id": "limit", "prompt": "words limit",
                  "eval": {"ifeval": {"id": "language:response_language", "language": "en"}, "timeout_s": 0.001}})
    tests += [{"id": f"plain-{i}", "prompt": f"plain {i}", "eval": {"contains": "ok"}} for i in range(6)]
    (suites / "hostile.yaml").write_text(_yaml("hostile", tests))
    return suites


def _models(folder: Path, base_url: str) -> Path:
    models = folder / "models.yaml"
    models.write_text(f"models:\n  m:\n    base_url: {base_url}\n    model: m-1\n    concurrency: 4\n"
                      "    timeout_s: 30\n")
    return models


def _reply(body: dict[str, Any]) -> Reply:
    shape = body["messages"][-1]["content"].split()[0]
    return Reply(content="ok") if shape == "plain" else Reply(content=ANSWERS[shape], chunk_chars=8192)


def test_hostile_answers_get_verdicts_a_check_past_its_limit_an_error_and_every_row_is_scored(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = _reply
    out = tmp_path / "out"
    done = engine("run", str(_suite(tmp_path)), "--models", str(_models(tmp_path, fake_openai.base_url)),
                  "--out", str(out), "--quiet", "--no-cache", timeout=600)
    assert done.returncode == 0, done.stderr
    df = pd.read_parquet(out / "latest").set_index("test_id")
    assert len(df) == len(CHECKS) + 1 + 6
    for test_id, _, _, expected in CHECKS:
        row = df.loc[test_id]
        assert pd.isna(row["error_kind"]), (test_id, row["error_message"])
        assert row["score"] == expected, (test_id, row["evaluators"])
    limit = df.loc["limit"]
    assert limit["error_kind"] == "evaluator"
    assert limit["error_message"] == ("ifeval took longer than 0.001 s on an answer of 80 KB (its `timeout_s` sets "
                                      "the limit)")
    plain = df[df.index.str.startswith("plain-")]
    assert plain["passed"].tolist() == [True] * 6


def test_sigterm_while_a_check_is_at_work_ends_the_run_with_every_finished_row(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    # 3 MB of short sentences on one line to a loose sentence count that no variant follows: linear now, and
    # still a minute of work. The slow test's answer comes last (the fake waits), after the other rows are
    # committed.
    slow_answer = "a. " * 1_000_000
    served = threading.Event()

    def reply(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["content"] == "slow":
            served.set()
            return Reply(content=slow_answer, chunk_chars=65536, delay_s=1.0)
        return Reply(content="ok")

    fake_openai.responder = reply
    suites = tmp_path / "suites"
    suites.mkdir()
    tests = [{"id": f"plain-{i}", "prompt": f"plain {i}", "eval": {"contains": "ok"}} for i in range(5)]
    tests.append({"id": "slow", "prompt": "slow", "eval": {
        "ifeval": {"id": "length_constraints:number_sentences", "relation": "less than", "num_sentences": 2,
                   "loose": True}, "timeout_s": 3600}})
    (suites / "s.yaml").write_text(_yaml("s", tests))
    out = tmp_path / "out"
    proc = start_engine("run", str(suites), "--models", str(_models(tmp_path, fake_openai.base_url)), "--out",
                        str(out), "--quiet", "--no-cache", "--concurrency", "8", env={})
    try:
        for _ in range(1200):   # until the five plain rows are committed and the slow answer was sent
            if (committed_rows(out) >= 5 and served.is_set()) or proc.poll() is not None:
                break
            threading.Event().wait(0.05)
        threading.Event().wait(2.0)   # the slow answer arrives (the fake waits 1 s) and its check starts
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)   # a hang guard: the check alone would take minutes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, stderr
    assert "engine run --resume" in stderr
    df = pd.read_parquet(next(out.glob("*/_manifest.json")).parent).set_index("test_id")
    assert sorted(df.index) == [*(f"plain-{i}" for i in range(5)), "slow"]
    assert df.loc[[f"plain-{i}" for i in range(5)], "passed"].tolist() == [True] * 5
    slow = df.loc["slow"]
    assert slow["error_kind"] == "evaluator" and slow["error_message"].startswith("not scored: the run was stopped")
    assert slow["answer"] == slow_answer   # the paid answer is kept: engine rescore scores it
