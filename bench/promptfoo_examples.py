"""promptfoo's own example configs, run by promptfoo itself and by `engine import promptfoo` + `engine run` against
one scripted server: does any test pass in the engine that promptfoo fails, and how often do the verdicts agree?

Run: .venv/bin/python bench/promptfoo_examples.py EXAMPLES_DIR [--promptfoo PATH] [--only NAME ...] [--keep DIR]

EXAMPLES_DIR holds promptfoo example folders (copies of promptfoo's repository `examples/`; nothing of them is
committed here). Every `promptfooconfig*.yaml` under it is one config. Each runs in a copy of its folder whose
providers that are not OpenAI-compatible (anthropic:, replicate:, google:, ...) are dropped, since they would call
outside services; a config left with none is skipped and listed. promptfoo (`~/.cache/engine-npm`, as .ci/run
installs it) and the engine then ask the same scripted server (tests/fake_openai.py on loopback), which answers
deterministically from the request's last user message: the message echoed, as bare JSON, as fenced JSON, in
capitals, or as an apology, by a hash of the message. A grading request (promptfoo's llm-rubric prompt, the
engine's judge) is answered "pass" exactly when the text graded carries the mark the scripted answers put on two
of those five kinds; embeddings are bag-of-words counts, so `similar` is the same cosine on both sides.

Each (prompt, test, provider) promptfoo ran is matched to the engine's row by promptfoo's prompt and test indexes
(`Imported.prompt_suites`, `Imported.test_ids`) and the provider's name, and counted as: compared (both gave a
verdict: agree or not), not carried (a `not_carried` placeholder: an error row, never a pass), unscored (no
assert), left out (no row: a prompt the import could not make, a provider or prompt filter), or an engine error.
The table is printed as Markdown, with every disagreement after it; the exit status is 1 when a test passes in
the engine that promptfoo fails, or when the import raised anything but a ConfigError (a traceback).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
from ruamel.yaml import YAML  # noqa: E402

from engine.errors import ConfigError  # noqa: E402
from engine.importers.promptfoo import import_promptfoo  # noqa: E402
from tests.fake_openai import FakeOpenAI, Reply  # noqa: E402

PROMPTFOO = Path.home() / ".cache/engine-npm/node_modules/.bin/promptfoo"
QUIET = {"PROMPTFOO_DISABLE_TELEMETRY": "1", "PROMPTFOO_DISABLE_UPDATE": "1", "PROMPTFOO_DISABLE_SHARING": "1",
         "PROMPTFOO_DISABLE_REMOTE_GENERATION": "1", "PROMPTFOO_DISABLE_REDTEAM_REMOTE_GENERATION": "1",
         "PROMPTFOO_CACHE_ENABLED": "false", "PROMPTFOO_DISABLE_ERROR_LOG": "1", "NO_PROXY": "*",
         "OPENAI_API_KEY": "sk-test-not-a-real-key"}
MARK = "\u2713"   # the scripted answers' mark a scripted grader passes
_OPENAI = re.compile(r"^openai:(chat:|completion:)?[^:]+")


def _text_of(messages: Any) -> str:
    """The last user message's text (its text parts joined)."""
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content)
    return ""


def answer(body: dict[str, Any]) -> Reply:
    """The scripted server's deterministic answer to one chat request."""
    messages = body.get("messages") or [{"role": "user", "content": body.get("prompt", "")}]
    whole = "\n".join(str(m.get("content")) for m in messages if isinstance(m, dict))
    if '"reasoning"' in whole and '"grade"' in whole:                   # the engine's judge
        graded = "pass" if MARK in whole else "fail"
        return Reply(content=json.dumps({"reasoning": "scripted", "grade": graded}))
    if "<Rubric>" in whole or ("rubric" in whole.lower() and '"pass"' in whole):   # promptfoo's llm-rubric grader
        passed = MARK in whole
        return Reply(content=json.dumps({"reason": "scripted", "pass": passed, "score": 1.0 if passed else 0.0}))
    text = _text_of(messages)
    kind = int(hashlib.sha256(text.encode()).hexdigest(), 16) % 5
    if kind == 0:
        return Reply(content=f"{text} {MARK}")
    if kind == 1:
        return Reply(content=json.dumps({"answer": text, "ok": True}))
    if kind == 2:
        return Reply(content="```json\n" + json.dumps({"answer": text}) + "\n```")
    if kind == 3:
        return Reply(content=text.upper())
    return Reply(content=f"Sorry, I cannot help with that. {MARK}")


