"""promptfoo and `engine run` send the same requests and give the same verdicts on the same config and server.

promptfoo itself (npm package `promptfoo`, installed by .ci/run into ~/.cache/engine-npm) runs a config against
tests/fake_openai.py on loopback; our importer converts the same config and `engine run` asks the same server.
Each test asks one question by its key, and the scripted reply sits on each assert's edges (case, surrounding
spaces, numbers, JSON in prose and fences, weights and thresholds). tests/fixtures/promptfoo/ covers the plain
asserts; tests/fixtures/promptfoo_features/ the prompts promptfoo renders (chat JSON with Nunjucks tags, image
parts, file vars, vars naming vars, filters), python asserts, transforms and a javascript assert that is not
carried: there, the messages each tool sent are compared too, and a test whose check was not carried is an
error in the engine, never a pass.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.importers.promptfoo import import_promptfoo
from tests.engine_proc import run_engine
from tests.fake_openai import FakeOpenAI, Reply
from tests.images_util import write_png

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "promptfoo"
FEATURES = FIXTURE.parent / "promptfoo_features"
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


FEATURE_ANSWERS = {
    "py-bool": "Paris.",
    "py-graded": "Paris.",
    "py-graded-fail": "Lyon.",
    "py-inline": "Paris!",
    "py-score": "one two",
    "py-not": "Sure",
    "js-short": "a short answer",
    "shout": "PARIS!",
    "padded": "  exact words \n",
    "shout-upper": "paris, then",
    "first-word": "Paris is nice",
    "fenced-json": '```json\n{"ok": true}\n```',
    "bare-json": '{"ok": true}',
    "json-array": "[1, 2]",
    "data-file": 'I saw {"ID": 7, "tags": ["A", "b"]}',
}


def _key(body: dict[str, Any]) -> str:
    found = re.search(r"Q: ([\w-]+)", json.dumps(body.get("messages") or body.get("prompt")))
    return found.group(1) if found else ""


def _reply(body: dict[str, Any]) -> Reply:
    return Reply(content={**ANSWERS, **FEATURE_ANSWERS}.get(_key(body), "unscripted question"))


@pytest.fixture
def server():
    fake = FakeOpenAI().start()
    fake.responder = _reply
    yield fake
    fake.stop()


def _config(folder: Path, base_url: str, fixture: Path = FIXTURE) -> Path:
    for source in fixture.iterdir():
        shutil.copy(source, folder / source.name)
    config = folder / "promptfooconfig.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("http://127.0.0.1:8000/v1", base_url),
                      encoding="utf-8")
    return config


def _run_promptfoo(config: Path, home: Path) -> list[dict[str, Any]]:
    """promptfoo's results for a config (python asserts run by this interpreter)."""
    out = config.parent / "promptfoo-results.json"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "PROMPTFOO_CONFIG_DIR": str(home / ".promptfoo"),
           "PROMPTFOO_PYTHON": sys.executable, **QUIET}
    done = subprocess.run([str(PROMPTFOO), "eval", "-c", str(config), "-o", str(out), "--no-cache",
                           "--no-progress-bar", "--no-table", "--no-write", "-j", "1"],
                          check=False, cwd=config.parent, env=env, capture_output=True, text=True, timeout=600)
    assert out.exists(), f"promptfoo wrote no results (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    results: list[dict[str, Any]] = json.loads(out.read_text(encoding="utf-8"))["results"]["results"]
    return results


def _promptfoo_verdicts(config: Path, home: Path) -> dict[str, bool]:
    return {r["vars"]["question"]: bool(r["success"]) for r in _run_promptfoo(config, home)}


def _run_engine(config: Path, tmp: Path) -> pd.DataFrame:
    imported = import_promptfoo(config, tmp / "suites")
    assert imported.models is not None
    done = run_engine("run", str(tmp / "suites"), "--models", str(imported.models), "--out", str(tmp / "results"),
                      env={**os.environ, "OPENAI_API_KEY": QUIET["OPENAI_API_KEY"]})
    assert done.returncode in (0, 1), done.stderr
    rows = pd.read_parquet(tmp / "results" / "latest")
    rows["question"] = rows["prompt"].astype(str).str.extract(r"Q: ([\w-]+)")[0]
    return rows


def _engine_verdicts(config: Path, tmp: Path) -> dict[str, bool]:
    rows = _run_engine(config, tmp)
    return dict(zip(rows["question"], rows["passed"].astype(bool), strict=True))


@pytest.mark.skipif(not PROMPTFOO.exists(), reason=f"promptfoo is not installed at {PROMPTFOO} (.ci/run installs "
                    "it: npm install --prefix ~/.cache/engine-npm promptfoo@0.121.20)")
def test_promptfoo_and_the_engine_agree_on_every_verdict(tmp_path: Path, server: FakeOpenAI) -> None:
    config = _config(tmp_path, server.base_url)
    theirs = _promptfoo_verdicts(config, tmp_path)
    ours = _engine_verdicts(config, tmp_path)
    assert set(theirs) == set(ANSWERS)
    assert ours == theirs
    assert 8 <= sum(theirs.values()) <= len(theirs) - 8  # both outcomes well represented


def _sent(server: FakeOpenAI) -> set[str]:
    """The messages of the requests the server got, each as canonical JSON (the engine's response cache asks
    the same messages once)."""
    return {json.dumps(body.get("messages"), sort_keys=True) for body in server.requests}


@pytest.mark.skipif(not PROMPTFOO.exists(), reason=f"promptfoo is not installed at {PROMPTFOO}")
def test_the_features_config_asks_the_same_and_never_passes_what_promptfoo_fails(tmp_path: Path,
                                                                                 server: FakeOpenAI) -> None:
    config = _config(tmp_path, server.base_url, FEATURES)
    write_png(tmp_path / "pixel.png")
    results = _run_promptfoo(config, tmp_path)
    asked_by_promptfoo = _sent(server)
    server.reset()
    server.responder = _reply
    rows = _run_engine(config, tmp_path)
    # The same questions, word for word: chat JSON rendered through its Nunjucks tags, the image as the same
    # data URL, file vars and vars naming vars filled in (the one test promptfoo cannot render is not sent by
    # either: promptfoo fails it, the import leaves it out).
    assert _sent(server) == asked_by_promptfoo
    prompt_of = {"text": "importer-features-text", "chat": "importer-features-chat",
                 "vision": "importer-features-vision"}
    theirs = {(prompt_of[r["prompt"]["label"].split(":")[0]], r["vars"]["question"]): bool(r["success"])
              for r in results}
    ours = {(suite, q): (passed, kind) for suite, q, passed, kind in
            zip(rows["suite"], rows["question"], rows["passed"], rows["error_kind"], strict=True)}
    not_carried = {key for key, (_, kind) in ours.items() if not pd.isna(kind)}
    assert {q for _, q in not_carried} == {"js-short", "first-word"}     # errors, never passes
    carried = {key: bool(passed) for key, (passed, kind) in ours.items() if pd.isna(kind)}
    assert carried == {key: theirs[key] for key in carried}
    assert len(carried) == 3 * len(FEATURE_ANSWERS) - 2 * 3 - 1 and 10 <= sum(carried.values()) <= len(carried) - 6
