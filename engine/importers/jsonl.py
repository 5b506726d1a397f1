"""A benchmark's JSONL file read as an importer needs it: one JSON object a line (`.gz` too), each line capped,
and every problem a `ConfigError` naming FILE:LINE and what file was expected."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import ConfigError

__all__ = ["MAX_LINE", "read_jsonl"]

#: The longest line read (a benchmark's row is a few KB).
MAX_LINE = 1 << 20


def read_jsonl(path: Path, expected: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each non-blank line of `path` as (its line number, its object).

    Args:
        path: A .jsonl file, or a gzipped one (.gz).
        expected: What file this should have been, for the messages ("give HumanEval.jsonl(.gz)").

    Raises:
        ConfigError: The file cannot be read, or a line is too long, not JSON or not an object.
    """
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz"
              else open(path, encoding="utf-8")) as handle:
            for number, line in enumerate(iter(lambda: handle.readline(MAX_LINE + 1), ""), 1):
                if len(line) > MAX_LINE:
                    raise ConfigError(f"{path}:{number}: a line longer than {MAX_LINE} characters; {expected}")
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise ConfigError(f"{path}:{number}: not JSON ({exc}); {expected}") from None
                if not isinstance(row, dict):
                    raise ConfigError(f"{path}:{number}: expected a JSON object per line; {expected}")
                yield number, row
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}; {expected}") from None
