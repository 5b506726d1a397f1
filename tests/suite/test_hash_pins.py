"""Test hashes are pinned: they key `resume`, the result caches and `diff`, so a hash that changes is a
regression even when every Test still looks right.

tests/fixtures/hash_pins/ holds copies of the shipped suites (agent, exec, judge, tools, workspaces), the four
shapes of bench/bench_validate.py and features.yaml (messages, content parts with an image, `cases_from`, named
evaluators, a JSON golden, a suite `judge_prompt`, Jinja loops and expressions). hashes.json was written by the
tree at f4a67ce, before the loader's fast paths; the loader must keep giving exactly these hashes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.suite import hashing, load_suites
from engine.suite.hashing import TestHasher, canonical_json

PINS = Path(__file__).resolve().parents[1] / "fixtures" / "hash_pins"


def test_every_pinned_test_keeps_its_hash() -> None:
    suites, diagnostics = load_suites([PINS], golden_check=True)
    assert [d for d in diagnostics if d.severity == "error"] == []
    got = {f"{suite.id}/{test.id}": test.hash for suite in suites for test in suite.tests}
    pinned = json.loads((PINS / "hashes.json").read_text(encoding="utf-8"))
    assert len(pinned) == 58
    assert got == pinned


def test_the_pins_would_catch_a_changed_test(tmp_path: Path) -> None:
    """A one-character change of a prompt gives a different hash (the pins are not vacuous)."""
    source = (PINS / "features.yaml").read_text(encoding="utf-8")
    (tmp_path / "features.yaml").write_text(source.replace("What is 2 + 2?", "What is 2 + 2 ?"), encoding="utf-8")
    for name in ("dot.png", "capitals.csv"):
        (tmp_path / name).write_bytes((PINS / name).read_bytes())
    (suite,), _ = load_suites([tmp_path / "features.yaml"])
    pinned = json.loads((PINS / "hashes.json").read_text(encoding="utf-8"))
    changed = {test.id for test in suite.tests if test.hash != pinned[f"features/{test.id}"]}
    assert changed == {"plain"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(messages=st.lists(st.dictionaries(st.sampled_from(["role", "content"]), json_values), max_size=3),
       prompt=st.text(max_size=10), tools=st.lists(json_values, max_size=2), eval_spec=json_values,
       variables=st.dictionaries(st.text(max_size=5), json_values | st.sets(st.integers(), max_size=2), max_size=3),
       max_tokens=st.none() | st.integers(1, 9999), temperature=st.none() | st.floats(0, 2),
       threshold=st.floats(0, 1), agent=st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=2),
       returns=st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=2), share_tools=st.booleans())
def test_the_per_test_hasher_gives_test_hash_exactly(messages: Any, prompt: str, tools: Any, eval_spec: Any,
                                                    variables: Any, max_tokens: Any, temperature: Any,
                                                    threshold: float, agent: Any, returns: Any,
                                                    share_tools: bool) -> None:
    """TestHasher (the shared parts encoded once per test) is test_hash, byte for byte, on any content."""
    shared = dict(tools=tools, eval_spec=eval_spec, max_tokens=max_tokens, temperature=temperature,
                  threshold=threshold, agent=agent, returns=returns)
    hasher = TestHasher(**shared, tools_json=canonical_json(list(tools)) if share_tools else None)
    assert hasher.digest(messages=messages, prompt=prompt, variables=variables) == hashing.test_hash(
        **shared, messages=messages, prompt=prompt, variables=variables)


@settings(max_examples=300, deadline=None)
@given(value=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6) | st.sets(st.integers(), max_size=2),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner) | st.dictionaries(st.text(max_size=5), inner,
                                                                                    max_size=3),
    max_leaves=10))
def test_canonical_json_is_json_dumps_with_its_options(value: Any) -> None:
    """The encoder built once (engine/suite/hashing.py) writes what `json.dumps` writes: NaN, infinities,
    tuples, non-ASCII text, and values JSON has no word for (a set: `default=str`)."""
    assert canonical_json(value) == json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                               default=str)


@settings(max_examples=300, deadline=None)
@given(system=st.none() | st.text(max_size=8), user=st.text(max_size=8))
def test_chat_json_is_the_canonical_json_of_the_messages_it_stands_for(system: str | None, user: str) -> None:
    """`chat_json` (the hashed messages of a `prompt:` test, written from its two strings) is byte for byte
    `canonical_json` of the messages the expander builds: no system turn for None or "", quotes, control
    characters and non-ASCII text escaped as the encoder escapes them."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    assert hashing.chat_json(system, user) == canonical_json(messages)
