"""Regular expressions on RE2, the engine's linear-time regex engine: every pattern a suite author writes (a
`regex` check, `numeric`'s and `json_field`'s patterns, a JSON Schema's `pattern` and `patternProperties`) is
checked here when the suite loads and compiled here, so matching takes time linear in the text whatever the
pattern and whatever the answer.

Python's parser reads the pattern first, to name the construct RE2 lacks (a backreference, a lookaround, ...)
and the way to write without it; `check_pattern` is that one message for every caller. `compile_re2`'s patterns
take any Python text: RE2 reads UTF-8, so half a UTF-16 surrogate pair (a reply's `"\\ud800"` escape) is read as
U+FFFD, here, for every caller.
"""

from __future__ import annotations

import re
import re._constants as sre_constants
import re._parser as sre_parser
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import re2

from engine.base.jsontext import utf8_safe

__all__ = ["RE2_OPTIONS", "Pattern", "check_pattern", "compile_re2", "re2_source", "searchable"]

RE2_OPTIONS = re2.Options()
RE2_OPTIONS.log_errors = False
# flag letter -> RE2's inline flag; `x` (verbose) has none.
_INLINE_FLAGS = {"i": "i", "m": "m", "s": "s"}
_OPCODES = sre_constants
# What RE2 lacks, found in Python's parse of the pattern: (opcode, what it is, how to do without it).
_UNSUPPORTED = {
    _OPCODES.GROUPREF: ("A backreference (\\1, (?P=name))", "match the text again explicitly, or use two checks"),
    _OPCODES.GROUPREF_EXISTS: ("A conditional group (?(1)...)", "write the alternatives with |"),
    _OPCODES.ASSERT: ("A lookahead/lookbehind ((?=...), (?<=...))", "match the text itself, or use two checks "
                      "under `all`"),
    _OPCODES.ASSERT_NOT: ("A negative lookahead/lookbehind ((?!...), (?<!...))", "wrap a positive regex in "
                          "`not:`, or use `not_contains`"),
    _OPCODES.ATOMIC_GROUP: ("An atomic group (?>...)", "use a plain group (?:...): RE2 never backtracks"),
    _OPCODES.POSSESSIVE_REPEAT: ("A possessive repeat (*+, ++, ?+)", "drop the trailing +: RE2 never backtracks"),
}
_MAX_RE2_REPEAT = 1000


def _walk(parsed: Any) -> Iterator[tuple[Any, Any]]:
    """Every (opcode, argument) of a parsed pattern, depth first."""
    for op, arg in parsed:
        yield op, arg
        if op in (_OPCODES.MAX_REPEAT, _OPCODES.MIN_REPEAT, _OPCODES.POSSESSIVE_REPEAT):
            yield from _walk(arg[2])
        elif op in (_OPCODES.SUBPATTERN,):
            yield from _walk(arg[-1])
        elif op in (_OPCODES.ASSERT, _OPCODES.ASSERT_NOT):
            yield from _walk(arg[1])
        elif op == _OPCODES.ATOMIC_GROUP:
            yield from _walk(arg)
        elif op == _OPCODES.BRANCH:
            for branch in arg[1]:
                yield from _walk(branch)
        elif op == _OPCODES.GROUPREF_EXISTS:
            yield from _walk(arg[1])
            if arg[2] is not None:
                yield from _walk(arg[2])


def _unbounded(sub: Any) -> bool:
    return any(op in (_OPCODES.MAX_REPEAT, _OPCODES.MIN_REPEAT) and arg[1] is _OPCODES.MAXREPEAT
               for op, arg in _walk(sub))


def _nested_repeat(parsed: Any) -> bool:
    """A repeat that may run more than once holding an unbounded repeat: `(a+)+`, `(?:.*?x){20}`."""
    return any(op in (_OPCODES.MAX_REPEAT, _OPCODES.MIN_REPEAT) and (arg[1] is _OPCODES.MAXREPEAT or arg[1] > 1)
               and _unbounded(arg[2]) for op, arg in _walk(parsed))


