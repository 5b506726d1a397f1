"""Text evaluators: equals, contains, not_contains, regex, starts_with, numeric, exact_token, length.

All compare the visible answer text (reasoning already removed by the client). String comparisons ignore
case unless `case_sensitive: true`. Each kind is a builder that binds its options once and returns the
scorer; each scorer returns a one-line reason a person can read. The registry entries (schema fragment,
load-time check, builder) are at the end of the module.

Every regex a suite writes (`regex`, `numeric`'s `pattern`, `json_field`'s `matches`) runs on RE2
(`compile_pattern`): matching takes time linear in the answer, so no pattern can stall a run. A construct RE2
lacks (a backreference, a lookaround, ...) is a load-time error naming it and the way to write without it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from engine.base.patterns import check_pattern, compile_re2
from engine.base.render import is_template
from engine.errors import EvaluatorConfigError
from engine.evaluators.base import CheckSite, Kind, option_choice, short, verdict
from engine.model.answer import Answer
from engine.model.scoring import Scorer, ScoringContext
from engine.model.verdict import Verdict

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
        raise EvaluatorConfigError(f"{kind} needs at least one string", kind=kind)
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


def _case_sensitive(options: Mapping[str, Any]) -> bool:
    return bool(options.get("case_sensitive", False))


def equals(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The trimmed answer equals the value. Numbers compare numerically ("8.0" equals 8), booleans as
    `true`/`false`, strings ignoring case unless `case_sensitive`."""
    case_sensitive = _case_sensitive(options)
    numeric_value = isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _scalar_text(value) if numeric_value else _scalar_text(value).strip()
    folded = _fold(expected, case_sensitive)
    passed = verdict(1.0, f"answer equals {short(expected)}", "equals")   # immutable: one instance serves every pass

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        got = answer.text.strip()
        if numeric_value:
            try:
                ok = math.isclose(parse_number(got), float(value), rel_tol=1e-12, abs_tol=0.0)
            except ValueError:
                ok = False
        else:
            ok = _fold(got, case_sensitive) == folded
        if ok:
            return passed
        return verdict(0.0, f"expected {short(expected)}, got {short(got)}", "equals")

    return score


