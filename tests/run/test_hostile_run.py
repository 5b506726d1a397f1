"""`engine run` against a hostile server and careless input: rows or one clear error, never a traceback.

Real subprocesses against the loopback fake server: every bad reply ends as a row, the other jobs of
the same model still run (concurrency 1), `pd.read_parquet(run)` reads every row, `--resume` pays
for nothing again, and no secret reaches a file the run writes or anything it prints.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.client.test_hostile import WRONG_SHAPES
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine

KEY_ENV = "ENGINE_TEST_KEY"
CASES = list(WRONG_SHAPES)


def write_models(folder: Path, base_url: str, extra: str = "") -> Path:
    models = folder / "models.yaml"
    models.write_text(f"""\
models:
  streamed:
    base_url: {base_url}
    model: s-1
    concurrency: 1
    max_retries: 1
    timeout_s: 20
  whole:
    base_url: {base_url}
    model: w-1
    stream: false
    concurrency: 1
    max_retries: 1
    timeout_s: 20
{extra}""")
    return models


def write_suite(folder: Path, count: int) -> Path:
    suites = folder / "suites"
    suites.mkdir()
    rows = "\n".join(f"      - {{n: {i}}}" for i in range(count))
    (suites / "bulk.yaml").write_text("suite: bulk\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"question {{ n }}\"\n"
                                      f"    eval: {{contains: ok}}\n    cases:\n{rows}\n")
    return suites


def hostile(body: dict[str, Any]) -> Reply:
    """Question n gets the n-th hostile reply (streamed or whole, as asked); the rest answer well."""
    n = int(body["messages"][-1]["content"].split()[-1])
    if n < len(CASES):
        whole, streamed, _ = WRONG_SHAPES[CASES[n]]
        return Reply(raw=streamed if body.get("stream") else whole)
    if n == len(CASES):
        return Reply(content="ok", usage={"prompt_tokens": 1e20, "completion_tokens": -3})
    if n == len(CASES) + 1:
        return Reply(content="ok " * 400_000, chunk_chars=65536)   # 1.2 MB: over the 1 MB cap given on the command line
    return Reply(content="ok")


def test_hostile_replies_end_as_rows_and_resume_pays_nothing_again(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = hostile
    total = len(CASES) + 4
    suites, models = write_suite(tmp_path, total), write_models(tmp_path, fake_openai.base_url)
    out = tmp_path / "results"
    done = engine("run", str(suites), "--models", str(models), "--out", str(out), "--quiet",
                  "--max-response-mb", "1")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    run = out / "latest"
    df = pd.read_parquet(run)
    assert len(df) == 2 * total and not df.duplicated(["model", "test_id"]).any()
    assert len(fake_openai.requests) == 2 * total            # nothing retried
    for model in ("streamed", "whole"):
        rows = df[df["model"] == model].set_index("test_id")
        for n, case in enumerate(CASES):
            assert rows.loc[f"q-{n}", "error_kind"] == "bad_response", (model, case)
            assert WRONG_SHAPES[case][2] in rows.loc[f"q-{n}", "error_message"]
        absurd = rows.loc[f"q-{len(CASES)}"]
        assert pd.isna(absurd["error_kind"]) and bool(absurd["passed"])
        assert pd.isna(absurd["prompt_tokens"]) and pd.isna(absurd["completion_tokens"])
        assert "usage.prompt_tokens 1e+20" in absurd["notes"] and "usage.completion_tokens -3" in absurd["notes"]
        assert rows.loc[f"q-{len(CASES) + 1}", "error_kind"] == "response_too_large"
        assert pd.isna(rows.loc[f"q-{len(CASES) + 2}", "error_kind"])   # the jobs after them still ran
    manifest = json.loads((run / "_manifest.json").read_text())
    assert manifest["complete"] and manifest["counts"]["rows"] == 2 * total
    resumed = engine("run", "--resume", str(run.resolve()), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert len(fake_openai.requests) == 2 * total             # no paid call repeated
    assert len(pd.read_parquet(run)) == 2 * total


@pytest.mark.parametrize(("args", "words"), [
    (["--max-tokens", "3000000000"], "--max-tokens"),
    (["--seed", "99999999999999999999"], "--seed"),
    (["--repeat", "100000000"], "--repeat"),
    (["--concurrency", "1000000"], "--concurrency"),
    (["--temperature", "7"], "--temperature"),
])
def test_out_of_range_options_are_refused_before_any_call(tmp_path: Path, fake_openai: FakeOpenAI,
                                                          args: list[str], words: str) -> None:
    suites, models = write_suite(tmp_path, 2), write_models(tmp_path, fake_openai.base_url)
    done = engine("run", str(suites), "--models", str(models), "--out", str(tmp_path / "r"), *args)
    assert done.returncode == 2 and f"Invalid value for '{words}'" in done.stderr, done.stderr
    assert "is not in the range" in done.stderr   # click's words (typer < 0.29: pyproject.toml)
    assert fake_openai.requests == [] and not (tmp_path / "r").exists()


@pytest.mark.parametrize(("where", "text", "message"), [
    ("suite", "    max_tokens: 3000000000\n", "'max_tokens' must be at most 2147483647"),
    ("models", "    params: {seed: 99999999999999999999}\n", "'seed' must be at most 9223372036854775807"),
    ("models", "    params: {max_tokens: 3000000000}\n", "'max_tokens' must be at most 2147483647"),
    ("models", "    concurrency: 1000000\n", "'concurrency' must be at most 4096"),
    ("models", "    max_retries: 1000000\n", "'max_retries' must be at most 100"),
    ("models", "    max_response_mb: 0\n", "'max_response_mb' must be more than 0"),
])
def test_out_of_range_numbers_fail_validate(tmp_path: Path, where: str, text: str, message: str) -> None:
    suites = write_suite(tmp_path, 1)
    if where == "suite":
        path = suites / "bulk.yaml"
        path.write_text(path.read_text().replace("    eval:", text + "    eval:"))
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  m:\n    base_url: http://127.0.0.1:9/v1\n" + (text if where == "models" else ""))
    done = engine("validate", str(suites), "--models", str(models))
    assert done.returncode == 1 and message in done.stdout + done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_secrets_are_nowhere_a_run_writes_or_prints(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    key = "sk-CANARY-" + os.urandom(12).hex()
    password = "pw-CANARY-" + os.urandom(6).hex()
    nested = "nested-CANARY-" + os.urandom(6).hex()
    filler = "x" * 270   # the key straddles the 300-character cut of the error body

    def echo(body: dict[str, Any]) -> Reply:
        n = int(body["messages"][-1]["content"].split()[-1])
        if n == 0:
            return Reply(fault="http_401", error_message=f"{filler}{key} is not a valid key")
        if n == 1:
            return Reply(content=f"ok, your key is {key}", reasoning=f"the key {key}",
                         tool_calls=[{"name": "f", "arguments": {"k": key}}])
        if n == 2:
            return Reply(content="ok " + key[:20], finish_reason="length")   # cut inside the key
        return Reply(content="ok")

    fake_openai.responder = echo
    suites = write_suite(tmp_path, 4)
    base = fake_openai.base_url.replace("http://", f"http://user:{password}@")
    models = tmp_path / "models.yaml"
    models.write_text(f"""\
