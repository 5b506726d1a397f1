"""`engine run --out URL` end to end: real subprocesses, the fake OpenAI server, real Parquet on a real filesystem.

The S3 test talks to moto's S3 server (`moto.server.ThreadedMotoServer`, from the `moto[server]` package that
`make test` installs through [dev]) on 127.0.0.1, with dummy credentials from environment variables; the
file:// test writes to a local folder through the same code path (pyarrow.fs).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from engine.results.rows import key_of_row
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine, write_project

ACCESS = "AKIADUMMYACCESS4242"
SECRET = "dummy-secret-7f3c9e1ab2"
BUCKET = "evals"


def _keys(df: pd.DataFrame) -> list[str]:
    return sorted(key_of_row(row) for row in df.to_dict("records"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture()
def s3(tmp_path: Path) -> Iterator[tuple[dict[str, str], object]]:
    """moto's S3 server on loopback with bucket `evals`: (the env a run needs, a boto3 client)."""
    boto3 = pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "ENGINE_TEST_KEY": "k",
           "ENGINE_REMOTE_CACHE": str(tmp_path / "cache-a")}
    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=ACCESS,
                          aws_secret_access_key=SECRET, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    try:
        yield env, client
    finally:
        server.stop()


def _objects(client: object) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket=BUCKET).get("Contents", [])  # type: ignore[attr-defined]
    return {o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()  # type: ignore[attr-defined]
            for o in listed}


def _no_secret_anywhere(texts: list[bytes], folder: Path | None = None) -> None:
    files = [p.read_bytes() for p in folder.rglob("*") if p.is_file()] if folder and folder.exists() else []
    for blob in texts + files:
        assert SECRET.encode() not in blob and ACCESS.encode() not in blob


@pytest.mark.slow      # moto's S3 server and five engine processes: `make test-slow` (.ci/run runs it)
def test_s3_out_stop_resume_elsewhere_and_analyze(tmp_path: Path, fake_openai: FakeOpenAI,
                                                  s3: tuple[dict[str, str], object]) -> None:
    env, client = s3
    fake_openai.responder = lambda body: Reply(content="ok", delay_s=0.01)
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=40, concurrency=2)
    # --no-cache: the calls paid are the point here (the response cache would answer the later runs).
    common = ["run", str(suites), "--models", str(models), "--model", "fast", "--quiet", "--no-cache"]
    whole = engine(*common, "--out", str(tmp_path / "whole"), env={"ENGINE_TEST_KEY": "k"})
    assert whole.returncode == 0, whole.stderr
    expected = _keys(pd.read_parquet(tmp_path / "whole" / "latest"))
    fake_openai.reset()

    # A run into S3 that stops on its budget: what it saved is uploaded, its journal stays in staging.
    stopped = engine(*common, "--out", f"s3://{BUCKET}/runs", "--run-id", "r1", "--max-cost", "0.0002", env=env)
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    staged = next((tmp_path / "cache-a" / "staging").iterdir()) / "r1"
    assert (staged / "_journal.sqlite").exists()
    first = _objects(client)
    assert "runs/r1/_manifest.json" in first and any(k.startswith("runs/r1/part-") for k in first)
    assert not any("_journal" in k or "_lock" in k for k in first)
    assert json.loads(first["runs/r1/_manifest.json"])["complete"] is False
    paid = len(fake_openai.requests)
    assert 0 < paid < len(expected)

    # Resumed on "another machine" (an empty staging dir): the parts come down, the journal is rebuilt.
    other = dict(env, ENGINE_REMOTE_CACHE=str(tmp_path / "cache-b"))
    resumed = engine("run", "--resume", f"s3://{BUCKET}/runs/r1", "--max-cost", "100", "--quiet", "--no-cache",
                     env=other)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert len(fake_openai.requests) == len(expected)                 # no saved call paid twice
    final = _objects(client)
    assert json.loads(final["runs/r1/_manifest.json"])["complete"] is True
    assert not list((tmp_path / "cache-b" / "staging").rglob("_journal.sqlite"))   # durable remotely: dropped

    analyzed = engine("analyze", f"s3://{BUCKET}/runs/r1", "--format", "json", env=other)
    assert analyzed.returncode == 0, analyzed.stderr
    read_back = next((tmp_path / "cache-b" / "read").iterdir())
    assert _keys(pd.read_parquet(read_back)) == expected              # each row once, as the local run
    report = engine("report", f"s3://{BUCKET}/runs/r1", "-o", str(tmp_path / "r.html"), env=other)
    assert report.returncode == 0, report.stderr

    outputs = [p.stdout.encode() + p.stderr.encode() for p in (stopped, resumed, analyzed, report)]
    _no_secret_anywhere(outputs + list(final.values()) + [(tmp_path / "r.html").read_bytes()], tmp_path / "cache-a")
    _no_secret_anywhere([], tmp_path / "cache-b")


def test_s3_url_with_credentials_is_refused(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    suites, models = write_project(tmp_path, fake_openai.base_url)
    done = engine("run", str(suites), "--models", str(models), "--model", "other",
                  "--out", f"s3://{BUCKET}/runs?access_key={ACCESS}&secret_key={SECRET}")
    assert done.returncode == 2
    assert "environment" in done.stderr and SECRET not in done.stderr + done.stdout
    assert fake_openai.requests == []


def test_file_url_out_and_read(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="ok")
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=5)
    target = tmp_path / "remote"
    env = {"ENGINE_TEST_KEY": "k", "ENGINE_REMOTE_CACHE": str(tmp_path / "cache")}
    done = engine("run", str(suites), "--models", str(models), "--out", f"file://{target}", "--run-id", "r",
                  "--quiet", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads((target / "r" / "_manifest.json").read_text())["complete"]
    assert not (target / "r" / "_journal.sqlite").exists()
    df = pd.read_parquet(target / "r")
    assert len(df) == len(fake_openai.requests) == 2 * 8
    again = engine("run", str(suites), "--models", str(models), "--out", f"file://{target}", "--run-id", "r",
                   env=env)
    assert again.returncode == 2 and "already holds results" in again.stderr
    analyzed = engine("analyze", f"file://{target}/r", "--format", "json", env=env)
    assert analyzed.returncode == 0, analyzed.stderr
