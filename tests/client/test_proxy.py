"""`engine run` behind a real forward proxy (proxy.py) on loopback: HTTP_PROXY for plain calls, HTTPS_PROXY
through CONNECT to a TLS server trusted through SSL_CERT_FILE; loopback itself never goes through the proxy,
and proxy credentials never reach a row or the output.

The proxy alone resolves the made-up host `model.test` (to 127.0.0.1, tests/client/proxy_plugin.py): a call
to it that succeeds went through the proxy, and the proxy's access log names it.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.client.proxy_plugin import TEST_HOST
from tests.engine_proc import ROOT, checkout_env, run_engine
from tests.fake_openai import FakeOpenAI, Reply

SUITE = "suite: s\ntests:\n  - id: q\n    prompt: \"capital of France?\"\n    eval: {contains: Paris}\n"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


class Proxy:
    """proxy.py in a subprocess on a free loopback port, its access log in a file."""

    def __init__(self, folder: Path, *extra: str) -> None:
        port_file, self.log = folder / "proxy.port", folder / "proxy.log"
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0", "--port-file", str(port_file),
             "--num-acceptors", "1", "--num-workers", "1", "--log-file", str(self.log), "--log-level", "INFO",
             "--plugins", "tests.client.proxy_plugin.TestHostOnLoopback", *extra],
            cwd=ROOT, env=_without_proxies(checkout_env()), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.port = int(_wait_for(lambda: port_file.exists() and port_file.read_text().strip(), "the proxy's port"))

    def access_log(self, needle: str) -> str:
        """The access log once it names `needle` (proxy.py writes a line when a client connection closes)."""
        return str(_wait_for(lambda: needle in (text := self.log.read_text()) and text, f"{needle} in the log"))

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(30)


def _wait_for(probe, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60   # a start-up bound on a loaded machine, not a speed check
    while not (found := probe()):
        assert time.monotonic() < deadline, f"no {what} within 60 s"
        time.sleep(0.05)
    return found


def _without_proxies(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.upper() not in PROXY_VARS}


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[Proxy]:
    running = Proxy(tmp_path)
    yield running
    running.stop()


def _run(tmp_path: Path, models: str, env: dict[str, str], *, fresh: bool = False) -> tuple[pd.DataFrame, str]:
    (tmp_path / "suites").mkdir(exist_ok=True)
    (tmp_path / "suites" / "s.yaml").write_text(SUITE)
    (tmp_path / "models.yaml").write_text(models)
    out = tmp_path / "results"
    done = run_engine("run", str(tmp_path / "suites"), "--models", str(tmp_path / "models.yaml"), "--out", str(out),
                      "--quiet", "--no-cache", env=_without_proxies(dict(os.environ)) | env, fresh=fresh)
    assert done.returncode == 0, done.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "latest"]
    return pd.read_parquet(run_dir).set_index("model"), done.stdout + done.stderr


def test_http_proxy_carries_the_calls_and_loopback_goes_direct(tmp_path: Path, proxy: Proxy,
                                                               fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="Paris")
    models = (f"models:\n  far:\n    base_url: http://{TEST_HOST}:{fake_openai.port}/v1\n    model: far-1\n"
              f"  near:\n    base_url: {fake_openai.base_url}\n    model: near-1\n")
    rows, _ = _run(tmp_path, models, {"HTTP_PROXY": f"http://127.0.0.1:{proxy.port}"})
    assert rows.loc["far", "passed"] and rows.loc["near", "passed"]
    assert sorted(body["model"] for body in fake_openai.requests) == ["far-1", "near-1"]
    log = proxy.access_log(f"POST {TEST_HOST}:{fake_openai.port}/v1/chat/completions")
    assert log.count(" - POST ") == 1   # the loopback model's call did not go through the proxy


def test_https_through_connect_with_a_certificate_trusted_by_ssl_cert_file(tmp_path: Path, proxy: Proxy) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", f"/CN={TEST_HOST}", "-addext", f"subjectAltName=DNS:{TEST_HOST}"],
                   check=True, capture_output=True)
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    server = FakeOpenAI().start(ssl_context=server_side)
    try:
        server.responder = lambda body: Reply(content="Paris")
        models = f"models:\n  tls:\n    base_url: https://{TEST_HOST}:{server.port}/v1\n    model: tls-1\n"
        # SSL_CERT_FILE is read when the process makes its first TLS context: a real subprocess, not a fork
        rows, _ = _run(tmp_path, models, {"HTTPS_PROXY": f"http://127.0.0.1:{proxy.port}", "SSL_CERT_FILE": str(cert)},
                       fresh=True)
        assert rows.loc["tls", "passed"] and [body["model"] for body in server.requests] == ["tls-1"]
        proxy.access_log(f"CONNECT {TEST_HOST}:{server.port}")
    finally:
        server.stop()


def test_proxy_credentials_never_reach_rows_or_output(tmp_path: Path) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()   # nothing listens: the proxy connection is refused
    secret = "proxy-pass-7f3c91"
    models = f"models:\n  far:\n    base_url: http://{TEST_HOST}:9/v1\n    model: far-1\n    max_retries: 0\n"
    rows, output = _run(tmp_path, models, {"HTTP_PROXY": f"http://alice:{secret}@127.0.0.1:{port}"})
    assert rows.loc["far", "error_kind"] == "connection"
    assert f"127.0.0.1:{port}" in rows.loc["far", "error_message"]   # it was the proxy that could not be reached
    for path in (tmp_path / "results").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"the proxy password reached {path.name}"
    assert secret not in output
