"""The response cache: identical requests answered from one SQLite file, so a re-run never pays twice.

What is identical (`cache_key`, a sha256): the endpoint URL (credentials in it masked: userinfo and
credential-named query values; `?api-version=` kept), the full request
body - model id, messages or prompt, tools, tool_choice, response_format, max_tokens, temperature, seed and
every other param - and the sample index. Left out on purpose: `stream` and `stream_options`, because a
streamed and a whole reply carry the same answer (`engine.client.response` reads both into one
`CallResult`), so a `--no-stream` re-run finds what a streamed run paid for. The API key is never read here:
it lives in the Authorization header, which the key does not see, and stored replies are already masked by
the client (`engine.redact`).

When (`use_cache`): `engine run --cache` always; `--no-cache` never; by default only for a deterministic
request (temperature 0) asked once (no repeats), because repeats are meant to be independent samples. An
explicit `--cache` with repeats keys each attempt by its index: the first run makes every call, a re-run
replays the same samples (attempt i gets run 1's attempt i), so the samples stay distinct. Models served by
the engine itself (`builtin:`) are keyed by their `cache_identity` (model package, llama-cpp-python release,
the engine's server code) instead of their address, which changes every run: free calls, but minutes of a
2-core machine, so a second `make run` replays them (the README measures it).

What is stored: successful, complete replies only - never an error, a truncated reply (finish_reason
`length`, a stream cut short) or a bad response; those are asked again next time. A hit comes back as a
`CallResult` with `cached=True`, no latency or TTFT (nothing was timed) and no retries.

When stored: a reply `put` while an event loop runs waits in memory (answering `get` from there) until the
end of the loop's current turn, and every reply of that turn is committed in one transaction (not one
transaction per reply); without a running loop, at once. A kill -9
loses at most the replies of one turn: calls that were in flight together, never more than the concurrency.

Where: `$ENGINE_RESPONSE_CACHE`, else `$XDG_CACHE_HOME/llm-eval-engine/responses/responses.sqlite`
(`engine.client.cache_file`, shared with the judge cache). `engine cache info|clear` reads and trims it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.base.jsontext import dumps_compact_text, dumps_sorted_unicode, loads
from engine.client.cache_file import CacheFile, user_cache_path
from engine.client.response import CallResult
from engine.client.tool_calls import tool_call
from engine.redact import mask_url

if TYPE_CHECKING:
    from engine.model.model_config import ModelConfig

__all__ = ["CacheInfo", "ResponseCache", "cache_key", "default_path", "keyed_url", "storable",
           "use_cache"]

ENV = "ENGINE_RESPONSE_CACHE"
_NOT_KEYED = frozenset({"stream", "stream_options"})   # the same answer either way
_SCHEMA = ["CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, endpoint TEXT, "
           "created REAL NOT NULL, value TEXT NOT NULL)",
           "CREATE INDEX IF NOT EXISTS responses_model ON responses (model)"]
_INSERT = "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)"


def default_path() -> Path:
    """`$ENGINE_RESPONSE_CACHE`, else the user's cache folder."""
    return user_cache_path(ENV, "responses")


def use_cache(mode: bool | None, model: ModelConfig, temperature: float | None, attempts: int) -> bool:
    """Whether a call may be answered from (and stored in) the cache.

    Args:
        mode: True for `--cache`, False for `--no-cache`, None for the default (deterministic requests only).
        model: The model (an embedded `builtin:` model only once its server runs and gave it a
            `cache_identity`: the port it answers on changes every run).
        temperature: The request's resolved temperature (None: the server's default, not deterministic).
        attempts: How many attempts the test gets in this run.
    """
    if mode is False or (model.builtin and not model.cache_identity):
        return False
    return mode is True or (temperature == 0 and attempts == 1)


def _endpoint(url: str) -> str:
    """The URL without credentials or query string (what the `endpoint` column and the key show)."""
    return mask_url(url.partition("?")[0].partition("#")[0]) or ""


def keyed_url(model: ModelConfig, url: str) -> str:
    """The URL a request is keyed by: its own, or under the model's `cache_identity` (an embedded model)."""
    if model.cache_identity and model.base_url and url.startswith(model.base_url):
        return model.cache_identity + url[len(model.base_url):]
    return url


def cache_key(url: str, body: Mapping[str, Any], sample: int) -> str:
    """The key of one request: its endpoint, its body (less the streaming flags) and the sample index.

    Args:
        url: The full endpoint URL (`PreparedRequest.url`).
        body: The request body as sent.
        sample: The attempt index (0 unless an explicit `--cache` runs repeats).
    """
    identity = {"url": _masked(url), "body": {k: v for k, v in body.items() if k not in _NOT_KEYED},
                "sample": sample}
    # The text of `json.dumps(identity, sort_keys=True, ensure_ascii=False, default=str)`, byte for byte, so
    # entries stored by earlier versions keep answering (a compact orjson text would make every key new).
    # surrogatepass: a conversation holding half a UTF-16 pair (a reply's "\\ud800" escape) still has a key
    return hashlib.sha256(dumps_sorted_unicode(identity).encode("utf-8", "surrogatepass")).hexdigest()


@functools.lru_cache(maxsize=64)
def _masked(url: str) -> str:
    """A run's few endpoint URLs as keyed, worked out once each: userinfo and credential-named query values
    masked (a new key keeps its replies), other query values kept (`api-version=` names another API)."""
    return mask_url(url, secrets_only=True) or ""


