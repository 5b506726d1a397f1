"""The BFCL importer: YAML that loads, goldens that pass, verdicts that survive the round trip."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import bfcl_replay as replay

from engine.evaluators import score
from engine.importers.bfcl import (
    CATEGORIES,
    convert_schema,
    decode_prompting_calls,
    import_bfcl,
    unmeetable,
)
from engine.model.answer import Answer
from tests.engine_proc import run_engine


@pytest.fixture(scope="module")
def bfcl_dir(shared_data: Path) -> Path:
    return shared_data / "bfcl"


@pytest.fixture(scope="module")
def imported(bfcl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bfcl")
    for category in CATEGORIES:
        first = import_bfcl(category, bfcl_dir, out, limit=40)
        assert first == out / f"bfcl_{category}.yaml"
    return out


def test_imported_suites_load_and_goldens_pass(imported: Path) -> None:
    from engine.suite import load_suites

    suites, diagnostics = load_suites([imported], golden_check=True)
    assert [str(d) for d in diagnostics] == []
    # live_parallel has 16 entries and live_parallel_multiple 24; every other category has 40 or more.
    assert sum(len(s.tests) for s in suites) == 40 * (len(CATEGORIES) - 2) + 16 + 24
    for suite in suites:
        for test in suite.tests:
            assert score(test, Answer.from_golden(test.golden)).passed, test.id


def test_round_trip_through_yaml_keeps_every_verdict(imported: Path, bfcl_dir: Path) -> None:
    """Conformance cases of the imported tests give the same verdict from the YAML as from the data."""
    from engine.suite import load_suites

    suites, _ = load_suites([imported])
    loaded = {t.id: t for s in suites for t in s.tests}
    entries = replay.load_entries(bfcl_dir)
    checked = 0
    for case in replay.load_conformance(bfcl_dir) + replay.load_live_conformance():
        test = loaded.get(case["test_id"])
        if test is None or case["model_mode"] != "prompting":
            continue
        calls = replay.calls_from_decoded(case["decoded_calls"])
        direct = replay.replay(case, entries)
        text = case["model_output_text"] if case["decoded_calls"] is None else ""
        from_yaml = score(test, Answer(text=text, tool_calls=calls))
        assert (from_yaml.passed, from_yaml.reason) == (direct.got, direct.reason), case["case_id"]
        checked += 1
    assert checked > 1000


def test_live_simple_imports_whole_with_its_empty_accepted_lists(bfcl_dir: Path, tmp_path: Path) -> None:
    """All 258 entries load (the schema takes `[]`); the two that no answer can pass carry no golden."""
    from engine.suite import load_suites

    import_bfcl("live_simple", bfcl_dir, tmp_path)
    suites, diagnostics = load_suites([tmp_path], golden_check=True)
    assert [d for d in diagnostics if d.severity == "error"] == []
    assert {d.message.split("'")[1] for d in diagnostics} == {
        "auto_loan_payment_start", "bank_hours_start", "acc_routing_start", "atm_finder_start",
        "faq_link_accounts_start", "get_balance_start", "get_transactions_start"}  # one warning each
    tests = {t.id: t for s in suites for t in s.tests}
    assert len(tests) == 258
    assert sorted(i for i, t in tests.items() if t.golden is None) == ["live_simple_106-63-0", "live_simple_112-68-0"]
    assert tests["live_simple_112-68-0"].eval["tool_call"]["args"]["acc_routing_start"] == []


def test_unmeetable_entries_are_exactly_those_bfcl_always_fails(bfcl_dir: Path) -> None:
    """The importer's "no answer can pass" agrees with BFCL's checker on every live entry's gold answers."""
    entries = replay.load_entries(bfcl_dir)
    gold = {c["test_id"]: c["expected_valid"] for c in replay.load_live_conformance()
            if c["case_id"].endswith(":gold_first")}
    said = {test_id for test_id in gold
            if unmeetable((entries[test_id][1] or {})["ground_truth"], entries[test_id][0]["function"])}
    assert said == {test_id for test_id, valid in gold.items() if not valid}
    assert said == {"live_simple_106-63-0", "live_simple_112-68-0", "live_multiple_862-181-3",
                    "live_multiple_964-207-0"}


def test_tools_clash_goes_to_part_files(bfcl_dir: Path, tmp_path: Path) -> None:
    first = import_bfcl("simple_python", bfcl_dir, tmp_path)
    parts = sorted(tmp_path.glob("bfcl_simple_python_part*.yaml"))
    assert first.exists() and parts  # BFCL reuses names like `calculate_area` with different schemas
    text = first.read_text(encoding="utf-8")
    assert text.startswith("# BFCL v4 simple_python: ShishirPatil/gorilla, Apache-2.0.")
    assert "match: bfcl" in text


def test_schema_types_become_json_schema() -> None:
    bfcl = {"type": "dict", "properties": {"x": {"type": "float"}, "pt": {"type": "tuple", "items": {"type": "float"}},
                                            "d": {"type": "dict", "properties": {"k": {"type": "any"}}},
                                            "o": {"type": "string", "optional": True}}, "required": ["x"]}
    assert convert_schema(bfcl) == {
        "type": "object", "required": ["x"],
        "properties": {"x": {"type": "number"}, "pt": {"type": "array", "items": {"type": "number"}},
                       "d": {"type": "object", "properties": {"k": {"type": "string"}}}, "o": {"type": "string"}}}


@pytest.mark.parametrize(("text", "calls"), [
    ("[f(a=1, b='x')]", [{"f": {"a": 1, "b": "x"}}]),
    ("f(a=-3)", [{"f": {"a": -3}}]),
    ("```\n[m.g(c=1+1, t=(1, 2))]\n```", [{"m.g": {"c": 2, "t": [1, 2]}}]),
    ("[f(x=data['k'], y=name)]", [{"f": {"x": "data['k']", "y": "name"}}]),
    ("[f(10, 5)]", [{"f": {}}]),
])
def test_decode_prompting_calls(text: str, calls: list[dict[str, Any]]) -> None:
    assert decode_prompting_calls(text) == calls


@pytest.mark.parametrize("text", ["I cannot help with that.", "```python\n[f(a=1)]\n```", "[1, 2]"])
def test_decode_prompting_calls_refuses_prose(text: str) -> None:
    with pytest.raises(ValueError):
        decode_prompting_calls(text)


def test_cli_imports_and_reports_errors_without_traceback(bfcl_dir: Path, tmp_path: Path) -> None:
    ok = run_engine("import", "bfcl", "parallel", "--data", bfcl_dir, "--out", tmp_path, "--limit", "3")
    assert ok.returncode == 0, ok.stderr
    assert f"wrote {tmp_path / 'bfcl_parallel.yaml'}" in ok.stdout
    live = run_engine("import", "bfcl", "live_parallel", "--data", bfcl_dir, "--out", tmp_path, "--limit", "3")
    assert live.returncode == 0, live.stderr  # the live categories were refused as unknown
    assert f"wrote {tmp_path / 'bfcl_live_parallel.yaml'}" in live.stdout
    assert (tmp_path / "bfcl_parallel.yaml").exists()
    bad = run_engine("import", "bfcl", "parallel", "--data", tmp_path, "--out", tmp_path)
    assert bad.returncode == 2
    assert "BFCL_v4_parallel.json not found; point --data at the folder" in bad.stderr
    assert "Traceback" not in bad.stderr
