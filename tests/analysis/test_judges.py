"""Judge agreement statistics against tables computed by hand (formulas in docs/analysis.md, "Judges"), and
the judges section of `engine analyze` over a real run: `engine run` in a subprocess against the loopback
fake server, per-judge tokens in the Parquet `evaluators` list, then `engine analyze --format json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.judge.agreement import agreement, cohen_kappa, krippendorff_alpha, weighted_kappa, within_one
from engine.judge.trust import calibration_summary, judge_report
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import engine

P, F = "pass", "fail"


def test_cohen_kappa_on_a_two_by_two_table() -> None:
    # both pass 4, A pass / B fail 1, A fail / B pass 2, both fail 3 (n = 10)
    a = [P] * 4 + [P] + [F] * 2 + [F] * 3
    b = [P] * 4 + [F] + [P] * 2 + [F] * 3
    # p_o = 7/10; A passes 5/10, B 6/10: p_e = .5*.6 + .5*.4 = .5; kappa = (.7 - .5) / (1 - .5) = .4
    assert agreement(a, b) == pytest.approx(0.7)
    assert cohen_kappa(a, b) == pytest.approx(0.4)


def test_kappa_is_undefined_without_variation_and_zero_for_a_constant_coder() -> None:
    assert cohen_kappa([P, P, P], [P, P, P]) is None          # p_e = 1: nothing beyond chance to measure
    # A always passes: p_e = 1 * 2/3 = p_o: kappa 0 (the yes-man agrees exactly as often as chance)
    assert cohen_kappa([P, P, P], [P, F, P]) == pytest.approx(0.0)
    assert cohen_kappa([], []) is None and agreement([], []) is None
    with pytest.raises(ValueError, match="same items"):
        cohen_kappa([P], [P, F])


def test_weighted_kappa_quadratic_by_hand() -> None:
    expect, given = [4, 5, 1, 2, 3], [4, 4, 1, 1, 1]
    # w_ij = ((i - j) / 4)^2. Observed: (0 + 1 + 0 + 1 + 4) / 16 / 5 = .075.
    # Chance: each expect value once; given 4 twice, 1 three times:
    #   sum_i w(i, 4) = (9 + 4 + 1 + 0 + 1) / 16 = 15/16, times 2; sum_i w(i, 1) = (0+1+4+9+16)/16 = 30/16, times 3
    #   (30/16 + 90/16) / 25 = .3; kappa_w = 1 - .075 / .3 = .75
    assert weighted_kappa(expect, given, [1, 2, 3, 4, 5]) == pytest.approx(0.75)
    assert agreement(expect, given) == pytest.approx(0.4) and within_one(expect, given) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="not one of the ordered"):
        weighted_kappa([6], [1], [1, 2, 3, 4, 5])


def test_krippendorff_alpha_nominal_by_hand() -> None:
    # units (a,a) (a,b) (b,b) (b,b): coincidences o_aa 2, o_ab = o_ba 1, o_bb 4; n_a 3, n_b 5, n 8
    # alpha = 1 - (n - 1) * (o_ab + o_ba) / (n_a n_b + n_b n_a) = 1 - 7 * 2 / 30 = 16/30
    units = [("a", "a"), ("a", "b"), ("b", "b"), ("b", "b")]
    assert krippendorff_alpha(units, "nominal") == pytest.approx(16 / 30)


def test_krippendorff_alpha_ordinal_and_interval_by_hand() -> None:
    # units (1,1) (1,2) (2,3) (3,3): n_1 = 3, n_2 = 2, n_3 = 3, n = 8; o_12 = o_21 = o_23 = o_32 = 1
    # ordinal delta^2(c,k) = (sum_{g=c..k} n_g - (n_c + n_k)/2)^2 (Krippendorff 2011):
    #   d12 = (5 - 2.5)^2 = 6.25, d23 = 6.25, d13 = (8 - 3)^2 = 25
    #   observed 4 * 6.25 = 25; expected 2 * (3*2*6.25 + 2*3*6.25 + 3*3*25) = 600; alpha = 1 - 7*25/600
    units = [(1, 1), (1, 2), (2, 3), (3, 3)]
    assert krippendorff_alpha(units, "ordinal", [1, 2, 3]) == pytest.approx(1 - 7 * 25 / 600)
    # interval delta^2 = (c - k)^2: observed 4; expected 2 * (6 + 6 + 9*4) = 96; alpha = 1 - 7*4/96
    assert krippendorff_alpha(units, "interval") == pytest.approx(1 - 7 * 4 / 96)


def test_krippendorff_2011_worked_example() -> None:
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", the 4 coders x 12 units example with
    # missing values; published: nominal .743, interval .849 (ordinal .815 as computed by the `krippendorff`
    # package on the same data, checked once by hand-run, not a dependency)
    n = None
    coders = [[1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n], [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
              [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n], [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n]]
    units = list(zip(*coders, strict=True))
    assert krippendorff_alpha(units, "nominal") == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha(units, "interval") == pytest.approx(0.849, abs=5e-4)
    assert krippendorff_alpha(units, "ordinal") == pytest.approx(0.815, abs=5e-4)
    assert krippendorff_alpha([(1,), (2, None)], "nominal") is None      # nothing pairable
    assert krippendorff_alpha([(1, 1), (1, 1)], "nominal") is None       # no variation: D_e = 0


def test_calibration_summary_errors_count_as_disagreement_and_small_n_gives_no_verdict() -> None:
    items = [{"expect": P, "grade": P}] * 6 + [{"expect": F, "grade": F}] * 3 + [{"expect": F, "grade": None}]
    summary = calibration_summary({"numeric": False, "min_agreement": 0.95, "items": items})
    # 9 of 10 agree (the error is a miss); kappa over the 9 graded: p_o 1, so kappa 1
    assert summary["agreement"] == pytest.approx(0.9) and summary["errors"] == 1
    assert summary["kappa"] == pytest.approx(1.0) and summary["verdict"] == "fail"
    few = calibration_summary({"numeric": False, "min_agreement": 0.5, "items": items[:9]})
    assert few["verdict"] == "too few" and few["agreement"] == 1.0


SUITE = """\
suite: shop
tests:
  - id: "q-{{ n }}"
    prompt: "Refund question {{ n }}"
    cases: [{n: 1}, {n: 2}, {n: 3}, {n: 4}]
    eval:
      all:
        - {contains: "30 days"}
        - judge: {rubric: "Mentions the 30-day limit.", model: grader,
                  calibration: [{answer: "30 days", expect: pass}, {answer: "never", expect: fail}]}
        - judge: {rubric: "Mentions the 30-day limit.", model: yesman}
        - judge: {rubric: "Mentions the 30-day limit.", model: coin, samples: 3}
