"""The files a promptfoo config names, read safely: inside the config's folder, capped, YAML by the engine's loader.

A config is someone else's file, and so is everything it points at (`file://` prompts, tests, vars, asserts).
Every read goes through `Files`: the path is resolved against the folder of the file that names it, and one
that ends outside the config's folder (`file://../../etc/hostname`, or a symlink out of it) is refused unless
the user asked for it (`--allow-outside`); only a regular file is read, and only up to a cap; YAML goes through
`engine.base.yaml` (bounded aliases and nesting, merge keys as js-yaml reads them). Every refusal is a
`ConfigError` naming the place that named the file and the fix.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.base.input_file import InputFileError, read_capped
from engine.base.yaml import MAX_BYTES, FileKind, Positions, load_yaml_text
from engine.errors import ConfigError

__all__ = ["CONFIG", "MAX_FILE_BYTES", "SCRIPTS", "Files", "Loaded", "Where", "file_ref"]

#: The largest file a config may name (a prompt, a var, a test file, an image).
MAX_FILE_BYTES = 20 * 1024 * 1024
CONFIG = FileKind("promptfoo config", "a promptfoo config lists `prompts:`, `providers:` and `tests:`",
                  "move its tests into files it names (`tests: file://tests.yaml`)", merge_keys=True)
#: Files promptfoo runs for what they make (a prompt, tests) instead of reading them.
SCRIPTS = (".js", ".cjs", ".mjs", ".ts", ".cts", ".mts", ".py", ".rb", ".go", ".sh", ".bash", ".exe", ".bat")


def file_ref(value: Any) -> str | None:
    """The path a `file://` reference names, or None for any other value."""
    return value[len("file://"):] if isinstance(value, str) and value.startswith("file://") else None


@dataclass(frozen=True)
class Where:
    """A place in a promptfoo file: the file and the 1-based line (None: the file as a whole)."""

    file: Path
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else str(self.file)


@dataclass(frozen=True)
class Loaded:
    """A YAML (or JSON) file as read: its value, where each value sits, the file."""

    data: Any
    positions: Positions
    file: Path

    def at(self, *path: Any, key: bool = False) -> Where:
        """The place of the value at `path` (of its key with `key`; the nearest ancestor's when the path goes
        further than the file)."""
        return Where(self.file, self.positions.of(tuple(path), key=key)[0])


class Files:
    """Reads what a config names, refusing files outside its folder unless `allow_outside`.

    Args:
        root: The config's folder.
        allow_outside: Read files outside `root` too (`engine import promptfoo --allow-outside`).
    """

    def __init__(self, root: Path, allow_outside: bool = False) -> None:
        self.root = root.resolve()
        self.allow_outside = allow_outside

    def path(self, ref: str, base: Path, where: Where) -> Path:
        """The file `ref` names (relative to `base`, the folder of the file that names it), checked to be inside
        the config's folder."""
        path = base / ref
        try:
            resolved = path.resolve()
        except (OSError, ValueError, RuntimeError) as exc:   # a NUL byte, a symlink loop
            raise ConfigError(f"{where}: {ref!r} is not a file name that can be read ({exc}); fix it") from None
        if not self.allow_outside and not resolved.is_relative_to(self.root):
            raise ConfigError(f"{where}: {ref} is outside the config's folder ({self.root}), so it is not read; "
                              "copy it into that folder, or run `engine import promptfoo --allow-outside` if you "
                              "trust this config")
        return path

    def glob(self, pattern: str, base: Path, where: Where) -> list[Path]:
        """The files a glob matches (relative to `base`), in name order, each checked to be inside the config's
        folder."""
        try:
            found = glob.glob(str(base / pattern), recursive=True)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{where}: the pattern {pattern!r} cannot be read ({exc}); fix it") from None
        matched = sorted(Path(p) for p in found if self.is_file(Path(p)))
        return [self.path(str(p), base, where) for p in matched]

    def is_file(self, path: Path) -> bool:
        """Whether `path` is a file, False for a name that cannot be one (a NUL byte in it)."""
        try:
            return path.is_file()
        except (OSError, ValueError):
            return False

    def read_bytes(self, path: Path, where: Where, cap: int = MAX_FILE_BYTES) -> bytes:
        """The whole file (a regular file of at most `cap` bytes)."""
        try:
            return read_capped(path, "engine import promptfoo", cap)
        except InputFileError as exc:
            raise ConfigError(f"{where}: cannot read {path}: {exc.problem}") from None

    def read_text(self, path: Path, where: Where, cap: int = MAX_FILE_BYTES) -> str:
        """The file as UTF-8 text (a byte-order mark dropped)."""
        data = self.read_bytes(path, where, cap)
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ConfigError(f"{where}: {path} is not UTF-8 text; save it as UTF-8") from None

    def yaml(self, path: Path, where: Where) -> Loaded:
        """A YAML or JSON file read by the engine's loader (bounded aliases and nesting, merge keys)."""
        loaded = load_yaml_text(self.read_text(path, where, MAX_BYTES), str(path), kind=CONFIG)
        if loaded.diagnostics:
            raise ConfigError("\n".join(str(d) for d in loaded.diagnostics))
        return Loaded(loaded.data, loaded.positions, path)