@dataclass
class Outcome:
    """One config's counts."""

    name: str
    rows: int = 0
    passes: int = 0   # compared rows promptfoo passes
    agree: int = 0
    engine_pass_promptfoo_fail: int = 0
    engine_fail_promptfoo_pass: int = 0
    not_carried: int = 0
    unscored: int = 0
    left_out: int = 0
    engine_error: int = 0
    traceback: bool = False
    skipped: str = ""
    dropped: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)

    @property
    def compared(self) -> int:
        return self.agree + self.engine_pass_promptfoo_fail + self.engine_fail_promptfoo_pass


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text.strip().lower()).strip("-.")


def _copy(config: Path, work: Path, outcome: Outcome) -> Path | None:
    """The config's folder copied into `work`, non-OpenAI providers dropped from the copy of the config."""
    shutil.copytree(config.parent, work, dirs_exist_ok=True)
    copy = work / config.name
    yaml = YAML(typ="rt")
    data = yaml.load(copy.read_text(encoding="utf-8"))
    key = "providers" if "providers" in data else "targets"
    providers = data.get(key)
    items = providers if isinstance(providers, list) else [providers]

    def ident(item: Any) -> str:
        if isinstance(item, dict):
            return str(item.get("id") or next(iter(item), ""))
        return str(item)

    kept = [p for p in items if _OPENAI.match(ident(p))]
    outcome.dropped = [ident(p) for p in items if not _OPENAI.match(ident(p))]
    if not kept:
        outcome.skipped = "no OpenAI-compatible provider"
        return None
    data[key] = kept
    with open(copy, "w", encoding="utf-8") as handle:
        yaml.dump(data, handle)
    return copy


def _promptfoo(config: Path, server: FakeOpenAI, promptfoo: Path) -> list[dict[str, Any]]:
    out = config.parent / "promptfoo-results.json"
    home = config.parent / ".home"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "PROMPTFOO_CONFIG_DIR": str(home / ".promptfoo"),
           "PROMPTFOO_PYTHON": sys.executable, "OPENAI_BASE_URL": server.base_url,
           "OPENAI_API_BASE_URL": server.base_url, **QUIET}
    subprocess.run([str(promptfoo), "eval", "-c", str(config), "-o", str(out), "--no-cache", "--no-progress-bar",
                    "--no-table", "--no-write", "-j", "4"], check=False, cwd=config.parent, env=env,
                   capture_output=True, text=True, timeout=1800)
    if not out.exists():
        return []
    results: list[dict[str, Any]] = json.loads(out.read_text(encoding="utf-8"))["results"]["results"]
    return results


def _engine(config: Path, work: Path, server: FakeOpenAI, outcome: Outcome) -> tuple[Any, pd.DataFrame | None]:
    try:
        imported = import_promptfoo(config, work / "imported")
    except ConfigError as exc:
        outcome.skipped = f"import refused: {str(exc).splitlines()[0][:120]}"
        return None, None
    except Exception:  # noqa: BLE001 - counted: the import must never raise anything but a ConfigError
        outcome.traceback = True
        outcome.skipped = "import raised: " + traceback.format_exc().strip().splitlines()[-1][:120]
        return None, None
    if imported.models is None or not imported.suites:
        outcome.skipped = "nothing imported (no model or no suite)"
        return imported, None
    yaml = YAML(typ="rt")
    models = yaml.load(imported.models.read_text(encoding="utf-8"))
    for entry in models["models"].values():
        entry["base_url"] = server.base_url
    models["models"]["scripted-judge"] = {"base_url": server.base_url, "model": "judge",
                                          "api_key_env": "OPENAI_API_KEY"}
    models["models"]["scripted-embedder"] = {"base_url": server.base_url, "model": "text-embedding-3-small",
                                             "api_key_env": "OPENAI_API_KEY"}
    models["defaults"] = {"judge": "scripted-judge", "embedding": "scripted-embedder"}
    with open(imported.models, "w", encoding="utf-8") as handle:
        yaml.dump(models, handle)
    names = [n for n in models["models"] if not n.startswith("scripted-")]
    done = subprocess.run([sys.executable, "-m", "engine", "run", str(work / "imported"), "--models",
                           str(imported.models), "--out", str(work / "results"), "--no-cache", "--quiet",
                           *[a for n in names for a in ("--model", n)]],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "OPENAI_API_KEY": QUIET["OPENAI_API_KEY"]})
    if done.returncode not in (0, 1):
        outcome.skipped = f"engine run failed: {done.stderr.strip().splitlines()[-1][:120] if done.stderr else ''}"
        return imported, None
    return imported, pd.read_parquet(work / "results" / "latest")


def _classify(results: list[dict[str, Any]], imported: Any, rows: pd.DataFrame | None, outcome: Outcome) -> None:
    by_key: dict[tuple[str, str, str], dict[str, Any]] = {}
    if rows is not None:
        for row in rows.to_dict("records"):
            by_key[(str(row["suite"]), re.sub(r"\[0\]$", "", str(row["test_id"])), str(row["model"]))] = row
    # promptfoo numbers its columns provider by provider, each provider's prompts in order: promptIdx is
    # provider * prompts + prompt (a provider's `prompts:` filter would shift them: its rows count as left out).
    prompts = len(imported.prompt_suites) if imported is not None else 0
    models = list(dict.fromkeys(str(m) for m in rows["model"])) if rows is not None else []
    models = imported_models if (imported_models := _model_order(imported)) else models
    for result in results:
        outcome.rows += 1
        promptfoo_pass = bool(result.get("success"))
        provider_index, prompt_index = divmod(int(result["promptIdx"]), prompts) if prompts else (0, 0)
        model = models[provider_index] if provider_index < len(models) else ""
        suite = imported.prompt_suites[prompt_index] if imported is not None and prompts else None
        test = (imported.test_ids[result["testIdx"]]
                if imported is not None and result["testIdx"] < len(imported.test_ids) else None)
        row = by_key.get((str(suite), str(test), model)) if suite and test else None
        if row is None:
            outcome.left_out += 1
            continue
        kinds = {node["kind"] for node in row["evaluators"]} if row["evaluators"] is not None else set()
        where = f"{suite} {test} {model}"
        if "not_carried" in kinds:
            outcome.not_carried += 1
            if pd.notna(row["passed"]) and bool(row["passed"]):   # impossible by design: counted as a false pass
                outcome.engine_pass_promptfoo_fail += 1
        elif "none" in kinds:
            outcome.unscored += 1
        elif pd.notna(row["error_kind"]):
            outcome.engine_error += 1
        else:
            outcome.passes += promptfoo_pass
            ours = bool(row["passed"])
            if ours == promptfoo_pass:
                outcome.agree += 1
            elif ours:
                outcome.engine_pass_promptfoo_fail += 1
                said = result.get("error") or (result.get("gradingResult") or {}).get("reason")
                outcome.disagreements.append(f"{outcome.name}: {where}: engine passes, promptfoo fails: "
                                             f"{str(said)[:160]}")
            else:
                outcome.engine_fail_promptfoo_pass += 1
                said = str(row["evaluators"][0]["reason"])[:160]
                outcome.disagreements.append(f"{outcome.name}: {where}: engine fails ({said}), promptfoo passes")