"""

MODELS = """\
models:
  shop: {{base_url: "{url}", model: shop-1, timeout_s: 5}}
  grader: {{base_url: "{url}", model: grader-1, timeout_s: 5, price: {{input: 1.0, output: 2.0}}}}
  yesman: {{base_url: "{url}", model: yes-1, timeout_s: 5}}
  coin: {{base_url: "{url}", model: coin-1, timeout_s: 5}}
"""


def scripted(coin: Any) -> Any:
    def respond(body: dict[str, Any]) -> Reply:
        model = body["model"]
        if model == "shop-1":        # questions 1 and 2 get a good answer, 3 and 4 a bad one
            good = body["messages"][-1]["content"][-1] in "12"
            return Reply(content="Within 30 days." if good else "No refunds.")
        answer = body["messages"][0]["content"].split("[Answer to grade]\n", 1)[1].split("\n", 1)[0]
        if model == "grader-1":
            return Reply(content=json.dumps({"reasoning": "r", "grade": P if "30 days" in answer else F}))
        if model == "yes-1":
            return Reply(content=json.dumps({"reasoning": "r", "grade": P}))
        if model == "coin-1":
            return Reply(content=json.dumps({"reasoning": "r", "grade": next(coin)}))
        raise AssertionError(model)
    return respond


def test_analyze_reports_each_judges_agreement(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    # coin, 3 samples per row, 4 rows: (P P P) (P F P) (F F F) (P P F)
    fake_openai.responder = scripted(iter([P, P, P, P, F, P, F, F, F, P, P, F]))
    (tmp_path / "shop.yaml").write_text(SUITE)
    (tmp_path / "models.yaml").write_text(MODELS.format(url=fake_openai.base_url))
    env = {"ENGINE_JUDGE_CACHE": str(tmp_path / "cache" / "judge.sqlite")}
    calibration = tmp_path / "calibration.json"
    done = engine("validate", str(tmp_path / "shop.yaml"), "--models", str(tmp_path / "models.yaml"), "--judges",
                  "--calibration-out", str(calibration), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    done = engine("run", str(tmp_path / "shop.yaml"), "--models", str(tmp_path / "models.yaml"), "--model", "shop",
                  "--out", str(tmp_path / "runs"), "--concurrency", "1", env=env)
    assert done.returncode == 0, done.stderr

    df = pd.read_parquet(tmp_path / "runs" / "latest").sort_values("test_id").reset_index(drop=True)
    # per-judge tokens and cost in the evaluators list; the row columns are their sums
    first = {node["path"]: node for node in df.loc[0, "evaluators"]}
    grader = first["all/1.judge"]
    assert grader["judge_model"] == "grader" and grader["judge_scale"] == "pass_fail"
    assert grader["judge_grade"] == '"pass"' and grader["judge_calls"] == 1
    assert grader["judge_prompt_tokens"] == 10 and grader["judge_completion_tokens"] == 5
    assert grader["judge_cost"] == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)
    assert first["all/3.judge"]["judge_calls"] == 3 and list(first["all/3.judge"]["judge_grades"]) == ['"pass"'] * 3
    assert first["all/0.contains"]["judge_calls"] is None
    assert df.loc[0, "judge_calls"] == 1 + 1 + 3 and df.loc[0, "judge_prompt_tokens"] == 50

    done = engine("analyze", str(tmp_path / "runs" / "latest"), "--format", "json", "--calibration",
                  str(calibration), env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["judges"]
    judges = {j["judge_model"]: j for j in report["judges"]}
    # grader vs contains "30 days": agree on all 4 rows (2 pass, 2 fail): kappa 1
    (versus,) = judges["grader"]["vs_deterministic"]
    assert versus["evaluator"] == "contains" and versus["n"] == 4 and versus["kappa"] == pytest.approx(1.0)
    assert "too few" in versus["note"]
    # the yes-man vs contains: agreement 2/4, kappa 0 (it always passes)
    assert judges["yesman"]["vs_deterministic"][0]["agreement"] == 0.5
    assert judges["yesman"]["vs_deterministic"][0]["kappa"] == pytest.approx(0.0)
    # calibration: the grader's 2 examples, both agreed; the 4 cases share the node, graded once (not 4 times)
    calib = judges["grader"]["calibration"]
    assert calib["nodes"] == 1 and calib["n"] == 2 and calib["agreement"] == 1.0 and "too few" in calib["note"]
    assert judges["yesman"]["calibration"] is None
    # coin self-consistency: modal shares 1, 2/3, 1, 2/3 -> mean 5/6; unanimous 2/4
    consistency = judges["coin"]["self_consistency"]
    assert consistency["rows"] == 4 and consistency["modal_share"] == pytest.approx(5 / 6)
    assert consistency["unanimous"] == 0.5
    # alpha over the samples (3 coders, 4 units), nominal: coincidences o_PP 6, o_PF = o_FP 4... by hand:
    #   unit PPP: o_PP += 6 * 1/2 = 3; PFP: o_PP += 1, o_PF += 2, o_FP += 2 (x 1/2 -> 1, 1);
    #   FFF: o_FF += 3; PPF: o_PP += 1, o_PF += 1, o_FP += 1. Totals o_PP 5, o_PF 2, o_FP 2, o_FF 3;
    #   n_P 7, n_F 5, n 12; alpha = 1 - 11 * 4 / (2 * 7 * 5) = 1 - 44/70
    assert consistency["alpha"] == pytest.approx(1 - 44 / 70)
    # judge vs judge on the same rows: grader vs yesman, pass 2 / fail 2 vs pass 4: agreement .5, kappa 0
    pairs = {(p["judge_a"], p["judge_b"]): p for p in report["pairs"]}
    assert pairs[("grader", "yesman")]["agreement"] == 0.5 and pairs[("grader", "yesman")]["kappa"] == 0.0
    # grader vs coin: coin majorities P P F P, grader P P F F: agree 3/4; p_e = .5*.75 + .5*.25 = .5,
    # kappa = (.75 - .5) / .5 = .5
    assert pairs[("grader", "coin")]["agreement"] == 0.75 and pairs[("grader", "coin")]["kappa"] == 0.5

    table = engine("analyze", str(tmp_path / "runs" / "latest"), "--calibration", str(calibration), env=env)
    assert "JUDGES" in table.stdout and "grader (pass_fail)" in table.stdout
    assert "calibration: n=2, agreement 1.000" in table.stdout


def test_judge_report_marks_a_stale_calibration(tmp_path: Path) -> None:
    node = {"path": "judge", "kind": "judge", "passed": True, "error": False, "judge_model": "g",
            "judge_scale": "pass_fail", "judge_grade": '"pass"', "judge_grades": ['"pass"'], "judge_calls": 1}
    df = pd.DataFrame([{"suite": "s", "test_id": "t", "test_hash": "new", "evaluators": [node]}])
    record = {"suite": "s", "test_id": "t", "path": "judge", "test_hash": "old", "numeric": False,
              "items": [{"expect": P, "grade": P}]}
    (judge,) = judge_report(df, [record])["judges"]
    assert judge["calibration"] == {"nodes": 0, "stale": 1}
    assert judge_report(df.iloc[0:0], [record]) == {"min_n": 10, "judges": [], "pairs": []}

