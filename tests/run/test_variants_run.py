"""Two prompt variants x two models through the scripted server, `engine run` and `engine analyze`.

The server answers by model and variant (read from the system prompt) so the per-variant table and the
paired variant comparisons can be checked against numbers computed here by hand.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from engine.analysis import load
from engine.analysis.summary import analyze
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine

SUITE = """\
suite: qa
variants:
  good: {system: "MODE-GOOD"}
  bad: {system: "MODE-BAD"}
tests:
  - id: "q-{{ n }}"
    prompt: "question {{ n }}"
    cases: [{n: 0}, {n: 1}, {n: 2}, {n: 3}, {n: 4}, {n: 5}]
    eval: {contains: ok}
"""
MODELS = """\
models:
  alpha: {{base_url: "{url}", model: alpha-1, timeout_s: 5, max_retries: 0}}
  beta: {{base_url: "{url}", model: beta-1, timeout_s: 5, max_retries: 0}}
"""
# Which questions each (model, variant) gets right: alpha's good variant all six, its bad one none;
# beta's good variant q-0..q-3, its bad one q-0 and q-1.
PASSES = {("alpha-1", "MODE-GOOD"): {0, 1, 2, 3, 4, 5}, ("alpha-1", "MODE-BAD"): set(),
          ("beta-1", "MODE-GOOD"): {0, 1, 2, 3}, ("beta-1", "MODE-BAD"): {0, 1}}


def answer(body: dict) -> Reply:
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    n = int(re.search(r"question (\d+)", user).group(1))   # type: ignore[union-attr]
    return Reply(content="ok" if n in PASSES[(body["model"], system)] else "no")


def project(folder: Path, url: str) -> tuple[Path, Path]:
    (folder / "qa.yaml").write_text(SUITE)
    (folder / "models.yaml").write_text(MODELS.format(url=url))
    return folder / "qa.yaml", folder / "models.yaml"


def t_interval(diffs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """The textbook one-sample t-interval (one attempt per test: one item per cluster)."""
    # scipy is imported in the test, not at collection: ~1 CPU-s per pytest-xdist worker otherwise.
    from scipy import stats

    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def test_two_variants_two_models_run_and_compare_as_computed_by_hand(tmp_path: Path,
                                                                    fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = answer
    suite, models = project(tmp_path, fake_openai.base_url)
    listed = engine("list", str(suite))
    assert "12 tests to run: 6 tests x 2 variants" in listed.stdout
    dry = engine("run", str(suite), "--models", str(models), "--dry-run")
    assert "24 call(s) for 2 model(s) x 12 test(s) (6 tests x 2 variants)" in dry.stderr
    out = tmp_path / "results"
    done = engine("run", str(suite), "--models", str(models), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert len(fake_openai.requests) == 24
    df = pd.read_parquet(out / "latest")
    assert len(df) == 24 and set(df["variant"]) == {"good", "bad"}
    assert df.groupby(["model", "variant"]).size().eq(6).all()

    analyzed = engine("analyze", str(out / "latest"), "--format", "json")
    assert analyzed.returncode == 0, analyzed.stderr
    payload = json.loads(analyzed.stdout)
    table = {(r["model"], r["variant"]): r for r in payload["variants"]}
    assert {k: (r["mean_score"], r["tests"]) for k, r in table.items()} == {
        ("alpha", "good"): (1.0, 6), ("alpha", "bad"): (0.0, 6),
        ("beta", "good"): (4 / 6, 6), ("beta", "bad"): (2 / 6, 6)}
    assert [r["variant"] for r in payload["variants"]] == ["good", "bad", "good", "bad"]   # best first per model
    comparisons = {c["model"]: c for c in payload["variant_comparisons"]}
    assert set(comparisons) == {"alpha", "beta"}

    alpha = comparisons["alpha"]   # every test +1: a zero-width interval; McNemar 6 vs 0: p = 2 * 0.5**6
    assert (alpha["variant_a"], alpha["variant_b"]) == ("good", "bad")
    assert (alpha["tests"], alpha["clusters"], alpha["only_a"], alpha["only_b"]) == (6, 6, 6, 0)
    assert alpha["mean_diff"] == 1.0 and alpha["diff_lo"] == 1.0 and alpha["diff_hi"] == 1.0
    assert math.isclose(alpha["mcnemar_p"], 2 * 0.5 ** 6)
    assert alpha["better"] == "good" and alpha["verdict"].startswith("good is better than bad")

    beta = comparisons["beta"]     # differences (good − bad) per test: 0, 0, 1, 1, 0, 0
    mean, lo, hi = t_interval([0, 0, 1, 1, 0, 0])
    assert math.isclose(beta["mean_diff"], mean) and math.isclose(beta["diff_lo"], lo)
    assert math.isclose(beta["diff_hi"], hi)
    assert (beta["only_a"], beta["only_b"], beta["both_pass"], beta["both_fail"]) == (2, 0, 2, 2)
    assert math.isclose(beta["mcnemar_p"], 0.5)    # 2 vs 0 discordant: 2 * 0.5**2
    assert beta["better"] is None and beta["verdict"].startswith("no clear difference between good and bad")

    # the model tables pool the variants: alpha passes 6 of 12 attempts, beta 6 of 12
    models_table = {r["model"]: r for r in payload["models"]}
    assert math.isclose(models_table["alpha"]["mean_score"], 0.5)
    assert any("prompt variants" in note for note in payload["notes"])

    text = engine("analyze", str(out / "latest")).stdout
    assert "Paired variant comparisons" in text and "Prompt variants per model" in text
    markdown = engine("analyze", str(out / "latest"), "--format", "markdown").stdout
    assert "Paired variant comparisons" in markdown
    csv = engine("analyze", str(out / "latest"), "--format", "csv", "--table", "variant_comparisons").stdout
    assert csv.splitlines()[0].startswith("model,") and "variant_a" in csv.splitlines()[0]
    # a test's variants have their own hashes: neither per_test nor diff may call that an edit, in any row order
    from engine.analysis import diff
    loaded = load(out / "latest")
    assert not analyze(loaded).tests["hash_changed"].any()
    shuffled = loaded.sample(frac=1.0, random_state=3).reset_index(drop=True)
    changes = diff(loaded, shuffled).summary
    assert changes["changed_tests"].eq(0).all() and changes["tests"].eq(6).all()
    page = tmp_path / "report.html"
    assert engine("report", str(out / "latest"), "-o", str(page)).returncode == 0
    embedded = page.read_text().split('id="report-data">', 1)[1].split("</script>", 1)[0]
    report_data = json.loads(embedded.replace("<\\/", "</"))
    assert [(c["model"], c["variant_a"], c["variant_b"]) for c in report_data["variant_comparisons"]] == [
        ("alpha", "good", "bad"), ("beta", "good", "bad")]


def test_resume_and_retry_errors_keep_variants_apart(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """Resume skips exactly the finished (test, variant) rows; --retry-errors re-runs only the failed ones."""
    failing = {"on": True}

    def flaky(body: dict) -> Reply:
        # the "bad" variant of q-2 fails while `on`: the same test's "good" variant must not be re-run
        if failing["on"] and body["messages"][0]["content"] == "MODE-BAD" and "question 2" in \
                body["messages"][-1]["content"]:
            return Reply(fault="http_500")
        return answer(body)

    fake_openai.responder = flaky
    suite, models = project(tmp_path, fake_openai.base_url)
    out = tmp_path / "results"
    first = engine("run", str(suite), "--models", str(models), "--model", "alpha", "--out", str(out),
                   "--run-id", "r1", "--quiet")
    assert first.returncode == 0, first.stderr
    assert len(fake_openai.requests) == 12
    fake_openai.requests.clear()
    again = engine("run", "--resume", str(out / "r1"), "--quiet")
    assert again.returncode == 0 and fake_openai.requests == []   # every (test, variant) row is done
    failing["on"] = False
    retried = engine("run", "--resume", str(out / "r1"), "--retry-errors", "--quiet")
    assert retried.returncode == 0, retried.stderr
    [request] = fake_openai.requests
    assert request["messages"][0]["content"] == "MODE-BAD" and request["messages"][-1]["content"] == "question 2"
    df = load(out / "r1")
    assert len(df) == 12 and df["error_kind"].isna().all()
    assert df.groupby(["test_id", "variant"]).size().eq(1).all()

    # edit one variant: resume runs exactly its rows again (new hash), the other variant's rows stay. (Edited
    # to a prompt no variant had: one equal to `good`'s would be answered from the response cache.)
    suite.write_text(SUITE.replace('bad: {system: "MODE-BAD"}', 'bad: {system: "MODE-NEW"}'))
    fake_openai.requests.clear()
    edited = engine("run", "--resume", str(out / "r1"), "--quiet")
    assert edited.returncode == 0, edited.stderr
    assert len(fake_openai.requests) == 6


def test_an_old_run_folder_without_the_variant_column_still_loads_and_analyses(
        tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = answer
    suite, models = project(tmp_path, fake_openai.base_url)
    suite.write_text(SUITE.split("variants:")[0] + "tests:" + SUITE.split("tests:")[1])   # no variants
    (tmp_path / "m.yaml").write_text(MODELS.format(url=fake_openai.base_url))
    fake_openai.responder = lambda body: Reply(content="ok")
    out = tmp_path / "results"
    assert engine("run", str(suite), "--models", str(models), "--out", str(out), "--quiet").returncode == 0
    [part] = sorted((out / "latest").glob("part-*.parquet"))
    table = pq.read_table(part)
    assert table.column("variant").null_count == len(table)     # a suite without variants: null
    pq.write_table(table.drop(["variant"]), part)                 # as an engine before variants wrote it
    df = load(out / "latest")
    assert "variant" in df.columns and df["variant"].isna().all()
    analysis = analyze(df)
    assert analysis.variants is None and analysis.variant_comparisons == []
    assert len(analysis.models) == 2
    done = engine("analyze", str(out / "latest"), "--format", "json")
    assert done.returncode == 0 and json.loads(done.stdout)["variants"] == []


def test_rescore_matches_each_row_to_its_own_variant(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    from engine.analysis.rescore import rescore_run
    from engine.suite import load_suites

    fake_openai.responder = answer
    suite, models = project(tmp_path, fake_openai.base_url)
    out = tmp_path / "results"
    assert engine("run", str(suite), "--models", str(models), "--model", "beta", "--out", str(out),
                  "--run-id", "r1", "--quiet").returncode == 0
    suite.write_text(SUITE.replace("{contains: ok}", "{contains: \"no\"}"))   # the evaluator flips every verdict
    outcome = rescore_run(out / "r1", [suite])
    assert (outcome.rescored, outcome.unchanged, outcome.flipped) == (12, 0, 12)
    [loaded], _ = load_suites([suite])
    hashes = {(t.id, t.variant): t.hash for t in loaded.tests}
    df = load(outcome.folder)
    assert len(df) == 12
    assert all(hashes[(r.test_id, r.variant)] == r.test_hash for r in df.itertuples())
    # beta's good variant passed q-0..q-3 before; with the flipped evaluator it passes q-4 and q-5 only
    good = df[df["variant"] == "good"].set_index("test_id")["passed"].to_dict()
    assert good == {"q-0": False, "q-1": False, "q-2": False, "q-3": False, "q-4": True, "q-5": True}
