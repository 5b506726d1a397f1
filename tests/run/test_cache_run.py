"""The response cache end to end: real `engine run` subprocesses against the fake server, which counts calls.

Each test has its own cache file (the autouse fixture in tests/conftest.py sets $ENGINE_RESPONSE_CACHE).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from engine.analysis import load
from engine.analysis.models import per_model
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine, start_engine, write_project

KEY_ENV = "ENGINE_TEST_KEY"
SECRET = "sk-cache-test-0123456789abcdefSECRET"


def answer_capitals(body: dict) -> Reply:
    text = body["messages"][-1]["content"]
    for country, capital in (("France", "Paris"), ("Italy", "Rome"), ("Spain", "Lyon")):
        if country in text:
            return Reply(content=f"The capital is {capital}.", usage={"prompt_tokens": 100, "completion_tokens": 50,
                                                                       "total_tokens": 150})
    return Reply(content="ok")


@pytest.fixture
def project(tmp_path: Path, fake_openai: FakeOpenAI) -> dict:
    fake_openai.responder = answer_capitals
    suites, models = write_project(tmp_path, fake_openai.base_url)
    return {"suites": suites, "models": models, "tmp": tmp_path, "server": fake_openai, "runs": 0}


def run(project: dict, *options: str, expect: int = 0) -> tuple[pd.DataFrame, str]:
    """One `engine run` of both models; (its rows sorted by model and test, its stdout and stderr)."""
    project["server"].reset()
    project["server"].responder = answer_capitals
    project["runs"] += 1
    out = project["tmp"] / f"r{project['runs']}"
    done = engine("run", str(project["suites"]), "--models", str(project["models"]), "--model", "fast",
                  "--model", "other", "--out", str(out), "-q", *options, env={KEY_ENV: SECRET})
    assert done.returncode == expect, done.stderr
    df = pd.read_parquet(out / "latest").sort_values(["model", "test_id", "attempt"]).reset_index(drop=True)
    return df, done.stdout + done.stderr


def cache_file() -> Path:
    return Path(os.environ["ENGINE_RESPONSE_CACHE"])


def test_a_second_identical_run_makes_no_call_and_marks_its_rows(project: dict) -> None:
    first, _ = run(project)
    assert len(project["server"].requests) == 6 and not first["cached"].any()
    second, err = run(project)
    assert project["server"].requests == []                       # served entirely from the cache
    assert second["cached"].all()
    for column in ("model", "test_id", "answer", "score", "passed", "prompt_tokens", "completion_tokens",
                   "finish_reason", "served_model"):
        assert second[column].tolist() == first[column].tolist(), column
    fast = second["model"] == "fast"
    assert (first.loc[fast, "cost"] > 0).all() and (second.loc[fast, "cost"] == 0).all()   # nothing was paid
    assert second["latency_s"].isna().all() and second["ttft_visible_s"].isna().all()       # nothing was timed
    assert "response cache: 6 call(s) answered from" in err
    shown = engine("run", str(project["suites"]), "--models", str(project["models"]), "--model", "fast",
                   "--out", str(project["tmp"] / "shown"), env={KEY_ENV: SECRET})
    assert shown.returncode == 0, shown.stderr
    assert "3 (3 cached)" in shown.stdout                     # the summary table: done, of which cached
    # the figures: latency leaves cached rows out, cost counts them as 0, the notes say so
    summary = per_model(load([project["tmp"] / "r1" / "latest", project["tmp"] / "r2" / "latest"]))
    row = summary.set_index("model").loc["fast"]
    assert row["cost"] == pytest.approx(first.loc[fast, "cost"].sum())
    assert row["latency_p50"] == pytest.approx(first.loc[fast, "latency_s"].median())
    assert "3 of 6 rows answered from the response cache" in row["notes"]


def test_no_cache_calls_again_and_stream_flag_is_not_part_of_the_key(project: dict) -> None:
    run(project)
    again, _ = run(project, "--no-cache")
    assert len(project["server"].requests) == 6 and not again["cached"].any()
    whole, _ = run(project, "--no-stream")          # a streamed reply answers a whole one: same content
    assert project["server"].requests == [] and whole["cached"].all()


def test_repeats_are_not_cached_by_default_and_explicit_cache_keys_by_attempt(project: dict) -> None:
    run(project, "--repeat", "2")
    again, _ = run(project, "--repeat", "2")
    assert len(project["server"].requests) == 12 and not again["cached"].any()
    run(project, "--repeat", "2", "--cache")        # attempt 1 is a sample of its own: not answered by attempt 0
    assert len(project["server"].requests) == 12
    replayed, _ = run(project, "--repeat", "2", "--cache")
    assert project["server"].requests == [] and replayed["cached"].all()


def test_a_changed_request_misses(project: dict) -> None:
    run(project)
    run(project, "--max-tokens", "32")
    assert len(project["server"].requests) == 6
    run(project, "--seed", "3")                     # the run's order seed is never sent: the same request, a hit
    assert project["server"].requests == []
    run(project, "--temperature", "0.7")            # not deterministic: not cached by default
    assert len(project["server"].requests) == 6
    hot, _ = run(project, "--temperature", "0.7")
    assert len(project["server"].requests) == 6 and not hot["cached"].any()


def test_errors_and_truncated_replies_are_not_stored(project: dict) -> None:
    server = project["server"]

    def flaky(body: dict) -> Reply:
        text = body["messages"][-1]["content"]
        if "France" in text:
            return Reply(fault="http_400")
        if "Italy" in text and body["model"] == "fast-1":
            return Reply(content="The capital is Ro", finish_reason="length")
        return answer_capitals(body)

    server.reset()
    server.responder = flaky
    out = project["tmp"] / "flaky"
    done = engine("run", str(project["suites"]), "--models", str(project["models"]), "--out", str(out), "-q",
                  env={KEY_ENV: SECRET})
    assert done.returncode == 0, done.stderr
    df = pd.read_parquet(out / "latest")
    assert df["error_kind"].eq("http_400").sum() == 2 and df["truncated"].sum() == 1
    again, _ = run(project)
    asked = sorted((b["model"], b["messages"][-1]["content"]) for b in server.requests)
    assert asked == sorted([("fast-1", "What is the capital of France?"), ("other-1", "What is the capital of France?"),
                            ("fast-1", "What is the capital of Italy?")])
    assert again["cached"].sum() == 3


def test_the_api_key_never_reaches_the_cache_file(project: dict) -> None:
    run(project)
    run(project)
    assert project["server"].requests == []
    files = [p for p in cache_file().parent.iterdir() if p.name.startswith(cache_file().name)]
    assert files and sum(p.stat().st_size for p in files) > 0
    for path in files:
        data = path.read_bytes()
        assert SECRET.encode() not in data and b"Bearer" not in data, path


def test_a_corrupt_cache_file_is_warned_about_and_the_run_goes_on(project: dict) -> None:
    cache_file().parent.mkdir(parents=True, exist_ok=True)
    cache_file().write_bytes(b"this is not an SQLite database" * 100)
    df, err = run(project)
    assert "warning: the response cache" in err and "running without the response cache" in err
    assert len(project["server"].requests) == 6 and len(df) == 6 and not df["cached"].any()


def test_cache_info_and_clear(project: dict) -> None:
    empty = engine("cache", "info")
    assert empty.returncode == 0 and "entries: 0" in empty.stdout
    run(project)
    info = engine("cache", "info")
    assert info.returncode == 0, info.stderr
    assert f"path: {cache_file()}" in info.stdout and "entries: 6" in info.stdout
    by_model = [line.split() for line in info.stdout.split("by model:\n")[1].splitlines()]
    assert by_model == [["fast-1", "3"], ["other-1", "3"]] and "size:" in info.stdout
    assert "removed 0 " in engine("cache", "clear", "--older-than", "1").stdout
    assert "removed 3 " in engine("cache", "clear", "--model", "fast-1").stdout
    assert "entries: 3" in engine("cache", "info").stdout
    run(project)
    assert sorted(b["model"] for b in project["server"].requests) == ["fast-1"] * 3
    assert "removed 6 " in engine("cache", "clear").stdout
    assert "entries: 0" in engine("cache", "info").stdout


def test_shards_share_one_cache(project: dict) -> None:
    """Two processes write the cache at once (WAL); a third run then makes no call."""
    rows = "\n".join(f"      - {{n: {i}}}" for i in range(40))
    (project["suites"] / "bulk.yaml").write_text(
        "suite: bulk\ntags: [bulk]\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"question {{ n }}\"\n"
        f"    eval: {{contains: ok}}\n    cases:\n{rows}\n")
    server = project["server"]
    server.reset()
    server.responder = lambda body: Reply(content="ok", delay_s=0.05)
    out = project["tmp"] / "sharded"
    procs = [start_engine("run", str(project["suites"]), "--models", str(project["models"]), "--out", str(out),
                          "--run-id", "sweep", "--shard", f"{i}/2", "-q", "--concurrency", "2",
                          "--filter", "bulk", env={KEY_ENV: SECRET})
             for i in (1, 2)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert len(server.requests) == 2 * 40
    server.reset()
    server.responder = lambda body: Reply(content="ok")
    done = engine("run", str(project["suites"]), "--models", str(project["models"]), "--out", str(out), "-q",
                  "--filter", "bulk", env={KEY_ENV: SECRET})
    assert done.returncode == 0, done.stderr
    assert server.requests == []



AGENT_MODELS = """\
models:
  scripted:
    base_url: {base_url}
    model: scripted-1
    timeout_s: 10
    price: {{input: 1.0, output: 2.0}}
