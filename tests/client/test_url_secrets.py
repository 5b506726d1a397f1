"""Secrets in `base_url`, end to end through `engine run`: a query string reaches every endpoint after its
method path, and no credential - userinfo plain, percent-encoded or as the base64 of an echoed
`Authorization: Basic`, a query value, an API key sent in a header or the query - reaches the run folder
(manifest, Parquet, journal, logs) or the output, even when the server echoes its request line and headers.
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from engine.client.request import endpoint_url
from engine.judge.embeddings import embeddings_url
from engine.model.model_config import ModelConfig
from tests.engine_proc import run_engine
from tests.fake_openai import FakeOpenAI, Reply

USER, PASSWORD = "us@er", "p@ss-w0rd-Zq81"      # percent-encoded in the URL: us%40er:p%40ss-w0rd-Zq81
QUERY_SECRET = "qs-9f8e7d6c5b4a"               # ?api-key=... written into base_url (warned about)
API_KEY = "sk-test-" + "Kx7Pq2Lm9Wv4" * 2       # from api_key_env, sent in a header or the query
SUITE = ("suite: s\ntests:\n  - id: q\n    prompt: \"capital of France?\"\n    golden: Paris\n"
         "    eval: {all: [{contains: Paris}, {similar: Paris}]}\n")


def _engine(*args: str, env: dict[str, str] | None = None) -> str:
    done = run_engine(*args, env=dict(os.environ) | (env or {}))
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def _project(tmp_path: Path, models: str) -> tuple[Path, Path]:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "s.yaml").write_text(SUITE)
    (tmp_path / "models.yaml").write_text(models)
    return tmp_path / "suites", tmp_path / "models.yaml"


def _run_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and p.name != "latest"]
    return run_dir


def test_an_api_version_query_reaches_every_endpoint_after_its_method_path(tmp_path: Path,
                                                                          fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(content="Paris")
    base = f"{fake_openai.base_url}?api-version=2024-06-01"
    suites, models = _project(tmp_path, (
        f"defaults: {{embedding: embedder}}\nmodels:\n"
        f"  chat:\n    base_url: {base}\n    model: chat-1\n"
        f"  plain:\n    base_url: {base}\n    model: plain-1\n    api: completions\n"
        f"  farm:\n    base_urls: [\"{base}\", \"{fake_openai.base_url}/?api-version=2024-06-01\"]\n    model: farm-1\n"
        f"  embedder:\n    base_url: {base}\n    model: embed-1\n"))
    out = _engine("run", str(suites), "--models", str(models), "--model", "chat", "--model", "plain", "--model", "farm",
                  "--out", str(tmp_path / "out"), "--no-cache", "--quiet")
    rows = pd.read_parquet(_run_dir(tmp_path / "out")).set_index("model")
    assert rows["passed"].all(), rows[["error_message"]]
    assert sorted(set(fake_openai.paths)) == ["/v1/chat/completions?api-version=2024-06-01",
                                              "/v1/completions?api-version=2024-06-01",
                                              "/v1/embeddings?api-version=2024-06-01"]
    assert rows.loc["farm", "served_by"].endswith("/v1?api-version=***") or \
        rows.loc["farm", "served_by"].endswith("/v1/?api-version=***")
    assert "2024-06-01" not in out


def test_the_url_helpers_keep_the_query_after_the_method_path() -> None:
    model = ModelConfig(name="m", model="x", base_url="https://h/openai/deployments/d/?api-version=1#frag")
    assert endpoint_url(model) == "https://h/openai/deployments/d/chat/completions?api-version=1"
    assert endpoint_url(model, "http://r:1/v1?a=b") == "http://r:1/v1/chat/completions?a=b"
    assert embeddings_url(model) == "https://h/openai/deployments/d/embeddings?api-version=1"


def _secret_forms() -> list[str]:
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    return [PASSWORD, "p%40ss-w0rd-Zq81", basic, basic.rstrip("="), QUERY_SECRET, API_KEY, "2024-06-01"]


def test_no_secret_reaches_the_run_folder_or_the_output_when_the_server_echoes_them(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(fault="echo", echo_status=400)
    host = f"127.0.0.1:{fake_openai.port}"
    suites, models = _project(tmp_path, (
        f"defaults: {{embedding: embedder}}\nmodels:\n"
        f"  basic:\n    base_url: http://us%40er:p%40ss-w0rd-Zq81@{host}/v1?api-version=2024-06-01&api-key={QUERY_SECRET}\n"
        f"    model: basic-1\n"
        f"  azure:\n    base_url: http://{host}/v1?api-version=2024-06-01\n    model: azure-1\n"
        f"    api_key_env: H9_TEST_KEY\n    api_key_header: api-key\n"
        f"  google:\n    base_url: http://{host}/v1?api-version=2024-06-01\n    model: google-1\n"
        f"    api_key_env: H9_TEST_KEY\n    api_key_query: key\n"
        f"  farm:\n    base_urls: [\"http://{host}/v1?api-version=2024-06-01&sig={QUERY_SECRET}\"]\n    model: farm-1\n"
        f"  embedder:\n    base_url: http://{host}/v1\n    model: embed-1\n"))
    warned = run_engine("validate", str(suites), "--models", str(models), "--no-golden-check",
                        env=dict(os.environ))
    assert "warning: base_url carries the query parameter 'api-key'" in warned.stderr and "api_key_env" in warned.stderr
    assert "warning: base_urls[0] carries the query parameter 'sig'" in warned.stderr
    out = _engine("run", str(suites), "--models", str(models), "--model", "basic", "--model", "azure",
                  "--model", "google", "--model", "farm", "--out", str(tmp_path / "out"), "--no-cache",
                  env={"H9_TEST_KEY": API_KEY})
    run_dir = _run_dir(tmp_path / "out")
    rows = pd.read_parquet(run_dir).set_index("model")
    # The echo came back: each row's error holds the request line and headers, masked.
    assert set(rows["error_kind"]) == {"http_400"}
    assert "POST /v1/chat/completions?api-version=***&api-key=***" in rows.loc["basic", "error_message"]
    assert "Authorization: Basic ***" in rows.loc["basic", "error_message"]
    assert "api-key: ***" in rows.loc["azure", "error_message"]
    assert "&key=***" in rows.loc["google", "error_message"]
    # The requests carried them: the key in the header or the query, the api-version in the path.
    assert f"/v1/chat/completions?api-version=2024-06-01&key={API_KEY}" in fake_openai.paths
    files = [p.read_bytes().decode("utf-8", "replace") for p in run_dir.rglob("*") if p.is_file()]
    texts = [out, warned.stdout + warned.stderr, rows.to_json(date_format="iso"), *files]
    for form in _secret_forms():
        assert not any(form in text for text in texts), form


ODD_KEY = "sk-Pl+us/Sl=ash+Kx7Pq2Lm9Wv4=="   # `+`, `/` and `=`: percent-encoded in a query, `+` read back as a space


def _odd_key_forms() -> list[str]:
    """The forms the echo gives the key in: plain, percent-encoded (either case of hex), `+` as a space, and every
    run of its base64 that a longer encoded text holds whatever the key's position in it (mod 3)."""
    forms = [ODD_KEY, ODD_KEY.replace("+", " ")]
    for safe in ("", "/"):   # the URL library may leave `/` as it is
        encoded = quote(ODD_KEY, safe=safe)
        forms += [encoded, re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), encoded)]
    data = ODD_KEY.encode()
    for skip in range(3):
        whole = (len(data) - skip) // 3 * 3
        forms.append(base64.b64encode(data[skip:skip + whole]).decode())
    return forms


