"""promptfoo and `engine run` give the same pass/fail verdicts on the same config and the same scripted server.

promptfoo itself (npm package `promptfoo`, installed by .ci/run into ~/.cache/engine-npm) runs
tests/fixtures/promptfoo/promptfooconfig.yaml against tests/fake_openai.py on loopback; our importer converts
the same config and `engine run` asks the same server. Each test asks one question by its key, and ANSWERS
holds the scripted reply, chosen to sit on each assert's edges (case, surrounding spaces, numbers, JSON in
prose, weights and thresholds).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.importers.promptfoo import import_promptfoo
from tests.engine_proc import run_engine
from tests.fake_openai import FakeOpenAI, Reply

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "promptfoo"
PROMPTFOO = Path(os.environ.get("ENGINE_PROMPTFOO", Path.home() / ".cache/engine-npm/node_modules/.bin/promptfoo"))
# Everything promptfoo would send elsewhere, off: telemetry, the update check, sharing, remote generation.
QUIET = {"PROMPTFOO_DISABLE_TELEMETRY": "1", "PROMPTFOO_DISABLE_UPDATE": "1", "PROMPTFOO_DISABLE_SHARING": "1",
         "PROMPTFOO_DISABLE_REMOTE_GENERATION": "1", "PROMPTFOO_DISABLE_REDTEAM_REMOTE_GENERATION": "1",
         "PROMPTFOO_CACHE_ENABLED": "false", "PROMPTFOO_DISABLE_ERROR_LOG": "1", "NO_PROXY": "*",
         "OPENAI_API_KEY": "sk-test-not-a-real-key"}
ANSWERS = {
    "capital": "The capital of France is Paris.",
    "lower-paris": "the capital is paris",
    "upper-paris": "PARIS, of course",
    "forty-two": "42",
    "forty-two-newline": "42\n",
    "forty-two-float": "42.0",
    "yes-answer": "Yes, indeed.",
    "spaced-yes": "  Yes",
    "order": "Order #12345 confirmed",
    "person": '{"name": "Ada", "age": 36}',
    "prose": "I cannot produce that.",
    "embedded-json": 'Here you go: {"ok": true} and that is all',
    "colour": "I like green",
    "two-colours": "red and blue",
    "three-colours": "RED, Green and blue",
    "purple": "purple",
    "refusal": "As an AI, I will not",
    "half": "alpha only",
    "weightless": "alpha without the other",
    "no-answer": "No.",
    "expand-a": "Expanded!",
    "expand-b": "not this one",
    "yaml-file": "one, two and FOUR",
    "csv-hello": "Hello there",
    "csv-colour": "GREEN",
    "csv-exact": "exact words ",
}


def _reply(body: dict[str, Any]) -> Reply:
    text = json.dumps(body.get("messages") or body.get("prompt"))
    key = re.search(r"Q: ([\w-]+)", text)
    return Reply(content=ANSWERS.get(key.group(1) if key else "", "unscripted question"))


@pytest.fixture
def server():
    fake = FakeOpenAI().start()
    fake.responder = _reply
    yield fake
    fake.stop()


def _config(folder: Path, base_url: str) -> Path:
    for source in FIXTURE.iterdir():
        shutil.copy(source, folder / source.name)
    config = folder / "promptfooconfig.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("http://127.0.0.1:8000/v1", base_url),
                      encoding="utf-8")
    return config


def _promptfoo_verdicts(config: Path, home: Path) -> dict[str, bool]:
    out = config.parent / "promptfoo-results.json"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "PROMPTFOO_CONFIG_DIR": str(home / ".promptfoo"),
           **QUIET}
    done = subprocess.run([str(PROMPTFOO), "eval", "-c", str(config), "-o", str(out), "--no-cache",
                           "--no-progress-bar", "--no-table", "--no-write", "-j", "1"],
                          check=False, cwd=config.parent, env=env, capture_output=True, text=True, timeout=600)
    assert out.exists(), f"promptfoo wrote no results (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    results = json.loads(out.read_text(encoding="utf-8"))["results"]["results"]
    return {r["vars"]["question"]: bool(r["success"]) for r in results}


def _engine_verdicts(config: Path, tmp: Path) -> dict[str, bool]:
    imported = import_promptfoo(config, tmp / "suites")
    assert imported.models is not None
    done = run_engine("run", str(tmp / "suites"), "--models", str(imported.models), "--out", str(tmp / "results"),
                      env={**os.environ, "OPENAI_API_KEY": QUIET["OPENAI_API_KEY"]})
    assert done.returncode in (0, 1), done.stderr
    rows = pd.read_parquet(tmp / "results" / "latest")
    questions = rows["prompt"].astype(str).str.extract(r"Q: ([\w-]+)")[0]
    return dict(zip(questions, rows["passed"].astype(bool), strict=True))


@pytest.mark.skipif(not PROMPTFOO.exists(), reason=f"promptfoo is not installed at {PROMPTFOO} (.ci/run installs "
                    "it: npm install --prefix ~/.cache/engine-npm promptfoo@0.121.20)")
def test_promptfoo_and_the_engine_agree_on_every_verdict(tmp_path: Path, server: FakeOpenAI) -> None:
    config = _config(tmp_path, server.base_url)
    theirs = _promptfoo_verdicts(config, tmp_path)
    ours = _engine_verdicts(config, tmp_path)
    assert set(theirs) == set(ANSWERS)
    assert ours == theirs
    assert 8 <= sum(theirs.values()) <= len(theirs) - 8  # both outcomes well represented
