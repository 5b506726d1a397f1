"""Text evaluators: equals, contains, not_contains, regex, starts_with, numeric, exact_token, length.

All compare the visible answer text (reasoning already removed). String comparisons ignore case
unless `case_sensitive: true`. Each returns a one-line reason a person can read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from engine.evaluators.base import EvalContext, error, verdict
from engine.evaluators.compose import short
from engine.model import Answer, Verdict

_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}

# A number as people write it: -3, 1,234.5, .5, 1e-3, 12%, with a Unicode minus too.
NUMBER = re.compile(
    r"(?<![\w.])(?P<num>[-+\u2212]?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?)"
    r"(?P<pct>\s?%)?"
)


def _fold(text: str, case_sensitive: bool) -> str:
    return text if case_sensitive else text.casefold()


def _strings(value: Any, kind: str) -> list[str]:
    items = value if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ValueError(f"{kind} needs at least one string")
    return [_scalar_text(v) for v in items]


def _scalar_text(value: Any) -> str:
    """How a YAML scalar reads as text: true -> 'true', 3.0 -> '3.0', None -> ''."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def parse_number(text: str) -> float:
    """Read a number written like `1,234.5`, `-3`, `1e-3` or `12%` (the percent sign is dropped)."""
    cleaned = text.strip().replace(",", "").replace("\u2212", "-").rstrip("%").strip()
    return float(cleaned)


def equals(value: Any, options: Mapping[str, Any], answer: Answer, ctx: EvalContext) -> Verdict:
    """The trimmed answer equals the value. Numbers compare numerically ("8.0" equals 8), booleans as
    `true`/`false`, strings ignoring case unless `case_sensitive`."""
    got = answer.text.strip()
    case_sensitive = bool(options.get("case_sensitive", False))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            ok = math.isclose(parse_number(got), float(value), rel_tol=1e-12, abs_tol=0.0)
        except ValueError:
            ok = False
        expected = _scalar_text(value)
    else:
        expected = _scalar_text(value).strip()
        ok = _fold(got, case_sensitive) == _fold(expected, case_sensitive)
    if ok:
        return verdict(1.0, f"answer equals {short(expected)}", "equals")
    return verdict(0.0, f"expected {short(expected)}, got {short(got)}", "equals")


def contains(value: Any, options: Mapping[str, Any], answer: Answer, ctx: EvalContext) -> Verdict:
    """The answer contains the string(s). `mode: all` scores the fraction found; `mode: any` is 0 or 1."""
    needles = _strings(value, "contains")
    mode = str(options.get("mode", "all"))
    if mode not in ("all", "any"):
        return error(f"contains: mode must be 'all' or 'any', got {short(mode)}", "contains")
    case_sensitive = bool(options.get("case_sensitive", False))
    hay = _fold(answer.text, case_sensitive)
    found = [n for n in needles if _fold(n, case_sensitive) in hay]
    missing = [n for n in needles if n not in found]
    if mode == "any":
        if found:
            return verdict(1.0, f"found {short(found[0])}", "contains")
        return verdict(0.0, f"none of {short(needles)} found in {short(answer.text)}", "contains")
    score = len(found) / len(needles)
    if len(needles) == 1:
        if found:
            return verdict(1.0, f"found {short(needles[0])}", "contains")
        return verdict(0.0, f"{short(needles[0])} not found in {short(answer.text)}", "contains")
    if not missing:
        return verdict(1.0, f"found all of {short(needles)}", "contains")
    return verdict(score, f"missing {short(missing)} ({len(found)} of {len(needles)} found) in "
                          f"{short(answer.text)}", "contains")


def not_contains(value: Any, options: Mapping[str, Any], answer: Answer, ctx: EvalContext) -> Verdict:
    """None of the strings appear. Partial credit: the fraction of strings absent."""
    needles = _strings(value, "not_contains")
    case_sensitive = bool(options.get("case_sensitive", False))
    hay = _fold(answer.text, case_sensitive)
    present = [n for n in needles if _fold(n, case_sensitive) in hay]
    if not present:
        return verdict(1.0, f"none of {short(needles)} present", "not_contains")
    score = 1 - len(present) / len(needles)
    return verdict(score, f"must not contain {short(present)}, found in {short(answer.text)}", "not_contains")


def regex(value: Any, options: Mapping[str, Any], answer: Answer, ctx: EvalContext) -> Verdict:
    """`re.search` of the pattern in the answer; `flags` letters from `imsx`."""
    flags = 0
    for letter in str(options.get("flags", "") or ""):
        if letter not in _FLAGS:
            return error(f"regex: unknown flag {letter!r}; use letters from 'imsx'", "regex")
        flags |= _FLAGS[letter]
    try:
        pattern = re.compile(str(value), flags)
    except re.error as exc:
        return error(f"regex: invalid pattern {short(value)}: {exc}", "regex")
    match = pattern.search(answer.text)
    if match:
        return verdict(1.0, f"/{value}/ matched {short(match.group(0))}", "regex")
    return verdict(0.0, f"/{value}/ did not match {short(answer.text)}", "regex")


