"""The `ifeval` evaluator: one IFEval instruction, scored by the rules of Google's reference checker.

`{ifeval: {id: length_constraints:number_words, relation: at least, num_words: 300}}` names one of the 25
instruction ids of IFEval (google-research `instruction_following_eval`) with its keyword arguments under
their IFEval names. Strict by default, as the reference's strict mode: an empty answer never follows an
instruction. `loose: true` is the reference's loose mode: the instruction is followed when any of eight
variants of the answer follows it (as is, without its first line, its last line or both, each with and without
`*`). The reason says what was counted.

Where the reference needs data that cannot be installed (NLTK's punkt model), the closest rule stands in;
docs/evaluators.md "ifeval" lists every difference. The language checks use the reference's own detector,
langdetect, seeded so that a verdict never changes between runs.

The answer is the model's, so no rule may take more than linear time on it. The patterns that a run of one
character (`[[[[`, blank lines, `<<<<`) would send backtracking from every start run on RE2
(engine/base/patterns.py), with Python's white space spelled out (RE2's `\\s` is ASCII only); the others stay on
Python's `re` for its Unicode classes and were written so that a failed start costs constant work (no lookahead
after a run, no leading `\\s*`). How words, sentences, bullets and the language are counted is ifeval_text.py's.

One module for the 25 instructions (past 500 lines): they are one table, the reference's instructions registry,
each read beside the others and bound by the same argument readers; split, an instruction would sit apart from
the rules it shares.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from engine.base.patterns import compile_re2, searchable
from engine.base.words import did_you_mean, short
from engine.errors import EvaluatorConfigError
from engine.evaluators.base import Kind, verdict
from engine.evaluators.ifeval_text import count_bullets, count_words, detect_language, split_sentences, word_tokens
from engine.model.answer import Answer
from engine.model.scoring import Scorer, ScoringContext
from engine.model.verdict import Verdict

__all__ = ["IDS", "IFEVAL", "loose_variants"]

KIND = "ifeval"
_RELATIONS = ("less than", "at least")

# One check: the answer text -> (followed, what was counted).
Check = Callable[[str], tuple[bool, str]]


def _fail(message: str, option: str | None = None) -> EvaluatorConfigError:
    return EvaluatorConfigError(f"ifeval: {message}", kind=KIND, option=option)


def _int(args: Mapping[str, Any], name: str, minimum: int = 0) -> int:
    value = args[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(f"{name} must be a whole number of at least {minimum}, got {short(value)}", name)
    return value


def _text(args: Mapping[str, Any], name: str) -> str:
    value = args[name]
    if not isinstance(value, str) or not value.strip():
        raise _fail(f"{name} must be a non-empty text, got {short(value)}", name)
    return value


def _words_list(args: Mapping[str, Any], name: str) -> list[str]:
    value = args[name]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise _fail(f"{name} must be a list of words, e.g. [apple, pear], got {short(value)}", name)
    return list(value)


def _relation(args: Mapping[str, Any], name: str) -> str:
    value = args[name]
    if value not in _RELATIONS:
        raise _fail(f"{name} must be 'less than' or 'at least', got {short(value)}", name)
    return str(value)


def _compare(count: int, relation: str, bound: int) -> bool:
    return count < bound if relation == "less than" else count >= bound


# ------------------------------------------------------------------------------------------ the instructions

def _keywords_existence(args: Mapping[str, Any]) -> Check:
    keywords = sorted(_words_list(args, "keywords"))
    patterns = [(k, re.compile(re.escape(k), re.IGNORECASE)) for k in keywords]

    def check(text: str) -> tuple[bool, str]:
        missing = [k for k, p in patterns if not p.search(text)]
        if missing:
            return False, f"missing keyword(s) {short(missing)}"
        return True, f"all keywords present: {short(keywords)}"
    return check


def _keywords_frequency(args: Mapping[str, Any]) -> Check:
    keyword = _text(args, "keyword").strip()
    bound, relation = _int(args, "frequency"), _relation(args, "relation")
    pattern = re.compile(re.escape(keyword), re.IGNORECASE)

    def check(text: str) -> tuple[bool, str]:
        n = len(pattern.findall(text))
        return _compare(n, relation, bound), f"{keyword!r} appears {n} times (ignoring case), needs {relation} {bound}"
    return check


def _forbidden_words(args: Mapping[str, Any]) -> Check:
    words = sorted(set(_words_list(args, "forbidden_words")))
    patterns = [(w, re.compile(r"\b" + re.escape(w) + r"\b", re.IGNORECASE)) for w in words]

    def check(text: str) -> tuple[bool, str]:
        found = [w for w, p in patterns if p.search(text)]
        if found:
            return False, f"forbidden word(s) {short(found)} used (whole words, ignoring case)"
        return True, f"none of {short(words)} used"
    return check


def _letter_frequency(args: Mapping[str, Any]) -> Check:
    letter = _text(args, "letter").strip().lower()
    if len(letter) != 1:
        raise _fail(f"letter must be one letter, got {short(args['letter'])}", "letter")
    bound, relation = _int(args, "let_frequency"), _relation(args, "let_relation")

    def check(text: str) -> tuple[bool, str]:
        n = text.lower().count(letter)
        return _compare(n, relation, bound), f"letter {letter!r} appears {n} times, needs {relation} {bound}"
    return check


def _response_language(args: Mapping[str, Any]) -> Check:
    language = _text(args, "language")

    def check(text: str) -> tuple[bool, str]:
        found = detect_language(text)
        if found is None:
            return True, "langdetect cannot tell the language: counted as followed, as the reference does"
        return found == language, f"langdetect says {found!r}, expected {language!r}"
    return check


def _number_sentences(args: Mapping[str, Any]) -> Check:
    bound, relation = _int(args, "num_sentences"), _relation(args, "relation")

    def check(text: str) -> tuple[bool, str]:
        n = len(split_sentences(text))
        return _compare(n, relation, bound), f"{n} sentences, needs {relation} {bound}"
    return check


_DIVIDER = re.compile(r"\s?\*\*\*\s?")


def _number_paragraphs(args: Mapping[str, Any]) -> Check:
    bound = _int(args, "num_paragraphs")

    def check(text: str) -> tuple[bool, str]:
        pieces = _DIVIDER.split(text)
        n = len(pieces)
        for i, piece in enumerate(pieces):
            if not piece.strip():
                if i in (0, len(pieces) - 1):
                    n -= 1
                else:
                    return False, f"an empty paragraph between two *** dividers (paragraph {i + 1})"
        return n == bound, f"{n} paragraphs separated by ***, needs exactly {bound}"
    return check


def _number_words(args: Mapping[str, Any]) -> Check:
    bound, relation = _int(args, "num_words"), _relation(args, "relation")

    def check(text: str) -> tuple[bool, str]:
        n = count_words(text)
        return _compare(n, relation, bound), f"{n} words (runs of word characters), needs {relation} {bound}"
    return check


_PUNCTUATION = frozenset(".,?!'\"")


def _nth_paragraph_first_word(args: Mapping[str, Any]) -> Check:
    count, nth = _int(args, "num_paragraphs", 1), _int(args, "nth_paragraph", 1)
    if nth > count:
        raise _fail(f"nth_paragraph ({nth}) is past num_paragraphs ({count})", "nth_paragraph")
    expected = _text(args, "first_word").lower()

    def check(text: str) -> tuple[bool, str]:
        pieces = text.split("\n\n")
        n = sum(1 for p in pieces if p.strip())
        if nth > n:
            return False, f"{n} paragraphs (split at blank lines), no paragraph {nth}"
        paragraph = pieces[nth - 1].strip()
        if not paragraph:
            return False, f"paragraph {nth} is empty"
        word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
        first = ""
        for letter in word:
            if letter in _PUNCTUATION:
                break
            first += letter.lower()
        ok = n == count and first == expected
        return ok, f"{n} paragraphs (needs {count}); paragraph {nth} starts with {first!r} (needs {expected!r})"
    return check


_PLACEHOLDER = compile_re2(r"\[.*?\]")


def _number_placeholders(args: Mapping[str, Any]) -> Check:
    bound = _int(args, "num_placeholders")

    def check(text: str) -> tuple[bool, str]:
        n = len(_PLACEHOLDER.findall(text))
        return n >= bound, f"{n} [placeholders], needs at least {bound}"
    return check


def _postscript(args: Mapping[str, Any]) -> Check:
    marker = _text(args, "postscript_marker").strip()
    # The reference searches `\s*MARKER.*$` (multi-line), which is found exactly where MARKER is: the leading
    # `\s*`, tried again from each white space character of a run, is left out.
    if marker == "P.P.S":
        pattern: re.Pattern[str] | None = re.compile(r"p\.\s?p\.\s?s")
    elif marker == "P.S.":
        pattern = re.compile(r"p\.\s?s\.")
    else:
        pattern = None
    folded = marker.lower()

    def check(text: str) -> tuple[bool, str]:
        lower = text.lower()
        if folded in lower if pattern is None else pattern.search(lower):
            return True, f"a postscript starting with {marker!r} found"
        return False, f"no postscript starting with {marker!r}"
    return check


def _number_bullet_lists(args: Mapping[str, Any]) -> Check:
    bound = _int(args, "num_bullets")

    def check(text: str) -> tuple[bool, str]:
        n = count_bullets(text, "*") + count_bullets(text, "-")
        return n == bound, f"{n} bullet lines (starting with * or -), needs exactly {bound}"
    return check


_CONSTRAINED = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def _constrained_response(args: Mapping[str, Any]) -> Check:
    def check(text: str) -> tuple[bool, str]:
        stripped = text.strip()
        for option in _CONSTRAINED:
            if option in stripped:
                return True, f"contains {option!r}"
        return False, f"contains none of {short(list(_CONSTRAINED))}"
    return check


_HIGHLIGHT = re.compile(r"\*[^\n\*]*\*")
_DOUBLE_HIGHLIGHT = re.compile(r"\*\*[^\n\*]*\*\*")


def _number_highlighted_sections(args: Mapping[str, Any]) -> Check:
    bound = _int(args, "num_highlights")

    def check(text: str) -> tuple[bool, str]:
        n = sum(1 for h in _HIGHLIGHT.findall(text) if h.strip("*").strip())
        n += sum(1 for h in _DOUBLE_HIGHLIGHT.findall(text) if h[2:-2].strip())
        return n >= bound, f"{n} *highlighted* sections, needs at least {bound}"
    return check


def _multiple_sections(args: Mapping[str, Any]) -> Check:
    splitter = _text(args, "section_spliter").strip()
    bound = _int(args, "num_sections")
    pattern = re.compile(r"\s?" + re.escape(splitter) + r"\s?\d+\s?")

    def check(text: str) -> tuple[bool, str]:
        n = len(pattern.split(text)) - 1
        return n >= bound, f"{n} sections marked '{splitter} N', needs at least {bound}"
    return check


def _json_format(args: Mapping[str, Any]) -> Check:
    def check(text: str) -> tuple[bool, str]:
        value = text.strip()
        for prefix in ("```json", "```Json", "```JSON", "```"):
            value = value.removeprefix(prefix)
        value = value.removesuffix("```").strip()
        try:
            json.loads(value)
        except ValueError as exc:
            return False, f"not one JSON value (a ``` fence allowed): {exc}"
        except RecursionError:
            return False, "not one JSON value: nested deeper than Python's JSON reader goes"
        return True, "the whole answer is one JSON value"
    return check


_TITLE = compile_re2(r"<<[^\n]+>>")


def _title(args: Mapping[str, Any]) -> Check:
    def check(text: str) -> tuple[bool, str]:
        for title in _TITLE.findall(text):
            if title.lstrip("<").rstrip(">").strip():
                return True, f"title {short(title)} found"
        return False, "no <<title>> found"
    return check


def _two_responses(args: Mapping[str, Any]) -> Check:
    def check(text: str) -> tuple[bool, str]:
        pieces = text.split("******")
        valid = []
        for i, piece in enumerate(pieces):
            if not piece.strip():
                if i not in (0, len(pieces) - 1):
                    return False, "an empty response between two ****** separators"
            else:
                valid.append(piece)
        if len(valid) != 2:
            return False, f"{len(valid)} responses separated by ******, needs 2"
        if valid[0].strip() == valid[1].strip():
            return False, "the two responses are the same"
        return True, "two different responses separated by ******"
    return check


def _repeat_prompt(args: Mapping[str, Any]) -> Check:
    prompt = _text(args, "prompt_to_repeat")
    folded = prompt.strip().lower()

    def check(text: str) -> tuple[bool, str]:
        if text.strip().lower().startswith(folded):
            return True, "starts with the request, repeated word for word"
        return False, f"does not start with the request {short(prompt)}"
    return check


def _end_checker(args: Mapping[str, Any]) -> Check:
    phrase = _text(args, "end_phrase").strip()
    folded = phrase.lower()

    def check(text: str) -> tuple[bool, str]:
        if text.strip().strip('"').lower().endswith(folded):
            return True, f"ends with {short(phrase)}"
        return False, f"does not end with {short(phrase)}"
    return check


def _quotation(args: Mapping[str, Any]) -> Check:
    def check(text: str) -> tuple[bool, str]:
        value = text.strip()
        if len(value) > 1 and value[0] == '"' and value[-1] == '"':
            return True, "wrapped in double quotation marks"
        return False, "not wrapped in double quotation marks"
    return check


def _capital_word_frequency(args: Mapping[str, Any]) -> Check:
    bound, relation = _int(args, "capital_frequency"), _relation(args, "capital_relation")

    def check(text: str) -> tuple[bool, str]:
        n = sum(1 for token in word_tokens(text) if token.isupper())
        return _compare(n, relation, bound), f"{n} words in capitals, needs {relation} {bound}"
    return check


def _english_case(upper: bool) -> Callable[[Mapping[str, Any]], Check]:
    name = "capital letters" if upper else "lowercase letters"

    def build(args: Mapping[str, Any]) -> Check:
        def check(text: str) -> tuple[bool, str]:
            if not (text.isupper() if upper else text.islower()):
                return False, f"not all in {name}"
            found = detect_language(text)
            if found is None:
                return True, f"all in {name}; langdetect cannot tell the language: counted as followed"
            return found == "en", f"all in {name}; langdetect says {found!r}, expected 'en'"
        return check
    return build


def _no_comma(args: Mapping[str, Any]) -> Check:
    def check(text: str) -> tuple[bool, str]:
        n = text.count(",")
        return n == 0, f"{n} commas" if n else "no commas"
    return check


# id -> (its keyword arguments, the builder that binds them)
_INSTRUCTIONS: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, Any]], Check]]] = {
    "keywords:existence": (("keywords",), _keywords_existence),
    "keywords:frequency": (("keyword", "frequency", "relation"), _keywords_frequency),
    "keywords:forbidden_words": (("forbidden_words",), _forbidden_words),
    "keywords:letter_frequency": (("letter", "let_frequency", "let_relation"), _letter_frequency),
    "language:response_language": (("language",), _response_language),
    "length_constraints:number_sentences": (("num_sentences", "relation"), _number_sentences),
    "length_constraints:number_paragraphs": (("num_paragraphs",), _number_paragraphs),
    "length_constraints:number_words": (("num_words", "relation"), _number_words),
    "length_constraints:nth_paragraph_first_word": (("num_paragraphs", "nth_paragraph", "first_word"),
                                                    _nth_paragraph_first_word),
    "detectable_content:number_placeholders": (("num_placeholders",), _number_placeholders),
    "detectable_content:postscript": (("postscript_marker",), _postscript),
    "detectable_format:number_bullet_lists": (("num_bullets",), _number_bullet_lists),
    "detectable_format:constrained_response": ((), _constrained_response),
    "detectable_format:number_highlighted_sections": (("num_highlights",), _number_highlighted_sections),
    "detectable_format:multiple_sections": (("section_spliter", "num_sections"), _multiple_sections),
    "detectable_format:json_format": ((), _json_format),
    "detectable_format:title": ((), _title),
    "combination:two_responses": ((), _two_responses),
    "combination:repeat_prompt": (("prompt_to_repeat",), _repeat_prompt),
    "startend:end_checker": (("end_phrase",), _end_checker),
    "startend:quotation": ((), _quotation),
    "change_case:capital_word_frequency": (("capital_frequency", "capital_relation"), _capital_word_frequency),
    "change_case:english_capital": ((), _english_case(upper=True)),
    "change_case:english_lowercase": ((), _english_case(upper=False)),
    "punctuation:no_comma": ((), _no_comma),
}
#: The IFEval instruction ids this evaluator scores (every id of the reference's registry).
IDS: tuple[str, ...] = tuple(_INSTRUCTIONS)


def loose_variants(text: str) -> list[str]:
    """The reference's loose-mode variants of an answer: as is, without its first, last or both lines, each
    with and without `*`."""
    lines = text.split("\n")
    cut = ["\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return [text, text.replace("*", ""), *cut, *(c.replace("*", "") for c in cut)]


def bind(value: Any) -> tuple[str, Check, bool]:
    """Check an `ifeval` value once: (its id, its bound check, loose or not).

    Raises:
        EvaluatorConfigError: naming the unknown id, the missing or unknown argument, or the bad value.
    """
    if not isinstance(value, Mapping) or "id" not in value:
        raise _fail("give a mapping with the instruction `id` and its arguments, e.g. "
                    "{id: length_constraints:number_words, relation: at least, num_words: 300}")
    instruction = str(value["id"])
    if instruction not in _INSTRUCTIONS:
        close = did_you_mean(instruction, IDS)
        hint = f"; did you mean {close!r}?" if close else ""
        raise _fail(f"unknown instruction id {instruction!r}{hint} (the ids are listed in docs/evaluators.md)",
                    "id")
    names, build = _INSTRUCTIONS[instruction]
    args = {k: v for k, v in value.items() if k not in ("id", "loose") and v is not None}
    unknown = [k for k in args if k not in names]
    if unknown:
        takes = f"takes {', '.join(names)}" if names else "takes no arguments"
        raise _fail(f"{instruction} {takes}, not {unknown[0]!r}", str(unknown[0]))
    missing = [n for n in names if n not in args]
    if missing:
        raise _fail(f"{instruction} needs {', '.join(missing)}", missing[0])
    loose = value.get("loose", False)
    if not isinstance(loose, bool):
        raise _fail(f"loose must be true or false, got {short(loose)}", "loose")
    return instruction, build(args), loose


def follows(check: Check, text: str, loose: bool) -> tuple[bool, str]:
    """Whether the answer follows the bound instruction, strict or loose, and what was counted."""
    text = searchable(text)
    if not loose:
        if not text.strip():
            return False, "empty answer"
        return check(text)
    first_reason = "empty answer"
    for i, variant in enumerate(loose_variants(text)):
        if not variant.strip():
            continue
        ok, reason = check(variant)
        if ok:
            return True, reason if i == 0 else f"{reason} (loose: {_VARIANT_NAMES[i]})"
        if i == 0:
            first_reason = reason
    return False, f"{first_reason} (no loose variant follows either)"


_VARIANT_NAMES = ("as is", "without *", "without the first line", "without the last line",
                  "without the first and last lines", "without the first line and *", "without the last line and *",
                  "without the first and last lines and *")


def ifeval(value: Any, options: Mapping[str, Any]) -> Scorer:
    """One IFEval instruction, followed (1) or not (0), by the reference checker's rules."""
    instruction, check, loose = bind(value)
    label = f"{instruction} ({'loose' if loose else 'strict'})"

    def score(answer: Answer, ctx: ScoringContext) -> Verdict:
        ok, reason = follows(check, answer.text, loose)
        return verdict(1.0 if ok else 0.0, f"{label}: {reason}", KIND)

    return score


