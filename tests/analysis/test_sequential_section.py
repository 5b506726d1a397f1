"""The `engine analyze` section of a run `--until-decided` stopped (engine/analysis/sequential_section.py).

The end-to-end path (a real run, table and JSON output, a resumed folder) is tests/run/test_until_decided_run.py;
here the formats and the folders without a record.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.analysis.sequential_section import decisions, with_sequential

RECORD = {
    "model_a": "a", "model_b": "b", "alpha": 0.05, "seed": 9, "verdict": "a better", "better": "a",
    "reason": "decided", "tests_in_suite": 50, "tests_read": 12, "tests_used": 11, "tests_excluded": 1,
    "tests_decided_at": 12, "tests_dispatched": 13, "tests_not_run": 37, "tests_not_run_names": [],
    "mean_diff": 0.5, "cs_lo": 0.02, "cs_hi": 0.9, "e_value": 21.5, "wealth_a": 42.0, "wealth_b": 1.0,
    "threshold": 20.0, "lookahead": 1, "jobs_made": 26, "jobs_full_run": 100, "jobs_saved": 74,
}


def _folder(tmp_path: Path, name: str, manifest: dict | None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    if manifest is not None:
        (folder / "_manifest.json").write_text(json.dumps(manifest))
    return folder / "part-00000.parquet"


def test_markdown_puts_the_decision_first_and_labels_the_tables(tmp_path: Path) -> None:
    part = _folder(tmp_path, "run", {"complete": False, "stopped": "decided", "until_decided": RECORD})
    text = with_sequential("### Models\n", "markdown", [part, part])
    assert text.index("### Sequential stop") < text.index("### Models")
    assert text.count("### Sequential stop") == 1   # one folder, however many of its files
    assert "sequentially stopped sample: 13 of 50 tests" in text and "| calls made / full run (saved) | 26 / 100 " \
        "(74 saved, 74%) |" in text
    assert "1 left out: no scored attempt for a model" in text


def test_json_adds_the_record_and_csv_is_left_alone(tmp_path: Path) -> None:
    part = _folder(tmp_path, "run", {"complete": True, "stopped": None, "until_decided": RECORD})
    payload = json.loads(with_sequential('{"models": []}', "json", [part]))
    assert payload["until_decided"][0]["verdict"] == "a better" and payload["until_decided"][0]["completed"]
    assert with_sequential("model,score\n", "csv", [part]) == "model,score\n"


def test_folders_without_a_record_print_nothing_more(tmp_path: Path) -> None:
    plain = _folder(tmp_path, "plain", {"complete": True, "stopped": None})
    broken = _folder(tmp_path, "broken", None)
    (broken.parent / "_manifest.json").write_text("{not json")
    bare = _folder(tmp_path, "bare", None)
    assert decisions([plain, broken, bare]) == []
    assert with_sequential("tables\n", "table", [plain, broken, bare]) == "tables\n"
