"""How IFEval's reference checker counts text: words, sentences, word tokens, bullet lines, and the language.

Each rule stands in for the reference's tool (NLTK's RegexpTokenizer, punkt and word_tokenize; its bullet regexes;
langdetect) and is linear in the answer: the answer is the model's, so a rule may not backtrack on a run of one
character. A word read back before a full stop is read at most `_WORD_WINDOW` characters. docs/evaluators.md
"ifeval" lists where a rule differs from the reference.
"""

from __future__ import annotations

import re
import threading

from engine.errors import EvaluatorConfigError

__all__ = ["count_bullets", "count_words", "detect_language", "split_sentences", "word_tokens"]

_WORD = re.compile(r"\w+")


def count_words(text: str) -> int:
    """Runs of word characters (`\\w+`, Unicode), as the reference's RegexpTokenizer counts words."""
    return len(_WORD.findall(text))


# Sentence splitting in the manner of NLTK's punkt (which the reference uses with its English model): a
# sentence ends at `.`, `?` or `!` (closing quotes and brackets after it stay with it) followed by white space;
# line breaks alone never end one. After a title, an initial, another abbreviation or an ellipsis, a sentence
# ends only before a capitalised common word (punkt's orthographic evidence: a name after "Dr." or "J." does not
# start a sentence, "The" does); after a number, only before a word that is not lower case.
_TITLES = frozenset([
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "gen", "col", "lt", "sgt", "capt", "rev", "hon", "sen",
    "rep", "gov", "mt", "ft", "messrs",
])
_ABBREVIATIONS = frozenset([
    "etc", "inc", "ltd", "co", "corp", "vs", "cf", "al", "approx", "dept", "est", "fig", "jan", "feb", "mar", "apr",
    "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "no", "vol", "pp", "ed", "eds", "e.g", "i.e", "u.s",
    "u.k", "a.m", "p.m", "u.n", "ph.d",
])
_COMMON = frozenset([
    "a", "an", "the", "this", "that", "these", "those", "it", "its", "i", "we", "you", "he", "she", "they", "there",
    "here", "my", "our", "your", "his", "her", "their", "let's", "let", "if", "when", "while", "as", "at", "in",
    "on", "for", "from", "to", "by", "with", "of", "after", "before", "during", "since", "until", "so", "but",
    "and", "or", "nor", "yet", "also", "then", "thus", "however", "therefore", "moreover", "furthermore", "finally",
    "first", "second", "third", "next", "last", "please", "do", "don't", "does", "is", "are", "was", "were", "be",
    "been", "being", "have", "has", "had", "will", "would", "can", "could", "should", "may", "might", "must", "not",
    "no", "yes", "what", "which", "who", "whom", "whose", "why", "how", "where", "all", "any", "each", "every",
    "some", "many", "most", "more", "few", "one", "two", "three", "other", "another", "such", "both", "either",
    "neither", "overall", "instead", "now", "today", "remember", "note", "just",
])
# Terminal punctuation and what closes after it; a candidate when white space or the end follows, checked in
# `split_sentences` (as a lookahead, a run of marks followed by anything else was tried again from each mark).
_CANDIDATE = re.compile(r"[.?!…]+[\"'”’)\]}*]*")
_NEXT_TOKEN = re.compile(r"\s+[\"'“‘(\[{*_]*(\S+)")
_WORD_WINDOW = 256   # a word longer than this before a full stop is no title, abbreviation, initial or number


def _ends_sentence(text: str, start: int, end: int) -> bool:
    """Whether the terminal punctuation at text[start:end] closes a sentence."""
    mark = text[start:end]
    if "?" in mark or "!" in mark:
        return True
    following = _NEXT_TOKEN.match(text, end)
    if following is None:
        return True
    nxt = following.group(1)
    # The word before the mark: after the last space, tab or line break, read back at most _WORD_WINDOW.
    low = max(0, start - _WORD_WINDOW)
    cut = max(text.rfind(" ", low, start), text.rfind("\t", low, start), text.rfind("\n", low, start))
    if cut < 0 and low > 0:
        return True
    word = text[cut + 1:start].lstrip("\"'“‘([{*_").lower()
    starts_sentence = nxt[:1].isupper() and nxt.lower().rstrip(".,;:!?") in _COMMON
    if mark.startswith("..") or mark.startswith("…"):
        return starts_sentence
    if word in _TITLES or word in _ABBREVIATIONS or re.fullmatch(r"(?:[a-z]\.)*[a-z]", word):
        return starts_sentence
    if word.replace(",", "").replace(".", "").isdigit():
        return not nxt[:1].islower()
    return True


def split_sentences(text: str) -> list[str]:
    """The sentences of `text` by the punkt-like rule above (empty pieces dropped)."""
    sentences, begin = [], 0
    size = len(text)
    for match in _CANDIDATE.finditer(text):
        end = match.end()
        if (end == size or text[end].isspace()) and _ends_sentence(text, match.start(), end):
            piece = text[begin:match.end()].strip()
            if piece:
                sentences.append(piece)
            begin = match.end()
    tail = text[begin:].strip()
    if tail:
        sentences.append(tail)
    return sentences


# Word tokens as NLTK's Treebank tokenizer yields them for `isupper`: white space splits, and so do
# punctuation, ellipses, dashes and the English clitics ('s, n't, 're, ...).
_TOKEN_SPLIT = re.compile(r"(\.\.\.+|--+|[,;:!?\"“”‘()\[\]{}<>](?<!\d,)|(?i:n't|'s|'m|'d|'ll|'re|'ve)\b)")


def word_tokens(text: str) -> list[str]:
    """Word tokens in the manner of nltk.word_tokenize (used to count words written in capitals)."""
    tokens: list[str] = []
    for chunk in text.split():
        tokens.extend(part for part in _TOKEN_SPLIT.split(chunk) if part and part.strip())
    return tokens


_DETECTOR_LOCK = threading.Lock()


def detect_language(text: str) -> str | None:
    """The ISO 639-1 code langdetect gives the text, or None when it finds no features to judge by.

    Raises:
        EvaluatorConfigError: when langdetect is not installed.
    """
    try:
        import langdetect
    except ImportError:
        raise EvaluatorConfigError("ifeval: the language checks need langdetect: pip install langdetect",
                                   kind="ifeval") from None
    with _DETECTOR_LOCK:
        langdetect.DetectorFactory.seed = 0
        try:
            return str(langdetect.detect(text))
        except langdetect.LangDetectException:
            return None


_NOT_SPACE = re.compile(r"\S")


def count_bullets(text: str, mark: str) -> int:
    """How many times the reference's `^\\s*\\*[^\\*].*$` (mark `*`) or `^\\s*-.*$` (mark `-`) matches, multi-line.

    Found as `re.findall` finds them, in one pass: a match starts at a line start, skips white space (line
    breaks too) to the mark (`*` wants one more character, not `*`: a line break counts) and ends at the end of
    the line after the mark. A start that fails fails for every line start inside the same white space, so the
    next start is looked for after it (the pattern itself tries each of those again: quadratic in a run of blank
    lines).
    """
    size, count, start = len(text), 0, 0
    while True:
        found = _NOT_SPACE.search(text, start)
        at = size if found is None else found.start()
        after = at + 2 if mark == "*" else at + 1
        matched = at < size and text[at] == mark and after <= size and (mark != "*" or text[at + 1] != "*")
        count += matched
        end = text.find("\n", after if matched else at)   # the end of the match's last line, or of `at`'s
        if end < 0:
            return count
        start = end + 1
