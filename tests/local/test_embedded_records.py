"""Every record kind on the embedded models, and the tutorial's own run (marked local_model: `make test-local`).

The record kinds read what a run recorded of its call: usage (for `cost`, `tokens`, `usage_reported`), the
times, the calls. On the embedded models each must be scored, never an error row: usage reported streamed or
not, a `tool_choice` naming one tool honoured by the chat formats (refused by `engine validate` for the
completions API, which carries no tools), and a conversation that starts
mid-way with `content: null` (docs/suite-format.md's own example) taken by the server. The tutorial's run
(docs/tutorial.md, its files as the page writes them) must end with no error row and no call near a timeout.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.local.server_http import post, stream

pytestmark = pytest.mark.local_model

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "embedded"

MODELS = """\
models:
  smollm2:
    builtin: smollm2-135m
    price: {input: 0.1, output: 0.4}
  smollm2-whole:                  # the same server, not streamed
    builtin: smollm2-135m
    stream: false
    price: {input: 0.1, output: 0.4}
  gemma:
    builtin: gemma-3-270m
    price: {input: 0.1, output: 0.4}
  gemma-complete:
    builtin: gemma-3-270m
    api: completions
    price: {input: 0.1, output: 0.4}
"""


def _block(doc: Path, marker: str) -> str:
    """The YAML block after `<!-- example: MARKER -->` in a doc page."""
    found = re.search(rf"<!-- example: {marker} -->\n```yaml\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert found, f"no example {marker!r} in {doc}"
    return found.group(1)


def _engine(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", *args], check=False, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def test_every_record_kind_is_scored_on_the_embedded_models(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="needs the [local] extra: pip install -e '.[local]'")
    import pandas as pd

    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "record_kinds.yaml").write_text((FIXTURES / "record_kinds.yaml").read_text())
    (suites / "midway.yaml").write_text(_block(ROOT / "docs" / "suite-format.md", "midway"))
    (tmp_path / "models.yaml").write_text(MODELS)
    checked = _engine("validate", "suites", "--models", "models.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    # validate says the suite's max_tokens is raised by the embedded entries' floor (the run sends 64)
    assert "record_kinds.yaml:12:1: note: max_tokens 24 of 7 tests (first: 'cost-within-budget') is raised " \
           "to 64 for gemma, gemma-complete, smollm2, smollm2-whole" in checked.stderr, checked.stderr
    # ... and that the completions API cannot honour a named tool_choice (its prompt carries no tools)
    assert "record_kinds.yaml:31:1: warning: test 'lookup-named' demands a tool call (`tool_choice: find_slots`), " \
           "which the completions-API model(s) gemma-complete cannot make" in checked.stderr, checked.stderr
    done = _engine("run", "suites", "--models", "models.yaml", "--out", "results", "--quiet", "--no-cache",
                   cwd=tmp_path)
    assert done.returncode in (0, 1), done.stdout + done.stderr   # 1: a small model fails some tests
    frame = pd.read_parquet((tmp_path / "results" / "latest").resolve())
    assert len(frame) == 8 * 4
    errors = frame[frame["error_kind"].notna()]
    assert errors.empty, errors[["model", "test_id", "error_kind", "error_message"]].to_string()
    # usage for every call, streamed or not, counted by the server; so every call is priced
    assert set(frame["usage_source"]) == {"server"}
    assert (frame["prompt_tokens"] > 0).all() and (frame["completion_tokens"] >= 0).all()
    assert frame["cost"].notna().all()
    by = frame.set_index(["model", "test_id"])
    # a tool_choice naming one tool: the tool-calling format calls that tool, once
    for model in ("smollm2", "smollm2-whole"):
        calls = by.loc[(model, "lookup-named"), "tool_calls"]
        assert [c["name"] for c in calls] == ["find_slots"], calls
        assert by.loc[(model, "lookup-named"), "passed"]
        # the docs' mid-way conversation, content: null and a named tool under another API name
        booked = by.loc[(model, "book-after-lookup"), "tool_calls"]
        assert [c["name"] for c in booked] == ["calendar.book"], booked
    # the floor of an embedded entry that sets none: the suite's 24 raised to 64
    assert set(frame["max_tokens"]) == {64}


def test_a_stream_reports_the_same_usage_as_a_whole_reply_and_says_its_failure(tmp_path: Path) -> None:
    """Greedy, the same request streamed and whole: the same counts. A request the chat format refuses after
    the stream began ends with an `error` event carrying the reason (not a stream cut short)."""
    pytest.importorskip("llama_cpp", reason="needs the [local] extra: pip install -e '.[local]'")
    from engine.local import serve_builtin

    with serve_builtin("smollm2-135m", log_path=tmp_path / "server.log", alias="smollm2-135m", notify=None) as url:
        body: dict[str, Any] = {"model": "smollm2-135m", "temperature": 0, "max_tokens": 12,
                                "messages": [{"role": "user", "content": "Name a colour."}]}
        whole = post(url + "/chat/completions", body)["usage"]
        events = stream(url + "/chat/completions", body)
        assert events[-1]["choices"] == [] and events[-1]["usage"] == whole
        assert whole["prompt_tokens"] > 0 and 0 < whole["completion_tokens"] <= 12
        tool = {"type": "function", "function": {"name": "find_slots", "parameters": {"type": "object"}}}
        refused = stream(url + "/chat/completions", {
            **body, "tools": [tool], "tool_choice": {"type": "function", "function": {"name": "book"}}})
        assert "book" in refused[-1]["error"]["message"] and "find_slots" in refused[-1]["error"]["message"]


def test_the_tutorials_run_has_no_error_rows_and_no_call_near_its_timeout(tmp_path: Path) -> None:
    """docs/tutorial.md followed as written: its three suites into `suites/`, its models file, its two runs."""
    pytest.importorskip("llama_cpp", reason="needs the [local] extra: pip install -e '.[local]'")
    import pandas as pd

    page = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
    files = dict(re.findall(r"Write `([\w-]+\.yaml)`[^\n]*:\n\n```yaml\n(.*?)```", page, re.S))
    assert sorted(files) == ["support-cases.yaml", "support-tools.yaml", "support.yaml"]
    (tmp_path / "suites").mkdir()
    for name, text in files.items():
        (tmp_path / "suites" / name).write_text(text)
    models = re.search(r"```yaml\n# models.yaml\n(.*?)```", page, re.S)
    assert models
    (tmp_path / "models.yaml").write_text(models.group(1))
    commands = re.search(r"```sh\n(engine run .*?)```", page, re.S)
    assert commands
    runs = [shlex.split(line.split("#")[0]) for line in commands.group(1).splitlines() if line.strip()]
    assert [run[:2] for run in runs] == [["engine", "run"], ["engine", "run"]]
    for run in runs:
        began = time.monotonic()
        done = _engine(*run[1:], cwd=tmp_path)
        seconds = time.monotonic() - began
        assert done.returncode in (0, 1), done.stdout + done.stderr
    print(f"the tutorial's run on the embedded models: {seconds:.1f} s")   # the Done-when figure, for the record
    frame = pd.read_parquet((tmp_path / "results" / "latest").resolve())
    assert sorted(set(frame["model"])) == ["gemma", "smollm2"]
    errors = frame[frame["error_kind"].notna()]
    assert errors.empty, errors[["model", "test_id", "error_kind", "error_message"]].to_string()
    # no call rambled towards the timeout: each within the embedded floor's tokens, far under its 60 s
    assert (frame["completion_tokens"] <= 64).all() and (frame["max_tokens"] == 64).all()
