"""The YAML examples of docs/tutorial.md and docs/coming-from.md are real: suites validate with their goldens,
models files load, and a promptfoo config imports (`engine import promptfoo`) into suites that validate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.importers.promptfoo import import_promptfoo
from engine.suite import load_models, load_suites

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["docs/tutorial.md", "docs/coming-from.md"]
BLOCKS = [(doc, n, block) for doc in DOCS
          for n, block in enumerate(re.findall(r"```yaml\n(.*?)```", (ROOT / doc).read_text(encoding="utf-8"),
                                               flags=re.S))]


def _kind(block: str) -> str:
    lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    first = lines[0] if lines else ""
    if "promptfooconfig" in block.splitlines()[0]:
        return "promptfoo"
    return "models" if first.startswith("models:") else "suite" if first.startswith("suite:") else "unknown"


def test_every_block_is_recognised() -> None:
    assert len(BLOCKS) >= 8
    assert [f"{doc}#{n}" for doc, n, block in BLOCKS if _kind(block) == "unknown"] == []


@pytest.mark.parametrize(("doc", "n", "block"), BLOCKS, ids=[f"{d}#{n}" for d, n, _ in BLOCKS])
def test_the_example_loads(doc: str, n: int, block: str, tmp_path: Path) -> None:
    kind = _kind(block)
    path = tmp_path / ("promptfooconfig.yaml" if kind == "promptfoo" else f"example{n}.yaml")
    path.write_text(block.replace("../schemas/", f"{ROOT}/schemas/"), encoding="utf-8")
    if kind == "models":
        _, problems = load_models(path)
        assert [str(p) for p in problems] == []
        return
    paths = [path]
    if kind == "promptfoo":
        imported = import_promptfoo(path, tmp_path / "imported")
        assert [str(note) for note in imported.notes] == [] and imported.tests >= 1
        paths = imported.suites
    suites, diagnostics = load_suites(paths, golden_check=True)
    assert [str(d) for d in diagnostics] == []
    assert sum(len(s.tests) for s in suites) >= 1