def starts_with(value: Any, options: Mapping[str, Any], answer: Answer, ctx: EvalContext) -> Verdict:
    """The answer, leading whitespace removed, starts with the string."""
    case_sensitive = bool(options.get("case_sensitive", False))
    prefix = _scalar_text(value)
    got = answer.text.lstrip()
    if _fold(got, case_sensitive).startswith(_fold(prefix, case_sensitive)):
        return verdict(1.0, f"starts with {short(prefix)}", "starts_with")
    return verdict(0.0, f"expected to start with {short(prefix)}, got {short(got, 40)}", "starts_with")


def _numbers(text: str) -> list[tuple[float, bool, str]]:
    out = []
    for m in NUMBER.finditer(text):
        try:
            out.append((parse_number(m.group("num")), bool(m.group("pct")), m.group(0).strip()))
        except ValueError:
            continue
    return out


def numeric(value: Any, options: Mapping[str, Any], answer: Answer, ctx: EvalContext) -> Verdict:
    """The last number in the answer (or `pattern`'s first group) equals the value within tolerance.

    `tolerance` is absolute, `rel_tolerance` relative to the expected value; either suffices. A
    percentage (`45%`) matches both 45 and 0.45.
    """
    try:
        expected = value if isinstance(value, (int, float)) and not isinstance(value, bool) else parse_number(
            str(value))
        tolerance = float(options.get("tolerance", 0) or 0)
        rel_tolerance = float(options.get("rel_tolerance", 0) or 0)
    except (TypeError, ValueError):
        return error(f"numeric: expected a number, got {short(value)}", "numeric")
    pattern = options.get("pattern")
    if pattern is not None:
        try:
            match = re.search(str(pattern), answer.text)
        except re.error as exc:
            return error(f"numeric: invalid pattern {short(pattern)}: {exc}", "numeric")
        if not match:
            return verdict(0.0, f"pattern /{pattern}/ found no number in {short(answer.text)}", "numeric")
        found = _numbers(match.group(1) if match.groups() else match.group(0))
    else:
        found = _numbers(answer.text)
    if not found:
        return verdict(0.0, f"expected {expected:g}, found no number in {short(answer.text)}", "numeric")
    number, is_percent, written = found[-1]
    candidates = [number, number / 100] if is_percent else [number]
    allowed = max(tolerance, rel_tolerance * abs(expected))
    for candidate in candidates:
        if abs(candidate - expected) <= allowed or math.isclose(candidate, expected, rel_tol=1e-9):
            how = "equals" if allowed == 0 else f"is within \u00b1{allowed:g} of"
            return verdict(1.0, f"{written} {how} {expected:g}", "numeric")
    return verdict(0.0, f"expected {expected:g} (\u00b1{allowed:g}), got {written}", "numeric")


_FENCE = re.compile(r"^```[\w+-]*\s*\n?(.*?)\n?```$", re.DOTALL)


def strip_token(text: str) -> str:
    """The bare token: code fences, surrounding quotes, paired `*`/`_` emphasis and one trailing period removed."""
    token = text.strip()
    fence = _FENCE.match(token)
    if fence:
        token = fence.group(1).strip()
    token = token.strip("`").strip()
    for _ in range(3):
        before = token
        m = re.fullmatch(r"(\*+)(.*?)\1", token, re.DOTALL)
        if m:
            token = m.group(2).strip()
        if len(token) >= 2 and token[0] == token[-1] and token[0] in "\"'":
            token = token[1:-1].strip()
        if token.endswith(".") and not token.endswith(".."):
            token = token[:-1].rstrip()
        if token == before:
            break
    return token


def exact_token(value: Any, options: Mapping[str, Any], answer: Answer, ctx: EvalContext) -> Verdict:
    """The whole answer is the token, once fences, quotes, paired `*` and a trailing period are stripped."""
    case_sensitive = bool(options.get("case_sensitive", False))
    expected = strip_token(_scalar_text(value))
    got = strip_token(answer.text)
    if _fold(got, case_sensitive) == _fold(expected, case_sensitive):
        return verdict(1.0, f"answer is the token {short(expected)}", "exact_token")
    return verdict(0.0, f"expected the token {short(expected)}, got {short(got)}", "exact_token")


_LENGTH_KEYS = ("min_chars", "max_chars", "min_words", "max_words")


def length(value: Any, options: Mapping[str, Any], answer: Answer, ctx: EvalContext) -> Verdict:
    """Character and word counts of the trimmed answer within the given bounds (all must hold)."""
    if not isinstance(value, Mapping) or not any(k in value for k in _LENGTH_KEYS):
        return error(f"length: give a mapping with at least one of {', '.join(_LENGTH_KEYS)}", "length")
    unknown = [k for k in value if k not in _LENGTH_KEYS]
    if unknown:
        return error(f"length: unknown option {unknown[0]!r}; use {', '.join(_LENGTH_KEYS)}", "length")
    got = answer.text.strip()
    counts = {"chars": len(got), "words": len(got.split())}
    problems = []
    for key in _LENGTH_KEYS:
        if value.get(key) is None:
            continue
        bound = int(value[key])
        side, unit = key.split("_")
        n = counts[unit]
        if (side == "min" and n < bound) or (side == "max" and n > bound):
            problems.append(f"{n} {unit}, {side} {bound}")
    if problems:
        return verdict(0.0, "; ".join(problems), "length")
    return verdict(1.0, f"{counts['chars']} chars, {counts['words']} words: within bounds", "length")
