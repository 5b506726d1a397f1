"""The last balanced JSON object or array in a text, found with work linear in the text.

What it finds is what trying `json.JSONDecoder.raw_decode` at every `{` and `[` finds (left to right: a value
that decodes is taken and the search goes on after it; the last one taken wins), the reference the tests hold it
to. Trying every start is quadratic (a decode from each `[` of `[[[[...` or `{"a":{"a":...` reads to the end of
the text, and each failure counts the newlines before its place): a model could turn its fail into an error row
by writing an answer the search takes minutes over. Here each container (an object or array at a `{` or `[`) is
recognized once, by a pushdown pass over the tokens the decoder reads, and its outcome (its end, or that it is
not JSON) is remembered by its start: a container reads the same wherever it stands, inside another or alone,
so a later start that an earlier read went through is answered from memory. A start inside a string of an
earlier read is read afresh, but two reads that disagree on where strings are at one place disagree from there
to their ends (a quote closes the string of one and opens one for the other), so each character is tokenized by
at most two reads. The decoder then reads the one container taken.

One departure, for JSON no answer means: a container nested more than `MAX_DEPTH` levels deep is not taken (the
decoder's own limit is the interpreter's recursion limit, which depends on where it is called); its innermost
`MAX_DEPTH` levels can be. An integer longer than `int()` reads (`sys.get_int_max_str_digits`) is not JSON here,
as for the decoder.
"""

from __future__ import annotations

import re
import sys

#: The deepest nesting of a container the search takes, well inside what `raw_decode` reads before the
#: interpreter's recursion limit (1000 frames, some of them the caller's).
MAX_DEPTH = 500

# One token after JSON whitespace, as the decoder reads it: 1 a bracket, brace, comma or colon; 2 a string
# (strict: no control character, only JSON's escapes); 3 a number; 4 a literal (NaN and Infinity too). No
# possessive repeats or atomic groups: Python before 3.11.5 matches some wrongly (`1e` as a number; gh-106052),
# and none is needed: each part reads one way, so a failed string backtracks over its characters once.
_TOKEN = re.compile(r"""[ \t\n\r]*(?:
    ([\[\]{},:])
  | ("(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*")
  | (-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)
  | (true|false|null|NaN|Infinity|-Infinity))""", re.VERBOSE)
_PUNCT, _STRING, _NUMBER = 1, 2, 3
_START = re.compile(r"[\[{]")
_CLOSE = {"[": "]", "{": "}"}

# What the read expects next: a value; a value or `]` (an array just opened); `,` or the close (after a value);
# a key or `}` (an object just opened); a key (after a comma in an object); `:` (after a key).
_VALUE, _OPENED, _AFTER, _KEY_OR_CLOSE, _KEY, _COLON = range(6)
_FAILED = -1


def last_balanced(text: str) -> tuple[int, int] | None:
    """The span (start, end) of the last JSON object or array the search takes in `text`, or None."""
    ends: dict[int, int] = {}      # a container's start -> its end, or _FAILED
    depths: dict[int, int] = {}    # a JSON container's start -> its depth
    found = None
    pos = 0
    while (start := _START.search(text, pos)) is not None:
        begin = start.start()
        end = ends[begin] if begin in ends else _read(text, begin, ends, depths)
        if end == _FAILED:
            pos = begin + 1
        else:
            found, pos = (begin, end), end
    return found


def _read(text: str, begin: int, ends: dict[int, int], depths: dict[int, int]) -> int:
    """Read the container at `begin` and every container in it not read before; record each one's end (or
    _FAILED) in `ends` and a JSON one's depth in `depths`; return the end of the one at `begin`, or _FAILED."""
    starts: list[int] = []    # the containers open, innermost last
    deepest: list[int] = []   # and the depth of what each holds so far
    expecting, pos = _VALUE, begin
    match, digits = _TOKEN.match, sys.get_int_max_str_digits()
    while (token := match(text, pos)) is not None:
        pos, kind = token.end(), token.lastindex
        char = text[pos - 1] if kind == _PUNCT else ""
        if expecting == _COLON:
            if char != ":":
                break
            expecting = _VALUE
        elif char == "," and expecting == _AFTER:
            expecting = _VALUE if text[starts[-1]] == "[" else _KEY
        elif char in ("]", "}") and expecting in (_AFTER, _OPENED if char == "]" else _KEY_OR_CLOSE):
            start, depth = starts.pop(), deepest.pop()
            if _CLOSE[text[start]] != char or depth > MAX_DEPTH:   # the wrong close, or too deep to take
                ends[start] = _FAILED
                break
            ends[start], depths[start] = pos, depth
            if not starts:
                return pos
            deepest[-1] = max(deepest[-1], depth + 1)
            expecting = _AFTER
        elif expecting in (_KEY, _KEY_OR_CLOSE):
            if kind != _STRING:
                break
            expecting = _COLON
        elif expecting == _AFTER or char in (",", ":", "]", "}"):
            break
        elif char:   # a container where a value is expected: read now, or read before
            known = ends.get(pos - 1)
            if known is None:
                starts.append(pos - 1)
                deepest.append(1)
                expecting = _OPENED if char == "[" else _KEY_OR_CLOSE
            elif known == _FAILED:
                break
            else:
                deepest[-1] = max(deepest[-1], depths[pos - 1] + 1)
                expecting, pos = _AFTER, known
        elif kind == _NUMBER and digits and _unreadable(token.group(kind), digits):
            break
        else:
            expecting = _AFTER
    for start in starts:   # the read stopped: every container still open is not JSON
        ends[start] = _FAILED
    return _FAILED


def _unreadable(number: str, digits: int) -> bool:
    """Whether the decoder fails on this number: an integer of more digits than `int()` reads."""
    return len(number) > digits and not any(c in number for c in ".eE") and len(number.lstrip("-")) > digits