def storable(result: CallResult) -> bool:
    """Whether a reply may be kept: a complete success (no error, not truncated)."""
    return result.error is None and not result.truncated and not result.cached


def _encode(result: CallResult) -> str:
    return dumps_compact_text({
        "text": result.text, "reasoning": result.reasoning,
        "tool_calls": [[c.id, c.name, c.raw_arguments] for c in result.tool_calls],
        "finish_reason": result.finish_reason, "served_model": result.served_model,
        "system_fingerprint": result.system_fingerprint, "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens, "cached_tokens": result.cached_tokens,
        "cache_write_tokens": result.cache_write_tokens, "reasoning_tokens": result.reasoning_tokens,
        "notes": list(result.notes), "echo": result.echo,
    })


def _decode(text: str) -> CallResult:
    data = loads(text)
    return CallResult(
        text=data["text"], reasoning=data.get("reasoning"),
        tool_calls=tuple(tool_call(name, raw, call_id) for call_id, name, raw in data.get("tool_calls") or ()),
        finish_reason=data.get("finish_reason"), served_model=data.get("served_model"),
        system_fingerprint=data.get("system_fingerprint"), prompt_tokens=data.get("prompt_tokens"),
        completion_tokens=data.get("completion_tokens"), cached_tokens=data.get("cached_tokens"),
        cache_write_tokens=data.get("cache_write_tokens"), reasoning_tokens=data.get("reasoning_tokens"),
        notes=list(data.get("notes") or ()), echo=data.get("echo"), cached=True)


@dataclass(frozen=True)
class CacheInfo:
    """What `engine cache info` shows."""

    path: Path
    exists: bool
    entries: int
    size_bytes: int                      # the file and its WAL
    by_model: dict[str, int]
    oldest: float | None                 # unix time of the oldest entry
    newest: float | None
    problem: str | None


class ResponseCache:
    """Replies on disk, by `cache_key`; safe to share between processes (WAL).

    Args:
        path: The SQLite file (its folder is created).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = CacheFile(path, _SCHEMA, "the response cache")
        self.hits = 0
        self.stored = 0
        # key -> the row to insert, until the commit scheduled at the end of the event loop's turn
        self._pending: dict[str, tuple[str, str, str, float, str]] = {}

    @property
    def problem(self) -> str | None:
        """Why the cache is not (or no longer) used, or None."""
        return self._file.problem

    @property
    def usable(self) -> bool:
        """Whether the file is open (a file that could not be opened is not)."""
        return self._file.usable

    def get(self, key: str) -> CallResult | None:
        """The stored reply (`cached=True`), or None; an entry that cannot be read is a miss."""
        held = self._pending.get(key)
        if held is not None:
            text = held[4]
        else:
            rows = self._file.read("SELECT value FROM responses WHERE key = ?", (key,))
            if not rows:
                return None
            text = str(rows[0][0])
        try:
            result = _decode(text)
        except (ValueError, TypeError, KeyError):
            return None
        self.hits += 1
        return result

    def put(self, key: str, url: str, model_id: str, result: CallResult) -> None:
        """Keep a reply when it is `storable` (committed at the end of the event loop's turn, or at once).

        Args:
            key: `cache_key` of the request.
            url: The endpoint URL (stored without credentials or query).
            model_id: The model id asked for (what `info` groups by and `clear --model` matches).
            result: The reply, already masked by the client.
        """
        if not storable(result):
            return
        row = (key, model_id, _endpoint(url), time.time(), _encode(result))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:   # no event loop: nothing to gather replies with
            if self._file.write(_INSERT, row):
                self.stored += 1
            return
        if not self._pending:
            loop.call_soon(self.commit)   # after every callback of this turn: the turn's replies together
        self._pending[key] = row

    def commit(self) -> None:
        """Write the replies `put` holds, in one transaction (nothing to do when none wait)."""
        if not self._pending:
            return
        rows, self._pending = list(self._pending.values()), {}
        self.stored += self._file.write_many(_INSERT, rows)

    def info(self) -> CacheInfo:
        """Entries, size and entries by model."""
        self.commit()
        rows = self._file.read("SELECT model, COUNT(*), MIN(created), MAX(created) FROM responses GROUP BY model")
        by_model = {str(model): int(n) for model, n, _, _ in sorted(rows)}
        size = sum(p.stat().st_size for p in (self.path, self.path.with_name(self.path.name + "-wal")) if p.exists())
        return CacheInfo(self.path, self.path.exists(), sum(by_model.values()), size, by_model,
                         min((r[2] for r in rows), default=None), max((r[3] for r in rows), default=None),
                         self.problem)

    def clear(self, *, model: str | None = None, older_than_days: float | None = None) -> int:
        """Delete entries (all, or those of one model id and/or older than some days); how many went."""
        self.commit()
        where: list[str] = []
        args: list[Any] = []
        if model is not None:
            where.append("model = ?")
            args.append(model)
        if older_than_days is not None:
            where.append("created < ?")
            args.append(time.time() - older_than_days * 86400)
        sql = "DELETE FROM responses" + (" WHERE " + " AND ".join(where) if where else "")
        removed = self._file.write(sql, args)
        if model is None and older_than_days is None:
            self._file.write("VACUUM")
        return removed

    def close(self) -> None:
        """Commit what is held, and close the file."""
        self.commit()
        self._file.close()
