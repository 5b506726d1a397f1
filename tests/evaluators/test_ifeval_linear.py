"""`ifeval` in linear time on answers the model writes to stall it, with the verdicts its patterns gave before.

The rewritten rules are checked against the patterns they replace (the reference checker's own, run on Python's
backtracking `re`) on random short texts, where backtracking costs nothing; the hostile 80 KB answers that sent
those patterns quadratic (minutes each) must each get a verdict, in a subprocess whose timeout is only a guard.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.evaluators.ifeval import _PLACEHOLDER, _TITLE, bind
from engine.evaluators.ifeval_text import count_bullets, split_sentences

ROOT = Path(__file__).resolve().parents[2]

# Texts made of what the rules look at: marks, brackets, white space of every kind, words.
TEXT = st.lists(st.sampled_from([*"*-!?.…<>[]\"')( \t\n\r\x0b\u2003\u00a0aAbZ1,", "Mr", "The", "P.S.", "p. s.",
                                 "e.g", "12", "..."]), max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_bullets_are_counted_as_the_reference_patterns_count_them(text: str) -> None:
    assert count_bullets(text, "*") == len(re.findall(r"^\s*\*[^\*].*$", text, flags=re.MULTILINE))
    assert count_bullets(text, "-") == len(re.findall(r"^\s*-.*$", text, flags=re.MULTILINE))


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_placeholders_and_titles_are_found_as_by_the_reference_patterns(text: str) -> None:
    assert _PLACEHOLDER.findall(text) == re.findall(r"\[.*?\]", text)
    assert _TITLE.findall(text) == re.findall(r"<<[^\n]+>>", text)


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_postscripts_are_found_as_by_the_reference_patterns(text: str) -> None:
    for marker, pattern in (("P.P.S", r"\s*p\.\s?p\.\s?s.*$"), ("P.S.", r"\s*p\.\s?s\..*$"),
                            ("note", r"\s*note.*$")):
        _, check, _ = bind({"id": "detectable_content:postscript", "postscript_marker": marker})
        expected = bool(re.search(pattern, text.lower(), flags=re.MULTILINE))
        assert check(text)[0] == expected if text.strip() else True


_OLD_CANDIDATE = re.compile(r"[.?!…]+[\"'”’)\]}*]*(?=\s|$)")


def _old_split(text: str) -> list[str]:
    """The sentence rule as it was written with a lookahead and whole-line look-backs (quadratic)."""
    from engine.evaluators import ifeval_text

    sentences, begin = [], 0
    for match in _OLD_CANDIDATE.finditer(text):
        start, end = match.start(), match.end()
        mark = text[start:end]
        ends = True
        if "?" not in mark and "!" not in mark:
            following = ifeval_text._NEXT_TOKEN.match(text, end)
            if following is not None:
                nxt = following.group(1)
                line_start = text.rfind("\n", 0, start) + 1
                space = max(text.rfind(" ", line_start, start), text.rfind("\t", line_start, start))
                word = text[max(space + 1, line_start):start].lstrip("\"'“‘([{*_").lower()
                starts = nxt[:1].isupper() and nxt.lower().rstrip(".,;:!?") in ifeval_text._COMMON
                abbreviated = (word in ifeval_text._TITLES or word in ifeval_text._ABBREVIATIONS
                               or re.fullmatch(r"(?:[a-z]\.)*[a-z]", word))
                if mark.startswith(("..", "…")) or abbreviated:
                    ends = starts
                elif word.replace(",", "").replace(".", "").isdigit():
                    ends = not nxt[:1].islower()
        if ends:
            piece = text[begin:end].strip()
            if piece:
                sentences.append(piece)
            begin = end
    tail = text[begin:].strip()
    if tail:
        sentences.append(tail)
    return sentences


@settings(max_examples=600, deadline=None)
@given(TEXT)
def test_sentences_are_split_as_the_lookahead_rule_split_them(text: str) -> None:
    assert split_sentences(text) == _old_split(text)


def test_every_instruction_answers_hostile_80_kb_answers_with_a_verdict() -> None:
    """Each of these took minutes in one check or another; the subprocess timeout is only a hang guard."""
    program = r'''
from engine.evaluators.ifeval import IDS, _INSTRUCTIONS, bind, follows
VALUES = {"keywords": ["a"], "keyword": "a", "frequency": 2, "relation": "at least", "forbidden_words": ["a"],
          "letter": "a", "let_frequency": 2, "let_relation": "at least", "language": "en", "num_sentences": 2,
          "num_paragraphs": 2, "num_words": 2, "nth_paragraph": 1, "first_word": "a", "num_placeholders": 1,
          "postscript_marker": "P.S.", "num_bullets": 2, "num_highlights": 1, "section_spliter": "Section",
          "num_sections": 2, "prompt_to_repeat": "a", "end_phrase": "a", "capital_frequency": 2,
          "capital_relation": "at least"}
n = 80_000
shapes = ["!" * n, "!" * n + "x", "[" * n, "\n" * n, "\n" * n + "x", "<" * n, " " * n + "x", "a.\r" * (n // 3),
          "- \n" * (n // 3), "*" * n]
answered = 0
for ident in IDS:
    names, _ = _INSTRUCTIONS[ident]
    _, check, _ = bind({"id": ident, **{name: VALUES[name] for name in names}})
    for text in shapes:
        for loose in (False, True):
            ok, reason = follows(check, text, loose)
            answered += isinstance(ok, bool) and bool(reason)
print(answered)
'''
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(25 * 10 * 2)]