def _finder(needle: str, options: Mapping[str, Any], kind: str) -> Any:
    """A predicate `found(text)` for one needle: a substring, or with `whole_word: true` a match not touching
    word characters on either side (so `cat` is not found in `concatenate`)."""
    case_sensitive = _case_sensitive(options)
    whole_word = options.get("whole_word", False)
    if not isinstance(whole_word, bool):
        raise EvaluatorConfigError(f"{kind}: whole_word must be true or false, got {short(whole_word)}", kind=kind,
                                   option="whole_word")
    if whole_word:
        pattern = re.compile(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", 0 if case_sensitive else re.IGNORECASE)
        return lambda text: pattern.search(text) is not None
    folded = _fold(needle, case_sensitive)
    return lambda text: folded in _fold(text, case_sensitive)


def contains(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The answer contains the string(s). `mode: all` scores the fraction found; `mode: any` is 0 or 1."""
    needles = _strings(value, "contains")
    mode = option_choice(options, "mode", ("all", "any"), "contains")
    finders = [_finder(n, options, "contains") for n in needles]
    # Verdicts are immutable: the passes that do not depend on the answer are built once (`found_all` only where
    # it can be given: one needle passes with `found_each[0]`).
    found_each = [verdict(1.0, f"found {short(n)}", "contains") for n in needles]
    found_all = verdict(1.0, f"found all of {short(needles)}", "contains") if len(needles) > 1 else None

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        hay = answer.text
        if len(needles) == 1:
            if finders[0](hay):
                return found_each[0]
            if mode == "any":
                return verdict(0.0, f"none of {short(needles)} found in {short(answer.text)}", "contains")
            return verdict(0.0, f"{short(needles[0])} not found in {short(answer.text)}", "contains")
        hits = [i for i, found in enumerate(finders) if found(hay)]
        if mode == "any":
            if hits:
                return found_each[hits[0]]
            return verdict(0.0, f"none of {short(needles)} found in {short(answer.text)}", "contains")
        found = [needles[i] for i in hits]
        missing = [n for n in needles if n not in found]
        if not missing and found_all is not None:
            return found_all
        return verdict(len(found) / len(needles), f"missing {short(missing)} ({len(found)} of {len(needles)} "
                                                  f"found) in {short(answer.text)}", "contains")

    return score


def not_contains(value: Any, options: Mapping[str, Any]) -> Scorer:
    """None of the strings appear. Partial credit: the fraction of strings absent."""
    needles = _strings(value, "not_contains")
    finders = [_finder(n, options, "not_contains") for n in needles]
    absent = verdict(1.0, f"none of {short(needles)} present", "not_contains")

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        present = [n for n, found in zip(needles, finders, strict=True) if found(answer.text)]
        if not present:
            return absent
        return verdict(1 - len(present) / len(needles),
                       f"must not contain {short(present)}, found in {short(answer.text)}", "not_contains")

    return score


def compile_pattern(pattern: str, flags: str, kind: str, option: str | None = None) -> Any:
    """The pattern compiled on RE2 (linear-time matching), with `re.search`-like `search`.

    Raises:
        EvaluatorConfigError: naming the pattern, and the construct RE2 lacks with the fix.
    """
    unknown = [f for f in flags if f not in "imsx"]
    if unknown:
        raise EvaluatorConfigError(f"{kind}: unknown flag {unknown[0]!r}; use letters from 'ims'", kind=kind,
                                   option="flags")
    try:
        return compile_re2(pattern, flags)
    except ValueError as exc:
        raise EvaluatorConfigError(f"{kind}: invalid pattern {short(pattern)}: {exc}", kind=kind,
                                   option=option) from None


def regex(value: Any, options: Mapping[str, Any]) -> Scorer:
    """RE2 search of the pattern in the answer; `flags` letters from `ims`."""
    pattern = compile_pattern(str(value), str(options.get("flags", "") or ""), "regex")

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        match = pattern.search(answer.text)
        if match:
            return verdict(1.0, f"/{value}/ matched {short(match.group(0))}", "regex")
        return verdict(0.0, f"/{value}/ did not match {short(answer.text)}", "regex")

    return score


def starts_with(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The answer, leading whitespace removed, starts with the string."""
    case_sensitive = _case_sensitive(options)
    prefix = _scalar_text(value)
    folded = _fold(prefix, case_sensitive)
    passed = verdict(1.0, f"starts with {short(prefix)}", "starts_with")

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        got = answer.text.lstrip()
        if _fold(got, case_sensitive).startswith(folded):
            return passed
        return verdict(0.0, f"expected to start with {short(prefix)}, got {short(got, 40)}", "starts_with")

    return score


def _numbers(text: str) -> list[tuple[float, bool, str]]:
    out = []
    for m in NUMBER.finditer(text):
        try:
            out.append((parse_number(m.group("num")), bool(m.group("pct")), m.group(0).strip()))
        except ValueError:
            continue
    return out


def numeric(value: Any, options: Mapping[str, Any]) -> Scorer:
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
        raise EvaluatorConfigError(f"numeric: expected a number, got {short(value)}", kind="numeric") from None
    raw_pattern = options.get("pattern")
    pattern = None
    if raw_pattern is not None:
        pattern = compile_pattern(str(raw_pattern), "", "numeric", "pattern")
    allowed = max(tolerance, rel_tolerance * abs(expected))

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        if pattern is not None:
            match = pattern.search(answer.text)
            if not match:
                return verdict(0.0, f"pattern /{raw_pattern}/ found no number in {short(answer.text)}", "numeric")
            found = _numbers(match.group(1) if match.groups() else match.group(0))
        else:
            found = _numbers(answer.text)
        if not found:
            return verdict(0.0, f"expected {expected:g}, found no number in {short(answer.text)}", "numeric")
        number, is_percent, written = found[-1]
        candidates = [number, number / 100] if is_percent else [number]
        for candidate in candidates:
            if abs(candidate - expected) <= allowed or math.isclose(candidate, expected, rel_tol=1e-9):
                how = "equals" if allowed == 0 else f"is within \u00b1{allowed:g} of"
                return verdict(1.0, f"{written} {how} {expected:g}", "numeric")
        return verdict(0.0, f"expected {expected:g} (\u00b1{allowed:g}), got {written}", "numeric")

    return score


_FENCE_TAG = re.compile(r"[\w+-]*\s*")


def _fenced(token: str) -> str | None:
    """What one ``` fence around the whole token holds (a language tag and the white space after it, and one
    newline before the closing fence, left out), or None. Read by position in one pass, where a backtracking
    pattern is quadratic on a fence of white space."""
    if len(token) < 6 or not (token.startswith("```") and token.endswith("```")):
        return None
    tag = _FENCE_TAG.match(token, 3)   # a language tag and white space, both maybe empty: it always matches
    start = tag.end() if tag else 3
    end = len(token) - 3
    if token.endswith("\n```") and end - 1 >= start:
        end -= 1
    return token[start:end] if start <= end else ""


def _emphasis(token: str) -> int:
    """How many `*` open and close the token (paired emphasis: `**bold**` -> 2), at most half its length. Counted,
    where a pattern with a back-reference backtracks cubically on a run of stars."""
    opening = len(token) - len(token.lstrip("*"))
    closing = len(token) - len(token.rstrip("*"))
    return min(opening, closing, len(token) // 2)


def strip_token(text: str) -> str:
    """The bare token: code fences, surrounding quotes, paired `*`/`_` emphasis and one trailing period removed."""
    token = text.strip()
    fenced = _fenced(token)
    if fenced is not None:
        token = fenced.strip()
    token = token.strip("`").strip()
    for _ in range(3):
        before = token
        stars = _emphasis(token)
        if stars:
            token = token[stars:len(token) - stars].strip()
        if len(token) >= 2 and token[0] == token[-1] and token[0] in "\"'":
            token = token[1:-1].strip()
        if token.endswith(".") and not token.endswith(".."):
            token = token[:-1].rstrip()
        if token == before:
            break
    return token


def exact_token(value: Any, options: Mapping[str, Any]) -> Scorer:
    """The whole answer is the token, once fences, quotes, paired `*` and a trailing period are stripped."""
    case_sensitive = _case_sensitive(options)
    expected = strip_token(_scalar_text(value))
    folded = _fold(expected, case_sensitive)
    passed = verdict(1.0, f"answer is the token {short(expected)}", "exact_token")

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        got = strip_token(answer.text)
        if _fold(got, case_sensitive) == folded:
            return passed
        return verdict(0.0, f"expected the token {short(expected)}, got {short(got)}", "exact_token")

    return score


_LENGTH_KEYS = ("min_chars", "max_chars", "min_words", "max_words")
_WORD_CHARS = re.compile(r"\w+")


def length(value: Any, options: Mapping[str, Any]) -> Scorer:
    """Character and word counts of the trimmed answer within the given bounds (all must hold). Words are
    runs of non-space characters (`words: whitespace`, the default) or runs of word characters
    (`words: word_chars`: `don't` is two, `--` none, as IFEval counts)."""
    if not isinstance(value, Mapping) or not any(k in value for k in _LENGTH_KEYS):
        raise EvaluatorConfigError(f"length: give a mapping with at least one of {', '.join(_LENGTH_KEYS)}",
                                   kind="length")
    unknown = [k for k in value if k not in _LENGTH_KEYS]
    if unknown:
        raise EvaluatorConfigError(f"length: unknown option {unknown[0]!r}; use {', '.join(_LENGTH_KEYS)}",
                                   kind="length", option=str(unknown[0]))
    bounds = [(key, int(value[key])) for key in _LENGTH_KEYS if value.get(key) is not None]
    words = option_choice(options, "words", ("whitespace", "word_chars"), "length")
    count_words = (lambda text: len(text.split())) if words == "whitespace" else (
        lambda text: len(_WORD_CHARS.findall(text)))

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        got = answer.text.strip()
        counts = {"chars": len(got), "words": count_words(got)}
        problems = []
        for key, bound in bounds:
            side, unit = key.split("_")
            n = counts[unit]
            if (side == "min" and n < bound) or (side == "max" and n > bound):
                problems.append(f"{n} {unit}, {side} {bound}")
        if problems:
            return verdict(0.0, "; ".join(problems), "length")
        return verdict(1.0, f"{counts['chars']} chars, {counts['words']} words: within bounds", "length")

    return score


# ------------------------------------------------------------------------------------------ load-time checks

_QUOTING = "; remember YAML quoting: write regexes in single quotes, '\\d+'"


def check_regex_site(pattern: Any, flags: Any, site: CheckSite, where: tuple[Any, ...], what: str) -> None:
    """Report at load time a pattern RE2 cannot run (an error) or one with nested repeats (a warning)."""
    if not isinstance(pattern, str) or is_template(pattern):
        return
    problem, warning = check_pattern(pattern, flags if isinstance(flags, str) else "")
    if problem:
        site.error(where, f"{what} does not compile: {problem}{_QUOTING}")
    elif warning:
        site.warning(where, f"{what} has {warning}")


def _check_regex(value: Any, spec: Mapping[str, Any], site: CheckSite) -> None:
    check_regex_site(value, spec.get("flags", ""), site, ("regex",), "the regex")


def _check_numeric(value: Any, spec: Mapping[str, Any], site: CheckSite) -> None:
    check_regex_site(spec.get("pattern"), "", site, ("pattern",), "the regex in 'pattern'")


# ------------------------------------------------------------------------------------------ registry entries

CASE_SENSITIVE = {"type": "boolean", "description": "Compare upper and lower case exactly (default false)."}
TEXT_LIST = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]}
SCALAR = {"type": ["string", "number", "boolean"]}

EQUALS = Kind("The whole answer (trimmed) equals this value.", SCALAR, {"case_sensitive": CASE_SENSITIVE},
              ({"equals": "{{ golden }}"}, {"equals": 42}), build=equals, bounded=True)
WHOLE_WORD = {"type": "boolean", "description": "Match whole words only: `cat` is not found in `concatenate` "
              "(default false: any substring)."}
CONTAINS = Kind("The answer contains this text (or these texts).", TEXT_LIST, {
    "mode": {"enum": ["all", "any"], "description": "With a list: need `all` texts (default) or `any` one."},
    "case_sensitive": CASE_SENSITIVE, "whole_word": WHOLE_WORD},
    ({"contains": "Paris"}, {"contains": ["Paris", "France"], "mode": "any"}), build=contains, bounded=True)
NOT_CONTAINS = Kind("The answer does not contain this text (or any of these texts).", TEXT_LIST,
                    {"case_sensitive": CASE_SENSITIVE, "whole_word": WHOLE_WORD},
                    ({"not_contains": ["sorry", "as an AI"]}, {"not_contains": "cat", "whole_word": True}),
                    build=not_contains, bounded=True)
REGEX = Kind("A regular expression (RE2 syntax: linear time, no backreferences or lookaround) searched in the "
             "answer.", {"type": "string"}, {
    "flags": {"type": "string", "pattern": "^[ims]*$", "description": "Letters from `ims`: ignore case, "
              "multi-line, dot matches newline.", "examples": ["i", "ms"]}},
    ({"regex": "^\\W*\\w+\\W*$"},), build=regex, check=_check_regex, bounded=True)
STARTS_WITH = Kind("The answer (trimmed) starts with this text.", {"type": "string"},
                   {"case_sensitive": CASE_SENSITIVE}, ({"starts_with": "Yes"},), build=starts_with, bounded=True)
NUMERIC = Kind("A number in the answer equals this number, within a tolerance.", {"type": ["number", "string"]}, {
    "tolerance": {"type": "number", "minimum": 0, "description": "Absolute tolerance (default 0)."},
    "rel_tolerance": {"type": "number", "minimum": 0, "description": "Relative tolerance, e.g. 0.01 for 1%."},
    "pattern": {"type": "string", "description": "A regex whose first group is the number to take "
                "(default: the last number in the answer).", "examples": ["answer: (\\S+)"]}},
    ({"numeric": "{{ golden }}", "tolerance": 0.01},), build=numeric, check=_check_numeric, bounded=True)
EXACT_TOKEN = Kind("The answer contains this text as a whole word.", {"type": "string"},
                   {"case_sensitive": CASE_SENSITIVE}, ({"exact_token": "B"},), build=exact_token)
LENGTH = Kind("Bounds on the answer's length; give at least one.", {
    "type": "object", "additionalProperties": False, "minProperties": 1, "properties": {
        "min_chars": {"type": "integer", "minimum": 0, "description": "Fewest characters allowed."},
        "max_chars": {"type": "integer", "minimum": 0, "description": "Most characters allowed."},
        "min_words": {"type": "integer", "minimum": 0, "description": "Fewest words allowed."},
        "max_words": {"type": "integer", "minimum": 0, "description": "Most words allowed."}}}, {
    "words": {"enum": ["whitespace", "word_chars"], "description": "What a word is: a run of non-space "
              "characters (`whitespace`, default) or a run of word characters (`word_chars`, as IFEval counts)."}},
    ({"length": {"max_words": 20}}, {"length": {"min_words": 300}, "words": "word_chars"}), build=length, bounded=True)