"""


def test_agent_conversations_are_cached_turn_by_turn(tmp_path: Path) -> None:
    """Each model call of a conversation is a request of its own: a re-run replays every turn from the cache."""
    from tests.run.agent_project import AGENT_SUITE, agent_script, scripted_server_thread

    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "agents.yaml").write_text(AGENT_SUITE)
    frames = []
    with scripted_server_thread(agent_script) as server:
        (tmp_path / "models.yaml").write_text(AGENT_MODELS.format(base_url=server.base_url))
        for out in ("a", "b"):
            server.requests.clear()
            done = engine("run", str(tmp_path / "suites"), "--models", str(tmp_path / "models.yaml"),
                          "--out", str(tmp_path / out), "-q", "--filter", "complete", "--filter", "parallel",
                          "--filter", "capped")
            assert done.returncode == 0, done.stderr
            frames.append((len(server.requests), pd.read_parquet(tmp_path / out / "latest").set_index("test_id")
                           .sort_index()))
    (calls_a, first), (calls_b, second) = frames
    assert calls_a == int(first["turns"].sum()) == 2 + 2 + 3 and calls_b == 0
    assert not first["cached"].any() and second["cached"].all()
    for column in ("answer", "turns", "outcome", "passed", "prompt_tokens", "state"):
        assert second[column].tolist() == first[column].tolist(), column
    assert (first["cost"] > 0).all() and (second["cost"] == 0).all() and second["latency_s"].isna().all()


def test_cached_rows_cost_nothing_against_max_cost(project: dict) -> None:
    run(project)
    # one paid row of `fast` (100 in + 50 out at 1 and 2 USD per 1M = 0.0002) passes this budget
    paid, _ = run(project, "--no-cache", "--max-cost", "0.0001", "--concurrency", "1", expect=1)
    assert len(paid) < 6
    cached, _ = run(project, "--max-cost", "0.0001", "--concurrency", "1")
    assert len(cached) == 6 and cached["cached"].all() and project["server"].requests == []


def test_a_call_paid_before_kill_9_is_not_paid_again_on_resume(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """The journal loses rows answered but not yet committed at a kill -9; the cache kept their replies."""
    import signal
    import sqlite3
    import time

    fake_openai.responder = lambda body: Reply(content="ok", delay_s=0.02)
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=300, concurrency=4)
    out = tmp_path / "results"
    proc = start_engine("run", str(suites), "--models", str(models), "--model", "fast", "--out", str(out),
                        "--run-id", "big", "--quiet", "--filter", "q-*", env={KEY_ENV: SECRET})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(fake_openai.requests) < 40:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    with sqlite3.connect(cache_file()) as db:
        stored = {row[0] for row in db.execute("SELECT key FROM responses")}
    asked_before = len(fake_openai.requests)
    assert 0 < len(stored) < 300 and asked_before - len(stored) <= 4   # at most the calls in flight were lost
    fake_openai.reset()
    fake_openai.responder = lambda body: Reply(content="ok")
    resumed = engine("run", "--resume", str(out / "big"), "--quiet", env={KEY_ENV: SECRET})
    assert resumed.returncode == 0, resumed.stderr
    df = pd.read_parquet(out / "big")
    assert len(df) == 300 and not df.duplicated(["test_id"]).any()
    assert len(fake_openai.requests) == 300 - len(stored)              # every stored reply answered from the cache
    asked = [body["messages"][-1]["content"] for body in fake_openai.requests]
    assert len(set(asked)) == len(asked)


def test_cache_commands_on_a_corrupt_file_say_so() -> None:
    cache_file().parent.mkdir(parents=True, exist_ok=True)
    cache_file().write_bytes(b"garbage, not SQLite " * 100)
    for command in (("cache", "info"), ("cache", "clear")):
        done = engine(*command)
        assert done.returncode == 1 and "could not be opened" in done.stderr and "delete the file" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_run_folder_from_before_the_cached_column_still_loads(project: dict, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    run(project)
    old = tmp_path / "old"
    old.mkdir()
    for part in (project["tmp"] / "r1" / "latest").glob("part-*.parquet"):
        table = pq.read_table(part)
        pq.write_table(table.drop_columns(["cached"]), old / part.name)
    from engine.analysis.load import ANALYSIS_COLUMNS

    narrow = load(old, columns=ANALYSIS_COLUMNS)                  # asked for: added as nulls
    assert narrow["cached"].isna().all() and len(narrow) == 6
    for df in (load(old), narrow):                                 # every column: absent
        summary = per_model(df).set_index("model")
        assert summary["latency_p50"].notna().all() and summary.loc["fast", "cost"] > 0
        assert not any("response cache" in note for note in summary["notes"])
