"""Batch calls through a real forward proxy (proxy.py, as tests/client/test_proxy.py runs it): the upload, the
create, each poll and the results download go the way the live calls go, with the proxy's credentials and the
key sent in the query masked everywhere the run writes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests import fake_openai
from tests.client.proxy_plugin import TEST_HOST
from tests.client.test_proxy import Proxy, _without_proxies
from tests.engine_proc import run_engine
from tests.fake_batches import OpenAIBatchServer
from tests.fake_openai import FakeOpenAI

KEY = "sk-batch-proxy-SECRET-0123456789abcdef"
PROXY_SECRET = "proxy-pass-b4tch91"
SUITE = "suite: s\ntests:\n  - id: q\n    prompt: \"capital of France?\"\n    eval: {contains: Paris}\n"


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[Proxy]:
    running = Proxy(tmp_path, "--basic-auth", f"alice:{PROXY_SECRET}")   # refuses a client without them
    yield running
    running.stop()


def test_batch_calls_go_through_the_proxy_with_its_credentials_and_the_key_masked(tmp_path: Path,
                                                                                  proxy: Proxy) -> None:
    live = FakeOpenAI()
    batches = OpenAIBatchServer(live)
    live.start()
    try:
        live.responder = lambda body: fake_openai.Reply(content="Paris")
        batches.key_query = ("key", KEY)
        (tmp_path / "s.yaml").write_text(SUITE)
        # model.test is known only to the proxy: a batch call that reached the server went through it
        (tmp_path / "models.yaml").write_text(
            f"models:\n  far:\n    base_url: http://{TEST_HOST}:{live.port}/v1\n    model: far-1\n"
            "    api_key_env: BATCH_PROXY_KEY\n    api_key_query: key\n    batch: {size: 1, max_wait_s: 30}\n")
        out = tmp_path / "results"
        env = _without_proxies(dict(os.environ)) | {
            "HTTP_PROXY": f"http://alice:{PROXY_SECRET}@127.0.0.1:{proxy.port}", "BATCH_PROXY_KEY": KEY,
            "ENGINE_BATCH_POLL_S": "0.05"}
        done = run_engine("run", str(tmp_path / "s.yaml"), "--models", str(tmp_path / "models.yaml"), "--out",
                          str(out), "--no-cache", env=env)
        assert done.returncode == 0, done.stderr
        (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "latest"]
        rows = pd.read_parquet(run_dir)
        assert rows["passed"].all() and rows["batch_id"].notna().all()
        # each batch call named the host only the proxy knows: it went through the proxy, which took its password
        calls = batches.jobs.log
        assert set(batches.jobs.hosts) == {f"{TEST_HOST}:{live.port}"} and len(batches.jobs.hosts) == len(calls)
        for call in ("POST /v1/files", "POST /v1/batches", "GET /v1/batches/", "GET /v1/files/"):
            assert any(line.startswith(call) for line in calls), call   # upload, create, poll, results
        assert f"POST {TEST_HOST}:{live.port}/v1/files?key=" in proxy.access_log("/v1/files")   # the key went too
        texts = [done.stdout + done.stderr] + [p.read_bytes().decode("utf-8", "replace")
                                               for p in out.rglob("*") if p.is_file()]
        for secret in (KEY, PROXY_SECRET):
            assert not any(secret in text for text in texts), secret
    finally:
        live.stop()