models:
  keyed:
    base_url: {fake_openai.base_url}
    model: k-1
    api_key_env: {KEY_ENV}
    max_retries: 0
    params: {{max_tokens: 64, metadata: {{api_key: {nested}, user: me}}}}
  userinfo:
    base_url: {base}
    model: u-1
    max_retries: 0
""")
    out = tmp_path / "results"
    dry = engine("run", str(suites), "--models", str(models), "--dry-run", env={KEY_ENV: key})
    done = engine("run", str(suites), "--models", str(models), "--out", str(out), env={KEY_ENV: key})
    assert dry.returncode == 0 and done.returncode == 0, dry.stderr + done.stderr
    assert f"Bearer {key}" in fake_openai.authorizations                       # the key was really used
    assert any(r.get("metadata", {}).get("api_key") == nested for r in fake_openai.requests)  # params were sent
    printed = dry.stdout + dry.stderr + done.stdout + done.stderr
    for secret in (key, key[:MIN_SHOWN], password, nested):
        assert secret not in printed
        for path in out.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), (secret, path)
    df = pd.read_parquet(out / "latest").set_index(["model", "test_id"])
    assert "***" in df.loc[("keyed", "q-0"), "error_message"]
    echoed = df.loc[("keyed", "q-1")]
    assert echoed["answer"] == "ok, your key is ***" and echoed["reasoning"] == "the key ***"
    assert json.loads(echoed["tool_calls"][0]["arguments"]) == {"k": "***"}
    assert df.loc[("keyed", "q-2"), "answer"] == "ok ***"
    assert "an API key in the answer was masked" in echoed["notes"]
    manifest = json.loads((out / "latest" / "_manifest.json").read_text())
    by_name = {m["name"]: m for m in manifest["models"]}
    assert by_name["keyed"]["params"] == {"max_tokens": 64, "metadata": {"user": "me"}}
    assert by_name["userinfo"]["base_url"].startswith("http://***@127.0.0.1:")
    assert '"url": "http://***@127.0.0.1:' in dry.stdout


MIN_SHOWN = 8   # engine.redact.MIN_FRAGMENT: no piece of a key this long survives


def test_a_key_pasted_into_api_key_env_is_refused_without_echo(tmp_path: Path) -> None:
    pasted = "sk" + os.urandom(20).hex()   # letters and digits only: passes the name pattern
    suites = write_suite(tmp_path, 1)
    models = tmp_path / "models.yaml"
    models.write_text(f"models:\n  m:\n    base_url: http://127.0.0.1:9/v1\n    api_key_env: {pasted}\n")
    env = {k: v for k, v in os.environ.items() if k != pasted}
    checked = engine("validate", str(suites), "--models", str(models), env=env)
    ran = engine("run", str(suites), "--models", str(models), "--out", str(tmp_path / "r"), env=env)
    for done in (checked, ran):
        assert done.returncode in (1, 2) and "looks like an API key" in done.stdout + done.stderr
        assert pasted not in done.stdout + done.stderr and "Traceback" not in done.stderr


def test_userinfo_and_an_api_key_together_are_a_usage_error(tmp_path: Path) -> None:
    password = "pw-" + os.urandom(8).hex()
    suites = write_suite(tmp_path, 1)
    models = tmp_path / "models.yaml"
    models.write_text(f"models:\n  m:\n    base_url: http://u:{password}@127.0.0.1:9/v1\n    api_key_env: {KEY_ENV}\n")
    done = engine("run", str(suites), "--models", str(models), "--out", str(tmp_path / "r"), env={KEY_ENV: "k" * 20})
    assert done.returncode == 2 and "keep one of them" in done.stderr
    assert password not in done.stdout + done.stderr and not (tmp_path / "r").exists()


def test_run_options_have_the_schemas_bounds() -> None:
    """`engine run` refuses exactly what `engine validate` refuses in a suite or a models file."""
    import typer.main

    import engine.cli.run_cmd  # noqa: F401 - registers `run` on the app
    from engine.cli.app import app
    from engine.suite.schema import load_schema

    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    # typer < 0.29 (pyproject.toml) keeps an option's bounds in its click range type
    ranges = {p.name: (p.type.min, p.type.max) for p in run.params if hasattr(p.type, "min")}
    suite = load_schema("suite")["$defs"]["test"]["properties"]
    model = load_schema("models")["$defs"]["model"]["properties"]
    expected = {
        "repeat": (suite["repeat"]["minimum"], suite["repeat"]["maximum"]),
        "max_tokens": (suite["max_tokens"]["minimum"], suite["max_tokens"]["maximum"]),
        "temperature": (suite["temperature"]["minimum"], suite["temperature"]["maximum"]),
        "seed": (model["params"]["properties"]["seed"]["minimum"], model["params"]["properties"]["seed"]["maximum"]),
        "concurrency": (model["concurrency"]["minimum"], model["concurrency"]["maximum"]),
        "max_retries": (model["max_retries"]["minimum"], model["max_retries"]["maximum"]),
    }
    for name, (low, high) in expected.items():
        assert ranges[name] == (low, high), name
    assert ranges["max_response_mb"][1] == model["max_response_mb"]["maximum"]


def test_a_reply_that_is_not_valid_unicode_is_stored_and_never_paid_twice(tmp_path: Path,
                                                                          fake_openai: FakeOpenAI) -> None:
    """JSON may escape half a UTF-16 pair (`\\ud800`), which no UTF-8 text can hold: SQLite, Parquet and the
    response cache refuse it. The answer is kept with U+FFFD in its place, never lost with its batch."""
    fake_openai.responder = lambda body: Reply(content="ok \ud800 and \udfff end", reasoning="why \udbff")
    suites, models = write_suite(tmp_path, 3), write_models(tmp_path, fake_openai.base_url)
    out = tmp_path / "results"
    done = engine("run", str(suites), "--models", str(models), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    df = pd.read_parquet(out / "latest")
    assert len(df) == 6 and df["error_kind"].isna().all() and df["passed"].all()
    assert set(df["answer"]) == {"ok \ufffd and \ufffd end"}
    assert set(df.loc[df["model"] == "whole", "reasoning"]) == {"why \ufffd"}
    assert len(fake_openai.requests) == 6
    again = engine("run", str(suites), "--models", str(models), "--out", str(tmp_path / "again"), "--quiet")
    assert again.returncode == 0, again.stderr
    assert len(fake_openai.requests) == 6                     # answered from the response cache
    assert set(pd.read_parquet(tmp_path / "again" / "latest")["answer"]) == {"ok \ufffd and \ufffd end"}
