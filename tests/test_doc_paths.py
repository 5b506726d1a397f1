"""Every repository file the documentation cites by path exists (docs/evaluators.md once cited a dropped script).

Paths are read from prose and inline code, not from fenced examples (those show files a user would write,
such as `suites/roman.yaml`). A path with `*` must match at least one file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])
CITED = re.compile(r"\b(?:engine|tests|bench|harnesses|schemas|suites|docs)/[A-Za-z0-9_./*-]*[A-Za-z0-9_*]"
                   r"\.(?:py|md|yaml|json|toml)\b")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def cited_paths(text: str) -> set[str]:
    """The repository paths named in `text`, fenced code blocks left out."""
    return set(CITED.findall(FENCE.sub("", text)))


def test_cited_paths_are_found_in_prose_only() -> None:
    text = "See `tests/evaluators/fill_reasons.py` and engine/suite/yaml.py.\n```yaml\n# suites/roman.yaml\n```\n"
    assert cited_paths(text) == {"tests/evaluators/fill_reasons.py", "engine/suite/yaml.py"}


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_cited_path_exists(doc: Path) -> None:
    missing = sorted(p for p in cited_paths(doc.read_text(encoding="utf-8"))
                     if not (any(ROOT.glob(p)) if "*" in p else (ROOT / p).exists()))
    assert missing == [], f"{doc.relative_to(ROOT)} cites files that do not exist: {missing}"
