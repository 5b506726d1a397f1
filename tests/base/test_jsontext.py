"""engine.base.jsontext builds `json.dumps`'s C encoder once; its text must be `json.dumps`'s, byte for byte."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.base import jsontext

_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
            | st.floats(allow_nan=True, allow_infinity=True) | st.text())
VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=5)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=5), max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_dumps_unicode_is_json_dumps_without_ascii_escapes(value: Any) -> None:
    assert jsontext.dumps_unicode(value) == json.dumps(value, ensure_ascii=False)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_dumps_ascii_is_plain_json_dumps(value: Any) -> None:
    assert jsontext.dumps_ascii(value) == json.dumps(value)


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