def _model_order(imported: Any) -> list[str]:
    """The imported models in the config's provider order (the scripted judge and embedder left out)."""
    if imported is None or imported.models is None:
        return []
    names = YAML(typ="safe", pure=True).load(imported.models.read_text(encoding="utf-8"))["models"]
    return [n for n in names if not n.startswith("scripted-")]


def run(examples: Path, promptfoo: Path, only: list[str], keep: Path | None) -> list[Outcome]:
    configs = sorted(examples.rglob("promptfooconfig*.yaml"))
    outcomes = []
    base = keep or Path(tempfile.mkdtemp(prefix="promptfoo-examples-"))
    for config in configs:
        name = config.parent.relative_to(examples).as_posix() + ("" if config.name == "promptfooconfig.yaml"
                                                                 else f"/{config.name}")
        if only and not any(o in name for o in only):
            continue
        outcome = Outcome(name)
        outcomes.append(outcome)
        work = base / _slug(name)
        shutil.rmtree(work, ignore_errors=True)
        copy = _copy(config, work, outcome)
        if copy is None:
            continue
        server = FakeOpenAI().start()
        try:
            server.responder = answer
            results = _promptfoo(copy, server, promptfoo)
            server.responder = answer
            imported, rows = _engine(copy, work, server, outcome)
            if not results and not outcome.skipped:
                outcome.skipped = "promptfoo wrote no results"
            _classify(results, imported, rows, outcome)
        finally:
            server.stop()
        print(f"{name}: {outcome.rows} rows, {outcome.compared} compared, {outcome.agree} agree"
              + (f" ({outcome.skipped})" if outcome.skipped else ""), file=sys.stderr, flush=True)
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    head = ("| config | promptfoo rows | compared (promptfoo passes) | agree | engine pass, promptfoo fail "
            "| engine fail, promptfoo pass | not carried | unscored | left out | engine error | note |\n"
            + "|---" * 11 + "|")
    lines = [head]
    for o in outcomes:
        note = o.skipped or (f"dropped {', '.join(o.dropped)}" if o.dropped else "")
        lines.append(f"| {o.name} | {o.rows} | {o.compared} ({o.passes}) | {o.agree} | "
                     f"{o.engine_pass_promptfoo_fail} | {o.engine_fail_promptfoo_pass} | {o.not_carried} | "
                     f"{o.unscored} | {o.left_out} | {o.engine_error} | {note}{' TRACEBACK' if o.traceback else ''} |")
    total = Outcome("**total**")
    for o in outcomes:
        for name in ("rows", "passes", "agree", "engine_pass_promptfoo_fail", "engine_fail_promptfoo_pass",
                     "not_carried", "unscored", "left_out", "engine_error"):
            setattr(total, name, getattr(total, name) + getattr(o, name))
    share = f"{100 * total.agree / total.compared:.1f}% agree" if total.compared else "nothing compared"
    lines.append(f"| **total ({len(outcomes)} configs)** | {total.rows} | {total.compared} ({total.passes}) | "
                 f"{total.agree} | "
                 f"{total.engine_pass_promptfoo_fail} | {total.engine_fail_promptfoo_pass} | {total.not_carried} | "
                 f"{total.unscored} | {total.left_out} | {total.engine_error} | {share}; "
                 f"{sum(o.traceback for o in outcomes)} tracebacks |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("examples", type=Path, help="a folder of promptfoo example folders")
    parser.add_argument("--promptfoo", type=Path, default=PROMPTFOO, help="the promptfoo executable")
    parser.add_argument("--only", nargs="*", default=[], help="only configs whose name contains one of these")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    if not args.promptfoo.exists():
        print(f"promptfoo is not installed at {args.promptfoo}: npm install --prefix ~/.cache/engine-npm "
              "promptfoo@0.121.20", file=sys.stderr)
        return 2
    outcomes = run(args.examples, args.promptfoo, args.only, args.keep)
    print(table(outcomes))
    for outcome in outcomes:
        for line in outcome.disagreements:
            print(f"- {line}")
    bad = any(o.traceback or o.engine_pass_promptfoo_fail for o in outcomes)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