# ------------------------------------------------------------------------------------------ registry entry

_COUNT = {"type": "integer", "minimum": 0}
_RELATION = {"enum": list(_RELATIONS)}
_WORDS = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]}
_ARGUMENTS: dict[str, Any] = {
    "keywords": {**_WORDS, "description": "keywords:existence: words that must all appear (ignoring case)."},
    "keyword": {"type": "string", "description": "keywords:frequency: the word to count."},
    "frequency": {**_COUNT, "description": "keywords:frequency: the bound on its count."},
    "relation": {**_RELATION, "description": "`less than` or `at least` (frequency, number_words, "
                 "number_sentences)."},
    "forbidden_words": {**_WORDS, "description": "keywords:forbidden_words: whole words that must not appear."},
    "letter": {"type": "string", "description": "keywords:letter_frequency: the letter to count."},
    "let_frequency": {**_COUNT, "description": "keywords:letter_frequency: the bound on its count."},
    "let_relation": {**_RELATION, "description": "keywords:letter_frequency: `less than` or `at least`."},
    "language": {"type": "string", "description": "language:response_language: ISO 639-1 code, e.g. `de`."},
    "num_sentences": {**_COUNT, "description": "length_constraints:number_sentences: the bound."},
    "num_paragraphs": {**_COUNT, "description": "number_paragraphs / nth_paragraph_first_word: how many."},
    "num_words": {**_COUNT, "description": "length_constraints:number_words: the bound."},
    "nth_paragraph": {"type": "integer", "minimum": 1, "description": "nth_paragraph_first_word: which one."},
    "first_word": {"type": "string", "description": "nth_paragraph_first_word: the word it starts with."},
    "num_placeholders": {**_COUNT, "description": "number_placeholders: fewest [placeholders]."},
    "postscript_marker": {"type": "string", "description": "postscript: e.g. `P.S.` or `P.P.S`."},
    "num_bullets": {**_COUNT, "description": "number_bullet_lists: exact number of bullet lines."},
    "num_highlights": {**_COUNT, "description": "number_highlighted_sections: fewest *highlights*."},
    "section_spliter": {"type": "string", "description": "multiple_sections: the word that starts a section "
                        "(IFEval's spelling), e.g. `Section`."},
    "num_sections": {**_COUNT, "description": "multiple_sections: fewest sections."},
    "prompt_to_repeat": {"type": "string", "description": "repeat_prompt: the request the answer starts with."},
    "end_phrase": {"type": "string", "description": "end_checker: the phrase the answer ends with."},
    "capital_frequency": {**_COUNT, "description": "capital_word_frequency: the bound on words in capitals."},
    "capital_relation": {**_RELATION, "description": "capital_word_frequency: `less than` or `at least`."},
}

IFEVAL = Kind("One IFEval instruction, scored by the rules of Google's reference checker (strict, or "
              "`loose: true`).", {
                  "type": "object", "required": ["id"], "additionalProperties": False,
                  "properties": {
                      "id": {"enum": list(IDS), "description": "The IFEval instruction id."},
                      "loose": {"type": "boolean", "description": "The reference's loose mode: also try the "
                                "answer without its first/last line and without `*` (default false)."},
                      **_ARGUMENTS}}, {},
              ({"ifeval": {"id": "length_constraints:number_words", "relation": "at least", "num_words": 300}},
               {"ifeval": {"id": "punctuation:no_comma", "loose": True}}),
              build=ifeval)

