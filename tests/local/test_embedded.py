"""The real embedded model end to end (marked local_model: `make test-local`, and CI, run it).

Starts gemma-3-270m under llama-cpp-python, checks it answers under its alias, runs a tiny suite
through `engine run` in a real subprocess, reads the Parquet, and checks no server process is left.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.local.procs import pid_gone

pytestmark = pytest.mark.local_model

TINY_SUITE = """\
# yaml-language-server: $schema=../schemas/suite.schema.json
suite: tiny
tests:
  - id: capital-japan
    prompt: |-
      Country: France
      Capital: Paris

      Country: Japan
      Capital:
    golden: Tokyo
    max_tokens: 8
    eval: {regex: '^\\s*Tokyo\\b'}
"""


def _port_closed(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _server_pid(log: Path) -> int:
    # uvicorn logs "Started server process [PID]" once the server runs.
    match = re.search(r"Started server process \[(\d+)\]", log.read_text(errors="replace"))
    assert match, f"no server start in {log}"
    return int(match.group(1))


def test_serve_builtin_answers_under_its_alias_and_leaves_nothing(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="needs the [local] extra: pip install -e '.[local]'")
    from engine.local import serve_builtin

    log = tmp_path / "server.log"
    with serve_builtin("gemma-3-270m", log_path=log, alias="gemma-test") as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        body = json.dumps({"model": "gemma-test", "prompt": "Country: France\nCapital:", "max_tokens": 4,
                           "temperature": 0}).encode()
        request = urllib.request.Request(url + "/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as resp:
            answer = json.load(resp)
        pid = _server_pid(log)
    assert answer["model"] == "gemma-test"
    assert "Paris" in answer["choices"][0]["text"]
    assert pid_gone(pid), "the server process outlived the with block"
    assert _port_closed(port)


def test_engine_run_on_the_embedded_model_end_to_end(tmp_path: Path, repo_root: Path) -> None:
    pytest.importorskip("llama_cpp", reason="needs the [local] extra: pip install -e '.[local]'")
    import pandas as pd

    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "tiny.yaml").write_text(TINY_SUITE)
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "engine", "run", str(suites), "--out", str(out), "--max-tokens", "8",
         "--model", "gemma-complete", "--model", "gemma-chat", "--quiet"],
        check=False, cwd=repo_root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = (out / "latest").resolve()
    frame = pd.read_parquet(run_dir)
    assert sorted(frame["model"]) == ["gemma-chat", "gemma-complete"]
    assert set(frame["served_model"]) == {"gemma-3-270m"} and not frame["fallback"].any()
    assert frame["error_kind"].isna().all(), frame[["model", "error_kind", "error_message"]]
    # The greedy completions config answers this few-shot prompt (measured); chat mostly does not.
    complete = frame.set_index("model").loc["gemma-complete"]
    assert complete["passed"], complete["answer"]
    # the launcher's meter ends each stream with its usage, as the server counted it
    assert set(frame["usage_source"]) == {"server"} and (frame["completion_tokens"] > 0).all()
    logs = list(run_dir.glob("*.server.log"))
    assert logs, f"no server log in {run_dir}"
    assert pid_gone(_server_pid(logs[0])), "engine run left its model server running"
