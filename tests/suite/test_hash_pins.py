"""Test hashes are pinned: they key `resume`, the result caches and `diff`, so a hash that changes is a
regression even when every Test still looks right.

tests/fixtures/hash_pins/ holds copies of the shipped suites (agent, exec, judge, tools, workspaces), the four
shapes of bench/bench_validate.py and features.yaml (messages, content parts with an image, `cases_from`, named
evaluators, a JSON golden, a suite `judge_prompt`, Jinja loops and expressions). hashes.json was written by the
tree at f4a67ce, before the load-speed work of issue #22; the loader must keep giving exactly these hashes.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.suite import load_suites

PINS = Path(__file__).resolve().parents[1] / "fixtures" / "hash_pins"


def test_every_pinned_test_keeps_its_hash() -> None:
    suites, diagnostics = load_suites([PINS], golden_check=True)
    assert [d for d in diagnostics if d.severity == "error"] == []
    got = {f"{suite.id}/{test.id}": test.hash for suite in suites for test in suite.tests}
    pinned = json.loads((PINS / "hashes.json").read_text(encoding="utf-8"))
    assert len(pinned) == 58
    assert got == pinned


def test_the_pins_would_catch_a_changed_test(tmp_path: Path) -> None:
    """A one-character change of a prompt gives a different hash (the pins are not vacuous)."""
    source = (PINS / "features.yaml").read_text(encoding="utf-8")
    (tmp_path / "features.yaml").write_text(source.replace("What is 2 + 2?", "What is 2 + 2 ?"), encoding="utf-8")
    for name in ("dot.png", "capitals.csv"):
        (tmp_path / name).write_bytes((PINS / name).read_bytes())
    (suite,), _ = load_suites([tmp_path / "features.yaml"])
    pinned = json.loads((PINS / "hashes.json").read_text(encoding="utf-8"))
    changed = {test.id for test in suite.tests if test.hash != pinned[f"features/{test.id}"]}
    assert changed == {"plain"}
