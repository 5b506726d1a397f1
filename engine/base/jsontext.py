"""JSON text two ways: `json.dumps`'s exact text where the bytes are kept as a key, orjson on the hot path.

Test hashes and cache keys are made of `json.dumps` text, so they must never change: the encoders below are
`json.JSONEncoder`s with `json.dumps`'s options, built once. The per-call hot path (request bodies, journal
rows, streamed events) uses the compact orjson forms (`dumps_compact`, `dumps_compact_text`, `loads`): the
same JSON values, not the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

#: `json.dumps(value, ensure_ascii=False)`.
dumps_unicode: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False).encode
#: `json.dumps(value)`.
dumps_ascii: Callable[[Any], str] = json.dumps
#: `json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)`: the response cache's key text.
dumps_sorted_unicode: Callable[[Any], str] = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str).encode
#: `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)`: the canonical
#: text test hashes are made of (engine.suite.hashing).
dumps_canonical: Callable[[Any], str] = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                                         default=str).encode


# -- compact JSON and decoding (orjson), for the per-call hot path --------------------------------------
#
# Its text is compact (no spaces after `,` and `:`) and keeps non-ASCII characters as UTF-8: used only where
# the bytes are not kept as a key (the response cache's key is `json.dumps` text: engine.client.response_cache).

_OrjsonError = (orjson.JSONEncodeError, OverflowError)


def dumps_compact(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes (a request body on the wire).

    What orjson cannot write (an integer past 64 bits, a non-string dict key) goes through
    `json.dumps`, which writes it or raises `TypeError` as before. NaN and infinities are written as
    `null` (`json.dumps` would write `NaN`, which no JSON parser on a server accepts).
    """
    try:
        return orjson.dumps(value)
    except _OrjsonError:
        return dumps_ascii(value).encode()


def dumps_compact_text(value: Any) -> str:
    """`dumps_compact` as text (a journal row, a cached reply: SQLite keeps it as TEXT), always valid UTF-8.

    Text orjson refuses goes through `json.dumps`; a string holding half a UTF-16 pair (a reply's `"\\ud800"`
    escape, which `json.loads` accepts) is written with U+FFFD in its place (`utf8_safe`).
    """
    try:
        return orjson.dumps(value).decode()
    except _OrjsonError:
        return utf8_safe(dumps_unicode(value))


def utf8_safe(text: str) -> str:
    """`text` with every unpaired UTF-16 surrogate replaced by U+FFFD, so UTF-8 can hold it.

    JSON may escape half a surrogate pair (`"\\ud800"`) and Python's decoder reads it as a lone surrogate,
    which no UTF-8 text can hold: SQLite, Arrow and a UTF-8 file refuse it (`UnicodeEncodeError`). The
    check is one encode, paid only on the fallback paths that may meet such text (orjson refuses it first).
    """
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def loads(data: str | bytes) -> Any:
    """`json.loads`, decoded by orjson when it can read the text exactly as `json.loads` would.

    orjson refuses what Python's decoder accepts (NaN, Infinity, lone surrogates, nesting past 1,024
    levels, numbers beyond a double): those go to `json.loads`, which decides as before (and raises
    `RecursionError` where it did). One silent difference is left to the caller: orjson reads an integer
    beyond 64 bits as a float; where numbers are kept (tool-call arguments) use `json.loads`.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
