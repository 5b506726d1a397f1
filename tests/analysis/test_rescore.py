"""`engine rescore`: stored answers scored again with the current suite, no model called."""

from __future__ import annotations

from pathlib import Path

from builders import row, write_run

from engine.analysis import diff, load
from tests.engine_proc import run_engine
from tests.fake_openai import FakeOpenAI, Reply

SUITE = """\
suite: geo
tests:
  - id: capital-france
    prompt: "What is the capital of France?"
    golden: Paris
    eval: {contains: "{{ golden }}"}
  - id: capital-peru
    prompt: "What is the capital of Peru?"
    golden: Lima
    eval: {contains: "{{ golden }}"}
"""


def test_rescore_fixes_a_broken_golden_without_calling_a_model(tmp_path: Path) -> None:
    # The run was scored against a wrong golden ("Lyon"): both models failed capital-france.
    rows = []
    for model in ("a", "b"):
        rows.append(row(model=model, suite="geo", test_id="capital-france", answer="The capital is Paris.",
                        score=0.0, passed=False, test_hash="old", run_id="run-1"))
        rows.append(row(model=model, suite="geo", test_id="capital-peru", answer="Lima" if model == "a" else "Cusco",
                        score=1.0 if model == "a" else 0.0, passed=model == "a", test_hash="old", run_id="run-1"))
    rows.append(row(model="b", suite="geo", test_id="capital-peru", attempt=1, answer=None, score=None, passed=None,
                    error_kind="timeout", error_message="deadline passed", run_id="run-1"))
    rows.append(row(model="a", suite="geo", test_id="gone", answer="x", score=1.0, passed=True, run_id="run-1"))
    write_run(tmp_path / "results" / "run-1", rows)
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "geo.yaml").write_text(SUITE)

    done = run_engine("rescore", tmp_path / "results" / "run-1", "--suites", suites)
    assert done.returncode == 0, done.stderr
    assert "rescored 4 rows" in done.stdout
    assert "1 tests of" in done.stderr and "geo/gone" in done.stderr
    new_runs = [p for p in (tmp_path / "results").iterdir() if p.name != "run-1"]
    assert len(new_runs) == 1 and "rescore" in new_runs[0].name
    assert (new_runs[0] / "_manifest.json").exists()

    new = load(new_runs[0]).set_index(["model", "test_id", "attempt"])
    assert new.loc[("a", "capital-france", 0), "passed"] and new.loc[("b", "capital-france", 0), "passed"]
    assert not new.loc[("b", "capital-peru", 0), "passed"]
    assert new.loc[("b", "capital-peru", 1), "error_kind"] == "timeout"  # no answer: copied as it was
    assert new.loc[("a", "gone", 0), "passed"]  # test gone from the suites: copied as it was
    nodes = new.loc[("a", "capital-france", 0), "evaluators"]
    assert nodes[0]["kind"] == "contains" and nodes[0]["passed"]

    result = diff(tmp_path / "results" / "run-1", new_runs[0])
    france = result.flips[result.flips["test_id"] == "capital-france"]
    assert list(france["change"]) == ["fail→pass", "fail→pass"] and france["hash_changed"].all()


def test_rescore_reports_suite_errors_and_missing_results(tmp_path: Path) -> None:
    write_run(tmp_path / "run", [row(suite="geo", test_id="capital-france", score=1.0, passed=True)])
    (tmp_path / "bad.yaml").write_text("suite: geo\ntests:\n  - id: x\n    prompt: q\n    eval: {nope: 1}\n")
    bad = run_engine("rescore", tmp_path / "run", "--suites", tmp_path / "bad.yaml")
    assert bad.returncode == 2 and "bad.yaml" in bad.stderr and "Traceback" not in bad.stderr
    missing = run_engine("rescore", tmp_path / "nope", "--suites", tmp_path / "bad.yaml")
    assert missing.returncode == 2 and "no such file" in missing.stderr and "Traceback" not in missing.stderr


SLOW_SUITE = """\
suite: slow
tests:
  - id: language
    prompt: "Write at length."
    eval: {ifeval: {id: "language:response_language", language: en}, timeout_s: 0.001}
  - id: plain
    prompt: "Say ok."
    eval: {contains: ok}
"""


def test_rescore_stops_a_slow_check_at_its_time_limit_as_the_run_does(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """An answer that keeps a check past its `timeout_s` gets the run's time-limit error verdict from rescore too
    (the one scoring path: a scoring process under the limit), and the other rows are scored."""
    fake_openai.responder = lambda body: Reply(
        content="hello world " * 7_000 if "length" in body["messages"][-1]["content"] else "ok")
    (tmp_path / "slow.yaml").write_text(SLOW_SUITE)
    (tmp_path / "models.yaml").write_text(f"models:\n  m:\n    base_url: {fake_openai.base_url}\n    model: m-1\n"
                                          "    timeout_s: 30\n")
    ran = run_engine("run", tmp_path / "slow.yaml", "--models", tmp_path / "models.yaml", "--out",
                     tmp_path / "results", "--quiet", "--no-cache", "--run-id", "first")
    assert ran.returncode in (0, 1), ran.stderr
    done = run_engine("rescore", tmp_path / "results" / "first", "--suites", tmp_path / "slow.yaml")
    assert done.returncode == 0, done.stderr
    (again,) = [p for p in (tmp_path / "results").iterdir() if "rescore" in p.name]
    runs = {name: load(folder).set_index("test_id") for name, folder in (("run", tmp_path / "results" / "first"),
                                                                        ("rescore", again))}
    for name, rows in runs.items():
        assert rows.loc["language", "error_kind"] == "evaluator", name
        assert rows.loc["language", "error_message"] == ("ifeval took longer than 0.001 s on an answer of 84 KB (its "
                                                         "`timeout_s` sets the limit)"), name
        assert bool(rows.loc["plain", "passed"]), name
