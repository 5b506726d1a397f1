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


def test_the_tutorials_validate_says_what_the_page_says(tmp_path: Path) -> None:
    """Section 5: `engine validate suites/ --models models.yaml` on the page's own files notes the one floor that
    raises a suite's max_tokens (`local` sets none: 1024); the embedded entries' floor is the suite's 64."""
    from tests.engine_proc import run_engine

    page = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
    (tmp_path / "suites").mkdir()
    for name, text in re.findall(r"Write `([\w-]+\.yaml)`[^\n]*:\n\n```yaml\n(.*?)```", page, re.S):
        (tmp_path / "suites" / name).write_text(text, encoding="utf-8")
    models = re.search(r"```yaml\n# models.yaml\n(.*?)```", page, re.S)
    assert models
    (tmp_path / "models.yaml").write_text(models.group(1), encoding="utf-8")
    assert "raised to 1024 for `local`" in page.replace("\n", " ")   # what the page says the note is
    done = run_engine("validate", "suites/", "--models", "models.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "suites/support.yaml:7:1: note: max_tokens 64 of test 'refund-window' is raised to 1024 for local: a model's "
        "params.max_tokens (else 1024) is a floor a test can raise but not lower, so a reasoning model is not "
        "starved; a lower params.max_tokens in the models file lets the test's value through",
        "0 errors, 0 warnings in 4 files (6 tests loaded)"]
