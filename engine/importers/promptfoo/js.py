"""JavaScript's values as promptfoo prints and reads them, and `NotCarried`.

promptfoo is JavaScript: what a prompt asks and what an assert compares depend on String(value),
JSON.stringify, String.prototype.trim and `typeof value === "number"`. These give the same text and numbers
from the values the engine's YAML loader reads. `NotCarried` is what every part of the import raises for
something of the config it cannot reproduce as promptfoo runs it.
"""

from __future__ import annotations

import decimal
import json
import math
from collections.abc import Mapping
from typing import Any

from jinja2 import Undefined

__all__ = ["NotCarried", "js_json", "js_number", "js_string", "js_text", "js_trim"]

# What JavaScript's String.prototype.trim() removes (WhiteSpace and LineTerminator).
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            "\u2028\u2029\u202f\u205f\u3000\ufeff"


class NotCarried(Exception):
    """Something of the config this importer cannot reproduce as promptfoo runs it; the message says what."""


def js_trim(text: str) -> str:
    """`text.trim()` as JavaScript trims."""
    return text.strip(_JS_SPACE)


def _js_number(value: float) -> str:
    """A number as JavaScript's String() writes it: 2.0 is "2", 1e-7 is "1e-7", 1e21 is "1e+21"."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    shortest = repr(float(value))          # the shortest digits that read back as the same double, as JS has
    digits = decimal.Decimal(shortest)
    if 1e-6 <= abs(value) < 1e21:
        text = format(digits, "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    sign, mantissa, exponent = digits.normalize().as_tuple()
    numerals = "".join(map(str, mantissa))
    power = len(numerals) - 1 + int(exponent)
    body = numerals[0] + ("." + numerals[1:] if len(numerals) > 1 else "")
    return ("-" if sign else "") + f"{body}e{'+' if power >= 0 else '-'}{abs(power)}"


def js_text(value: Any) -> str:
    """`String(value)`: as js_string, but null is "null" (what String.replace puts in for a null var)."""
    return "null" if value is None else js_string(value)


def js_string(value: Any) -> str:
    """A value as Nunjucks prints it: JavaScript's String(value), with null and undefined as ""."""
    if value is None or isinstance(value, Undefined):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _js_number(value)
    if isinstance(value, (list, tuple)):
        return ",".join(js_string(item) for item in value)
    if isinstance(value, Mapping):
        return "[object Object]"
    return str(value)


def _js_plain(value: Any) -> Any:
    """A value as JSON.stringify sees it: whole floats as integers, NaN and Infinity as null."""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return int(value) if value.is_integer() and abs(value) < 2 ** 53 else value
    if isinstance(value, Mapping):
        return {str(k): _js_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_js_plain(v) for v in value]
    return value


def js_json(value: Any, indent: int | str | None = None) -> str:
    """`JSON.stringify(value, null, indent)`."""
    if isinstance(value, Undefined):
        return ""
    spaces = indent if isinstance(indent, str) else (" " * min(10, int(indent)) if indent else None)
    return json.dumps(_js_plain(value), ensure_ascii=False, indent=spaces or None,
                      separators=(",", ": ") if spaces else (",", ":"))


def js_number(value: Any, what: str) -> float:
    """A number of the config (a threshold, a weight) as promptfoo takes one, a JavaScript number that is not
    NaN; NotCarried when it is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise NotCarried(f"its {what} {js_string(value)!r} is not a number")
    return float(value)
