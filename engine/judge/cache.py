"""The judge cache: one SQLite file of judge replies, so a re-run or `engine rescore` never pays twice.

Key: sha256 of (the judge model's identity - base_url, api, model id, params - and the full request body,
sample index included). The key holds no API key (the config names an environment variable; its value is
never read here). Where: `$ENGINE_JUDGE_CACHE` when set, else `$XDG_CACHE_HOME/llm-eval-engine/judge/
judge.sqlite` (default `~/.cache/...`). One user-wide file rather than one per run folder: a re-run goes to
a new run folder, and rescore writes a new folder too, so a per-run cache would be found by neither.

A sibling table holds `similar` evaluators' embedding vectors, one row per text, keyed the same way (the
embedding model's identity and a one-text /embeddings request body: engine.judge.embeddings).

Only successful replies are stored (a failed call is retried next time). Writes commit at once (WAL), so a
killed run keeps what it paid for. A cache that cannot be opened or written is not a reason to lose the run:
`get` then misses and `put` is skipped, and `problem` says why. Where the file lives and how it is opened
is shared with the response cache: `engine.client.cache_file`.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.base.jsontext import utf8_safe
from engine.client.cache_file import CacheFile, user_cache_path
from engine.model.model_config import ModelConfig

__all__ = ["JudgeCache", "cache_key", "default_path"]

ENV = "ENGINE_JUDGE_CACHE"


def default_path() -> Path:
    """`$ENGINE_JUDGE_CACHE`, else the user's cache folder (`engine.client.cache_file`)."""
    return user_cache_path(ENV, "judge")


def cache_key(model: ModelConfig, body: Mapping[str, Any], sample: int) -> str:
    """The key of one judgement: the judge model's identity and the full request body."""
    # an embedded model's port changes every run: its cache_identity names what answers instead
    identity = {"base_url": model.cache_identity or model.base_url, "api": model.api, "model": model.model,
                "params": dict(model.params), "body": body, "sample": sample}
    text = json.dumps(identity, sort_keys=True, ensure_ascii=False, default=str)
    # surrogatepass: an answer holding half a UTF-16 pair (a reply's "\\ud800" escape) still has a key; every
    # other text encodes to the same bytes as before, so stored judgements keep answering
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class JudgeCache:
    """Judge replies on disk, by `cache_key`.

    Args:
        path: The SQLite file (its folder is created).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = CacheFile(path, [
            "CREATE TABLE IF NOT EXISTS judge (key TEXT PRIMARY KEY, text TEXT NOT NULL, "
            "prompt_tokens INTEGER, completion_tokens INTEGER)",
            # `similar` evaluators' vectors (engine.judge.embeddings): one row per embedded text, float64 bytes
            "CREATE TABLE IF NOT EXISTS embedding (key TEXT PRIMARY KEY, vector BLOB NOT NULL)",
        ], "the judge cache")

    @property
    def problem(self) -> str | None:
        """Why the cache is not (or no longer) used, or None."""
        problem = self._file.problem
        return None if problem is None else problem + "; judgements are not cached"

    def get(self, key: str) -> tuple[str, int | None, int | None] | None:
        """(text, prompt_tokens, completion_tokens) of a stored reply, or None."""
        rows = self._file.read("SELECT text, prompt_tokens, completion_tokens FROM judge WHERE key = ?", (key,))
        return (str(rows[0][0]), rows[0][1], rows[0][2]) if rows else None

    def put(self, key: str, text: str, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """Store one reply (committed at once)."""
        self._file.write("INSERT OR REPLACE INTO judge VALUES (?, ?, ?, ?)",
                         (key, utf8_safe(text), prompt_tokens, completion_tokens))

    def get_vector(self, key: str) -> tuple[float, ...] | None:
        """A stored embedding vector (the `embedding` table, keyed like a judgement), or None."""
        rows = self._file.read("SELECT vector FROM embedding WHERE key = ?", (key,))
        return tuple(array("d", bytes(rows[0][0]))) if rows else None

    def put_vector(self, key: str, vector: tuple[float, ...]) -> None:
        """Store one embedding vector as float64 bytes (exact round trip; committed at once)."""
        self._file.write("INSERT OR REPLACE INTO embedding VALUES (?, ?)", (key, array("d", vector).tobytes()))

    def close(self) -> None:
        """Close the file."""
        self._file.close()
