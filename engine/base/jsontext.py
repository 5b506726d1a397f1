"""JSON text exactly as `json.dumps` writes it, without its per-call set-up.

`json.dumps(obj, ensure_ascii=False)` builds a `JSONEncoder` and then a C encoder on every call, and
even the plain `json.dumps(obj)` builds the C encoder each time; for the small objects of a call
(the request body, the prompt, the journal row) that set-up is a large share of the cost. These
encoders are built once. Output is identical to `json.dumps` with default separators
(`", "`, `": "`), `allow_nan=True`, no key sorting, and no circular check (the values are trees).
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any

# None on an interpreter without the C accelerator (then the plain encoder is used).
c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)


def _not_serialisable(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _make(ensure_ascii: bool) -> Callable[[Any], str]:
    if c_make_encoder is None:
        return json.JSONEncoder(ensure_ascii=ensure_ascii, check_circular=False).encode
    string = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    encoder = c_make_encoder(None, _not_serialisable, string, None, ": ", ", ", False, False, True)

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return string(value)
        return "".join(encoder(value, 0))

    return encode


#: `json.dumps(value, ensure_ascii=False)`.
dumps_unicode: Callable[[Any], str] = _make(ensure_ascii=False)
#: `json.dumps(value)`.
dumps_ascii: Callable[[Any], str] = _make(ensure_ascii=True)
