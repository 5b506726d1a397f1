"""engine.base.jsontext's encoders are built once; their text must be `json.dumps`'s, byte for byte (hashes and
cache keys are made of it)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.base import jsontext
from engine.base.jsontext import dumps_compact_text, utf8_safe

_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
            | st.floats(allow_nan=True, allow_infinity=True) | st.text())
VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=5)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_dumps_unicode_is_json_dumps_without_ascii_escapes(value: Any) -> None:
    assert jsontext.dumps_unicode(value) == json.dumps(value, ensure_ascii=False)


_KEYED = VALUES | st.dictionaries(st.text(max_size=8), st.sets(st.integers()) | VALUES, max_size=5)


@settings(max_examples=300, deadline=None)
@given(_KEYED)
def test_dumps_sorted_unicode_is_the_cache_keys_json_dumps(value: Any) -> None:
    assert jsontext.dumps_sorted_unicode(value) == json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


@settings(max_examples=300, deadline=None)
@given(_KEYED)
def test_dumps_canonical_is_the_test_hashes_json_dumps(value: Any) -> None:
    assert jsontext.dumps_canonical(value) == json.dumps(value, sort_keys=True, separators=(",", ":"),
                                                         ensure_ascii=False, default=str)


def test_unserialisable_values_raise_as_json_dumps_does() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        jsontext.dumps_unicode({"when": object()})


@given(st.text())
def test_utf8_safe_leaves_every_valid_text_as_it_is(text: str) -> None:
    # hypothesis' text() draws no surrogates: every one of these is valid
    assert utf8_safe(text) is text


@pytest.mark.parametrize(("text", "safe"), [
    ("a\ud800b", "a\ufffdb"), ("\udfff", "\ufffd"), ("x\udbff\udbffy", "x\ufffd\ufffdy"),
    ("\ud83d\ude00", "\U0001f600"),   # a whole pair left as two halves is one character again
])
def test_utf8_safe_replaces_each_unpaired_surrogate(text: str, safe: str) -> None:
    assert utf8_safe(text) == safe
    assert json.loads(dumps_compact_text({"answer": text})) == {"answer": safe}


def test_the_cache_keys_of_text_with_a_surrogate_exist_and_other_keys_are_unchanged() -> None:
    from engine.client import response_cache
    from engine.judge import cache as judge_cache
    from engine.model.model_config import ModelConfig

    model = ModelConfig(name="m", model="m-1", base_url="http://127.0.0.1:1/v1")
    body = {"messages": [{"role": "assistant", "content": "half \ud800 a pair"}]}
    assert response_cache.cache_key("http://127.0.0.1:1/v1", body, 0) != response_cache.cache_key(
        "http://127.0.0.1:1/v1", {"messages": []}, 0)
    assert len(judge_cache.cache_key(model, body, 0)) == 64
    plain = {"messages": [{"role": "user", "content": "é"}]}
    text = json.dumps({"body": plain, "sample": 0, "url": "http://127.0.0.1:1/v1"}, sort_keys=True,
                      ensure_ascii=False, default=str)
    assert response_cache.cache_key("http://127.0.0.1:1/v1", plain, 0) == hashlib.sha256(text.encode()).hexdigest()