@lru_cache(maxsize=4096)
def check_pattern(pattern: str, flags: str = "") -> tuple[str | None, str | None]:
    """(why the pattern cannot run on RE2 or None, a warning about it or None)."""
    if "x" in flags:
        return ("RE2 has no verbose mode (flag `x`): remove the flag and write the pattern without spaces "
                "and comments"), None
    bits = 0
    for letter in flags:
        bits |= {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}.get(letter, 0)
    try:
        parsed = sre_parser.parse(pattern, bits)
    except re.error as exc:
        return str(exc), None
    for op, arg in _walk(parsed):
        if op in _UNSUPPORTED:
            what, fix = _UNSUPPORTED[op]
            return f"{what} is not supported by RE2, the engine's linear-time regex engine: {fix}", None
        if op in (_OPCODES.MAX_REPEAT, _OPCODES.MIN_REPEAT) and arg[1] is not _OPCODES.MAXREPEAT \
                and arg[1] > _MAX_RE2_REPEAT:
            return (f"RE2 allows repeat counts up to {{{_MAX_RE2_REPEAT}}}, got {{{arg[1]}}}: use + or a smaller "
                    "count"), None
    try:
        re2.compile(re2_source(pattern, flags), RE2_OPTIONS)
    except re2.error as exc:
        message = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        return f"RE2 cannot compile it: {message}", None
    warning = None
    if _nested_repeat(parsed):
        warning = ("a repeat inside a repeat (as in (a+)+ or (?:.*?x){20}): RE2 matches it in linear time, but "
                   "the same pattern in Python's re or a backtracking tool can run for hours; a simpler form "
                   "(one repeat, or a [^...] class) says the same")
    return None, warning


def re2_source(pattern: str, flags: str) -> str:
    """The pattern as RE2 reads it: flag letters inline, Python's \\Z as RE2's \\z."""
    source = re.sub(r"(?<!\\)((?:\\\\)*)\\Z", r"\1\\z", pattern)
    inline = "".join(_INLINE_FLAGS[f] for f in dict.fromkeys(flags) if f in _INLINE_FLAGS)
    return f"(?{inline}){source}" if inline else source


class Pattern:
    """A pattern compiled on RE2 with `re.Pattern`'s methods, over any Python text (`searchable`): positions and
    groups are the text's own (a lone surrogate and U+FFFD are both one character)."""

    __slots__ = ("_re2",)

    def __init__(self, compiled: Any) -> None:
        self._re2 = compiled

    @property
    def pattern(self) -> str:
        return str(self._re2.pattern)

    @property
    def groups(self) -> int:
        return int(self._re2.groups)

    def search(self, text: str, *span: int) -> Any:
        return self._re2.search(searchable(text), *span)

    def match(self, text: str, *span: int) -> Any:
        return self._re2.match(searchable(text), *span)

    def fullmatch(self, text: str, *span: int) -> Any:
        return self._re2.fullmatch(searchable(text), *span)

    def finditer(self, text: str, *span: int) -> Iterator[Any]:
        return self._re2.finditer(searchable(text), *span)

    def findall(self, text: str, *span: int) -> list[Any]:
        return self._re2.findall(searchable(text), *span)

    def split(self, text: str, maxsplit: int = 0) -> list[str]:
        return self._re2.split(searchable(text), maxsplit)

    def sub(self, repl: Any, text: str, count: int = 0) -> str:
        return self._re2.sub(repl, searchable(text), count)


@lru_cache(maxsize=4096)
def compile_re2(pattern: str, flags: str = "") -> Pattern:
    """`pattern` compiled on RE2 (its methods are `re.Pattern`'s, over any text), kept per pattern and flags.

    Raises:
        ValueError: RE2 cannot run it; the message is `check_pattern`'s.
    """
    problem, _ = check_pattern(pattern, flags)
    if problem:
        raise ValueError(problem)
    return Pattern(re2.compile(re2_source(pattern, flags), RE2_OPTIONS))


def searchable(text: str) -> str:
    """`text` as RE2 can read it: RE2 matches UTF-8, which cannot hold half a UTF-16 surrogate pair (a reply's
    `"\\ud800"` escape); each such half becomes U+FFFD. ASCII text is returned as it is, unread."""
    return text if text.isascii() else utf8_safe(text)
