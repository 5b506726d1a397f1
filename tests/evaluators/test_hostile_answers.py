"""Answers written to stall a scorer: every kind in the catalogue gives each a verdict, and no error it would not
give a plain answer (an error row leaves the pass rate, so a slow answer must not turn its fail into one).

The sweep runs in a subprocess whose timeout is only a hang guard: each shape here once took a scorer minutes
(a backtracking pattern or a search restarted at every bracket), where a linear scorer takes milliseconds.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.evaluators.text import strip_token
from engine.model.answer import ToolCall

_OLD_FENCE = re.compile(r"^```[\w+-]*\s*\n?(.*?)\n?```$", re.DOTALL)


def _old_strip_token(text: str) -> str:
    """`strip_token` as it was written with backtracking patterns (cubic on a run of stars)."""
    token = text.strip()
    fence = _OLD_FENCE.match(token)
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


TOKEN_TEXT = st.lists(st.sampled_from(["`", "```", "*", "**", "'", '"', ".", "..", " ", "\n", "\t", "a", "B",
                                       "json", "py", "+", "-", "_"]), max_size=24).map("".join)


@settings(max_examples=2000, deadline=None)
@given(TOKEN_TEXT)
def test_tokens_are_stripped_as_the_backtracking_patterns_stripped_them(text: str) -> None:
    assert strip_token(text) == _old_strip_token(text)


def test_arguments_nested_past_the_decoder_are_flagged_not_raised() -> None:
    """A run's rows keep the model's raw arguments; reading them back (rescore, a stored conversation) must not
    crash on a `[[[[...` the live client already refused."""
    call = ToolCall.from_raw("get_weather", "[" * 5000 + "]" * 5000)
    assert (call.valid_json, call.arguments) == (False, None)