def test_every_form_of_a_key_is_masked_when_the_server_echoes_it_in_an_answer(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda body: Reply(fault="echo_answer")
    host = f"127.0.0.1:{fake_openai.port}"
    suites, models = _project(tmp_path, (
        "defaults: {embedding: embedder}\nmodels:\n"
        f"  embedder:\n    base_url: http://{host}/v1\n    model: embed-1\n"
        f"  bearer:\n    base_url: http://{host}/v1\n    model: bearer-1\n    api_key_env: H9_ODD_KEY\n"
        f"  azure:\n    base_url: http://{host}/v1\n    model: azure-1\n"
        f"    api_key_env: H9_ODD_KEY\n    api_key_header: api-key\n"
        f"  google:\n    base_url: http://{host}/v1\n    model: google-1\n"
        f"    api_key_env: H9_ODD_KEY\n    api_key_query: key\n"))
    out = _engine("run", str(suites), "--models", str(models), "--model", "bearer", "--model", "azure",
                  "--model", "google", "--out", str(tmp_path / "out"), "--no-cache", env={"H9_ODD_KEY": ODD_KEY})
    run_dir = _run_dir(tmp_path / "out")
    rows = pd.read_parquet(run_dir).set_index("model")
    assert rows["error_kind"].isna().all()
    # The key was sent percent-encoded in the query, and the answers echo it in every form.
    assert any(path.startswith("/v1/chat/completions?key=sk-Pl%2Bus") for path in fake_openai.paths)
    assert "POST /v1/chat/completions?key=***" in rows.loc["google", "answer"]
    assert "Authorization: Bearer ***" in rows.loc["bearer", "answer"]
    assert "api-key: ***" in rows.loc["azure", "answer"]
    for name in ("bearer", "azure"):   # the key in a header: in the base64 of the echoed headers too
        assert "***" in rows.loc[name, "answer"].split("X-Echoed: ")[1]
    files = [p.read_bytes().decode("utf-8", "replace") for p in run_dir.rglob("*") if p.is_file()]
    texts = [out, rows.to_json(date_format="iso"), *files]
    for form in _odd_key_forms():
        assert not any(form in text for text in texts), form
