"""`--subset`, `--saturated-since` and `--filter-file` end to end: real `engine run` subprocesses against the fake
OpenAI server on loopback, real Parquet and manifests, then `engine analyze` and `engine run --filter-file`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine

MODELS = 15
TESTS = 100


def write_models(folder: Path, base_url: str, names: list[str]) -> Path:
    entries = "".join(f"  {name}:\n    base_url: {base_url}\n    model: {name}-1\n    concurrency: 8\n"
                      f"    timeout_s: 10\n    price: {{input: 1.0, output: 2.0}}\n" for name in names)
    path = folder / "models.yaml"
    path.write_text("models:\n" + entries)
    return path


def write_bulk_suite(folder: Path, tests: int) -> Path:
    suites = folder / "suites"
    suites.mkdir(parents=True, exist_ok=True)
    rows = "\n".join(f"      - {{n: {i}}}" for i in range(tests))
    (suites / "bulk.yaml").write_text(
        "suite: bulk\ndefaults:\n  max_tokens: 8\ntests:\n  - id: \"q-{{ n }}\"\n    prompt: \"question {{ n }}\"\n"
        f"    eval: {{contains: yes}}\n    cases:\n{rows}\n")
    return suites


def irt_responder(tests: int, models: int):
    """Answers 'yes' with the 2PL chance sigmoid(a_i (theta_j − b_i)), decided by a hash: the same every time."""
    rng = np.random.default_rng(0)
    b, a = rng.normal(0, 1, tests), np.exp(rng.normal(0, 0.5, tests))
    theta = {f"m{j}-1": t for j, t in enumerate(np.linspace(-2, 2, models))}

    def answer(body: dict) -> Reply:
        test = int(body["messages"][-1]["content"].split()[-1])
        chance = 1 / (1 + np.exp(-a[test] * (theta[body["model"]] - b[test])))
        # sha256, not crc32: CRCs of similar strings are affine in each other, so their draws correlate.
        draw = int.from_bytes(hashlib.sha256(f"{body['model']}|{test}".encode()).digest()[:8], "big") / 2**64
        return Reply(content="yes" if draw < chance else "no")

    return answer


def test_subset_on_a_real_run_writes_a_filter_that_engine_run_follows(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = irt_responder(TESTS, MODELS)
    suites = write_bulk_suite(tmp_path, TESTS)
    names = [f"m{j}" for j in range(MODELS)]
    models = write_models(tmp_path, fake_openai.base_url, names)
    out = tmp_path / "results"
    done = engine("run", str(suites), "--models", str(models), "--out", str(out), "--run-id", "full", "--quiet",
                  "--concurrency", "64")
    assert done.returncode == 0, done.stderr
    assert len(pd.read_parquet(out / "full")) == MODELS * TESTS

    chosen = tmp_path / "subset.txt"
    analysed = engine("analyze", str(out / "full"), "--subset", "20%", "--filter-file", str(chosen), "--format", "json")
    assert analysed.returncode == 0, analysed.stderr
    subset = json.loads(analysed.stdout)["subset"]
    holdout = subset["holdout"]
    assert subset["size"] == 20 and subset["method"] == "irt-information" and holdout["models"] == MODELS
    assert holdout["spearman"] >= 0.9, holdout
    assert holdout["mae"] < holdout["random_mae"], holdout
    assert f"filter written to {chosen} (20 tests)" in analysed.stderr
    entries = [line for line in chosen.read_text().splitlines() if line and not line.startswith("#")]
    assert len(entries) == 20 and sorted(entries) == sorted(f"bulk/{t['test_id']}" for t in subset["selected"])
    assert chosen.read_text().startswith("# engine analyze ")

    table = engine("analyze", str(out / "full"), "--subset", "20")
    assert table.returncode == 0, table.stderr
    assert "held out (leave-one-model-out, 15 models)" in table.stdout and "Subset tests" in table.stdout
    assert "--filter-file FILE writes" in table.stdout

    calls_before = len(fake_openai.requests)
    again = engine("run", str(suites), "--models", str(models), "--model", "m0", "--filter-file", str(chosen),
                   "--out", str(out), "--run-id", "subset", "--quiet", "--no-cache")
    assert again.returncode == 0, again.stderr
    ran = pd.read_parquet(out / "subset")
    assert sorted(f"{s}/{t}" for s, t in zip(ran["suite"], ran["test_id"], strict=True)) == sorted(entries)
    assert len(fake_openai.requests) - calls_before == 20

    chosen.write_text(chosen.read_text() + "bulk/q-1000\n")
    wrong = engine("run", str(suites), "--models", str(models), "--model", "m0", "--filter-file", str(chosen),
                   "--out", str(out), "--quiet")
    line = len(chosen.read_text().splitlines())
    assert wrong.returncode == 2, wrong.stderr
    assert f"{chosen}:{line}: no test 'bulk/q-1000' in the suites loaded; did you mean 'bulk/q-10'?" in wrong.stderr
    assert "Traceback" not in wrong.stderr and len(fake_openai.requests) - calls_before == 20


def test_subset_usage_errors_exit_2(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = irt_responder(12, 3)
    suites = write_bulk_suite(tmp_path, 12)
    models = write_models(tmp_path, fake_openai.base_url, ["m0", "m1", "m2"])
    out = tmp_path / "results"
    assert engine("run", str(suites), "--models", str(models), "--out", str(out), "--run-id", "r",
                  "--quiet").returncode == 0
    run = str(out / "r")
    for args, words in ((["--subset", "12"], "hold 12 tests"), (["--subset", "x"], "a number of tests"),
                        (["--subset", "3", "--format", "csv"], "csv holds one table"),
                        (["--filter-file", "f.txt"], "give --subset N or --saturated-since"),
                        (["--saturated-since", "soon"], "YYYY-MM-DD")):
        done = engine("analyze", run, *args)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    few = engine("analyze", run, "--subset", "4", "--format", "json")
    assert few.returncode == 0, few.stderr
    payload = json.loads(few.stdout)["subset"]
    assert payload["holdout"] is None and payload["method"] == "difficulty-strata"
    assert any("not informative" in note for note in payload["notes"])


def _answers(fails: set[tuple[str, str]]):
    """'yes' except for the (model, test) pairs in `fails`."""
    def answer(body: dict) -> Reply:
        test = body["messages"][-1]["content"].split()[-1]
        return Reply(content="no" if (body["model"], test) in fails else "yes")
    return answer


def test_saturated_since_across_three_dated_runs(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "sat.yaml").write_text(
        "suite: sat\ndefaults:\n  max_tokens: 8\ntests:\n" + "".join(
            f"  - id: {t}\n    prompt: \"question {t}\"\n    eval: {{contains: yes}}\n" for t in "abcd"))
    models = write_models(tmp_path, fake_openai.base_url, ["m0", "m1"])
    out = tmp_path / "results"
    plan = {  # run id: (start date written into its manifest, the (model, test) pairs that fail)
        "r1": ("2026-10-01T09:00:00Z", {("m1-1", "b")}),
        "r2": ("2026-11-05T09:00:00Z", {("m0-1", "c")}),
        "r3": ("2026-11-20T09:00:00Z", {("m0-1", "c"), ("m1-1", "c")}),
    }
    for run_id, (started, fails) in plan.items():
        fake_openai.responder = _answers(fails)
        done = engine("run", str(suites), "--models", str(models), "--out", str(out), "--run-id", run_id,
                      "--repeat", "2", "--no-cache", "--quiet")
        assert done.returncode == 0, done.stderr
        manifest_path = out / run_id / "_manifest.json"
        manifest = json.loads(manifest_path.read_text())
        manifest["started_at"] = started     # the only thing not real here: the clock the runs started at
        manifest_path.write_text(json.dumps(manifest))

    dropping = tmp_path / "drop-saturated.txt"
    done = engine("analyze", str(out), "--saturated-since", "2026-11-01", "--format", "json",
                  "--filter-file", str(dropping))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["saturated_since"]
    assert [r["run_id"] for r in found["runs"]] == ["r2", "r3"]
    assert all(r["dated_by"] == "manifest" for r in found["runs"])
    assert sorted(t["test_id"] for t in found["tests"]) == ["a", "b", "d"]
    recent = pd.concat([pd.read_parquet(out / run, columns=["run_id", "test_id", "cost"]) for run in ("r2", "r3")])
    for test in found["tests"]:
        mine = recent[recent["test_id"] == test["test_id"]]
        assert test["runs"] == 2 and test["runs_since"] == 2
        assert test["calls"] == len(mine) == 2 * 2 * 2             # 2 runs × 2 models × 2 attempts
        assert test["cost"] == np.float64(mine["cost"].sum()) and test["cost"] > 0
    entries = [line for line in dropping.read_text().splitlines() if line and not line.startswith("#")]
    assert entries == ["sat/c"]
    assert "#   sat/a  (saturated in 2 of 2 runs; 8 calls)" in dropping.read_text()

    older = engine("analyze", str(out), "--saturated-since", "2026-09-01", "--format", "json")
    assert sorted(t["test_id"] for t in json.loads(older.stdout)["saturated_since"]["tests"]) == ["a", "d"]
    table = engine("analyze", str(out), "--saturated-since", "2026-11-01")
    assert "Saturated in every run since 2026-11-01: 3 tests, 24 calls" in table.stdout
    none = engine("analyze", str(out), "--saturated-since", "2026-12-01")
    assert none.returncode == 2 and "no run started on or after it" in none.stderr and "2026-11-20" in none.stderr

    fake_openai.responder = _answers(set())
    rerun = engine("run", str(suites), "--models", str(models), "--filter-file", str(dropping), "--out", str(out),
                   "--run-id", "r4", "--quiet", "--no-cache")
    assert rerun.returncode == 0, rerun.stderr
    assert set(pd.read_parquet(out / "r4")["test_id"]) == {"c"}
