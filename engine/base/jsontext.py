"""JSON text exactly as `json.dumps` writes it, without its per-call set-up.

`json.dumps(obj, ensure_ascii=False)` builds a `JSONEncoder` and then a C encoder on every call, and
even the plain `json.dumps(obj)` builds the C encoder each time; for the small objects of a call
(the request body, the prompt, the journal row) that set-up is a large share of the cost. These
encoders are built once. Output is identical to `json.dumps` with default separators
(`", "`, `": "`), `allow_nan=True`, no key sorting, and no circular check (the values are trees).

The per-call hot path (request bodies, journal rows, streamed events) uses the compact orjson forms
below (`dumps_compact`, `dumps_compact_text`, `loads`): the same JSON values, several times cheaper.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any

import orjson

# None on an interpreter without the C accelerator (then the plain encoder is used).
c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)


def _not_serialisable(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _make(ensure_ascii: bool, *, sort_keys: bool = False, separators: tuple[str, str] = (", ", ": "),
          default: Callable[[Any], Any] = _not_serialisable) -> Callable[[Any], str]:
    item_separator, key_separator = separators
    if c_make_encoder is None:
        return json.JSONEncoder(ensure_ascii=ensure_ascii, check_circular=False, sort_keys=sort_keys,
                                separators=separators, default=default).encode
    string = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    encoder = c_make_encoder(None, default, string, None, key_separator, item_separator, sort_keys, False, True)

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return string(value)
        return "".join(encoder(value, 0))

    return encode


#: `json.dumps(value, ensure_ascii=False)`.
dumps_unicode: Callable[[Any], str] = _make(ensure_ascii=False)
#: `json.dumps(value)`.
dumps_ascii: Callable[[Any], str] = _make(ensure_ascii=True)
#: `json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)` (the response cache's key text).
dumps_sorted_unicode: Callable[[Any], str] = _make(ensure_ascii=False, sort_keys=True, default=str)
#: `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)`: the canonical
#: text test hashes are made of (engine.suite.hashing). 4.5x faster than `json.dumps` on a scalar, 2.3x on a
#: message list (timeit, issue #22).
dumps_canonical: Callable[[Any], str] = _make(ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                                              default=str)


# -- compact JSON and fast decoding (orjson), for the per-call hot path --------------------------------
#
# orjson encodes a request body in 0.3 us against 3.2 us, a journal row in 2.0 us against 13.6 us, and
# decodes the 52 events of a streamed answer in 25 us against 62 us (timeit, bench/README.md "Issue #22").
# Its text is compact (no spaces after `,` and `:`) and keeps non-ASCII characters as UTF-8: the same
# JSON values, not the same bytes as `json.dumps`, so it is used only where the bytes are not kept as a
# key (the response cache's key is still `json.dumps` text: engine.client.response_cache).

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
