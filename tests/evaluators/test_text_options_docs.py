"""The docs/evaluators.md examples of `ifeval`, `whole_word`, `length` words, `is_json` strict and `regex` compile
as written (each `eval:` line of those sections' YAML blocks)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.base.yaml import load_yaml_text
from engine.evaluators import compile_spec

DOC = (Path(__file__).resolve().parents[2] / "docs" / "evaluators.md").read_text(encoding="utf-8")
SECTIONS = ["contains", "not_contains", "regex", "length", "is_json", "ifeval"]


def _examples() -> list[tuple[str, str]]:
    out = []
    for kind in SECTIONS:
        body = re.split(r"\n##+ ", DOC.split(f"\n### `{kind}`\n", 1)[1], maxsplit=1)[0]
        for block in re.findall(r"```yaml\n(.*?)```", body, flags=re.S):
            out += [(kind, line) for line in block.splitlines() if line.startswith("eval:")]
    return out


@pytest.mark.parametrize(("kind", "line"), _examples(), ids=[f"{k}:{n}" for n, (k, _) in enumerate(_examples())])
def test_the_example_compiles(kind: str, line: str) -> None:
    spec = load_yaml_text(line, "evaluators.md").data["eval"]   # read as a suite is read
    node = compile_spec(spec, {"golden": "x"})
    assert node.problem is None and kind in node.kinds()


def test_every_new_option_has_an_example() -> None:
    text = " ".join(line for _, line in _examples())
    assert all(option in text for option in ("whole_word: true", "words: word_chars", "strict: true", "loose: true"))
