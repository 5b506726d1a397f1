"""Where the engine's shipped data folders are: `schemas/` and `harnesses/`.

An editable install (what the Makefile does) reads them from the repository beside `engine/`; a
wheel installs them under `<prefix>/share/llm-eval-engine/` (pyproject's data-files).
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent


@cache
def data_dir(name: str) -> Path:
    """The shipped folder `name` ("schemas" or "harnesses"): the repository's, else the installed one.

    Args:
        name: The folder name.
    """
    installed = Path(sys.prefix) / "share" / "llm-eval-engine" / name
    repo = _REPO_ROOT / name
    return repo if repo.is_dir() or not installed.is_dir() else installed
