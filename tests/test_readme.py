"""The README's example suite and models file are real: they validate, goldens included."""

from __future__ import annotations

import re
from pathlib import Path

from engine.suite import load_models, load_suites

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
YAML_BLOCKS = re.findall(r"```yaml\n(.*?)```", README, flags=re.S)


def test_the_readme_suite_validates_with_its_goldens(tmp_path: Path) -> None:
    suite_text = next(b for b in YAML_BLOCKS if b.lstrip().startswith("# yaml-language-server"))
    assert len(suite_text.strip().splitlines()) <= 25
    path = tmp_path / "example.yaml"
    path.write_text(suite_text, encoding="utf-8")
    suites, diagnostics = load_suites([path], golden_check=True)
    assert [str(d) for d in diagnostics] == []
    assert sum(len(s.tests) for s in suites) == 3


def test_the_readme_models_file_validates(tmp_path: Path) -> None:
    models_text = next(b for b in YAML_BLOCKS if b.startswith("models:"))
    path = tmp_path / "models.yaml"
    path.write_text(models_text, encoding="utf-8")
    models, diagnostics = load_models(path)
    assert [str(d) for d in diagnostics] == []
    assert models["gpt-4o-mini"].api_key_env == "OPENAI_API_KEY"
    assert models["gemma"].builtin == "gemma-3-270m"
