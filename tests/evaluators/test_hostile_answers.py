"""Answers written to stall a scorer: every kind in the catalogue gives each a verdict, and no error it would not
give a plain answer (an error row leaves the pass rate, so a slow answer must not turn its fail into one).

The sweep runs in a subprocess whose timeout is only a hang guard: each shape here once took a scorer minutes
(a backtracking pattern or a search restarted at every bracket), where a linear scorer takes milliseconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.evaluators.text import strip_token
from engine.model.answer import ToolCall

ROOT = Path(__file__).resolve().parents[2]

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


def test_every_kind_gives_hostile_answers_a_verdict_and_no_new_error() -> None:
    """Each shape as the answer text, as a call's arguments, as one argument's value and as a tool name."""
    program = r'''
import json
from engine.evaluators import score
from engine.evaluators.registry import KINDS
from engine.model.answer import Answer, ToolCall
from tests.factories import make_test

n = 100_000
shapes = ["[" * n, '{"a":' * (n // 5), "*" * n, "*" * n + "x", "```" + " " * n + "x", "```json" + "\n" * n,
          "```" + "\n" * n, "\n" * n + "x", " " * n + "x", "a" * n, "1" * n, "1." * (n // 2), "1," * (n // 2),
          '"' * n, "x [1, {\"k\": \"" * (n // 12), "<" * n, "# a\n" * (n // 4), "é" * n]
out = []
for name, kind in KINDS.items():
    if kind.build is None or kind.blocking:
        continue
    for example in kind.examples:
        try:
            test = make_test(eval=example)
        except Exception:
            continue   # an example that needs more of a test than the factory gives (a golden, tools, a suite)
        if score(test, Answer(text="B")).error:
            continue   # a kind that reads what a single answer does not have (a conversation, a run's record)
        answers = [Answer(text=text) for text in shapes]
        answers += [Answer(tool_calls=(ToolCall.from_raw("get_weather", text),)) for text in shapes]
        answers += [Answer(tool_calls=(ToolCall.from_arguments("get_weather", {"city": text}),)) for text in shapes]
        answers += [Answer(tool_calls=(ToolCall.from_raw(text, "{}"),)) for text in shapes]
        for i, answer in enumerate(answers):
            verdict = score(test, answer)
            if verdict.error:
                out.append([name, json.dumps(example), i, verdict.reason[:200]])
print(json.dumps(out))
'''
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == []
