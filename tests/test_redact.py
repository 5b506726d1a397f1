"""engine/redact.py: the one home of redaction."""

from __future__ import annotations

import base64
import re
from urllib.parse import quote, quote_plus, unquote_plus

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.redact import (
    MIN_FRAGMENT,
    Redactor,
    key_forms,
    looks_like_key,
    mask_url,
    mask_urls,
    public_params,
    secret_query_names,
    url_secrets,
)

KEY = "sk-proj-" + "A1b2C3d4" * 5


def test_keys_are_masked_whole_and_a_cut_off_start_at_the_end() -> None:
    redact = Redactor([KEY, None, ""])
    assert redact.clean(f"key={KEY}; again {KEY}") == "key=***; again ***"
    assert redact.clean("cut here: " + KEY[:MIN_FRAGMENT + 3]) == "cut here: ***"
    assert redact.clean("too short to mean anything: " + KEY[:MIN_FRAGMENT - 1]).endswith(KEY[:MIN_FRAGMENT - 1])
    assert redact.clean(KEY[:20] + " and more text") == KEY[:20] + " and more text"   # only a cut at the end
    assert not Redactor([None, "abc"]) and Redactor([KEY]).longest == len(KEY)


def test_excerpt_masks_before_it_cuts() -> None:
    text = "x" * 70 + KEY + " trailing"
    shown = Redactor([KEY]).excerpt(text, 80)
    assert KEY[:MIN_FRAGMENT] not in shown and shown.endswith("*** traili'")   # masked, then cut to 80


@pytest.mark.parametrize(("url", "shown"), [
    ("http://user:pass@host:8000/v1", "http://***@host:8000/v1"),
    ("https://token@api.example.com/v1", "https://***@api.example.com/v1"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    (None, None),
])
def test_userinfo_in_urls_is_masked(url: str | None, shown: str | None) -> None:
    assert mask_url(url) == shown
    assert mask_urls(f"cannot connect to {url}: refused") == f"cannot connect to {shown}: refused"


def test_url_secrets() -> None:
    assert url_secrets("http://user:s3cret-pass@host/v1") == ["user:s3cret-pass", "s3cret-pass",
                                                               base64.b64encode(b"user:s3cret-pass").decode()]
    assert url_secrets("http://host/v1") == []


def test_url_secrets_cover_percent_encoded_userinfo_and_the_basic_auth_header() -> None:
    found = url_secrets("http://us%40er:p%40ss-w0rd@host/v1")
    assert {"us%40er:p%40ss-w0rd", "us@er:p@ss-w0rd", "p%40ss-w0rd", "p@ss-w0rd",
            base64.b64encode(b"us@er:p@ss-w0rd").decode()} <= set(found)
    redact = Redactor(found)
    echoed = f"Authorization: Basic {base64.b64encode(b'us@er:p@ss-w0rd').decode()}\nurl: http://us%40er:p%40ss-w0rd@h"
    assert "p@ss" not in redact.clean(echoed) and "p%40ss" not in redact.clean(echoed)
    assert "dXNAZXI6" not in redact.clean(echoed)


def test_query_values_are_masked_in_urls_and_credentials_in_free_text() -> None:
    url = "https://h/openai?api-version=2024-06-01&api-key=k3y-Value&sig=abc%2Fdef%3D"
    assert mask_url(url) == "https://h/openai?api-version=***&api-key=***&sig=***"
    assert mask_url(url, secrets_only=True) == "https://h/openai?api-version=2024-06-01&api-key=***&sig=***"
    assert mask_urls(f"POST /openai/chat/completions?{url.partition('?')[2]} HTTP/1.1") == \
        "POST /openai/chat/completions?api-version=***&api-key=***&sig=*** HTTP/1.1"
    assert mask_urls("is 2+2=4? yes, a=b") == "is 2+2=4? yes, a=b"   # no URL, no path: prose is left alone
    found = url_secrets(url)
    assert {"k3y-Value", "abc/def=", "abc%2Fdef%3D"} <= set(found) and "2024-06-01" not in found
    assert secret_query_names(url) == ["api-key", "sig"] and secret_query_names("http://h/v1?api-version=1") == []


def test_params_are_filtered_by_exact_names_at_every_depth() -> None:
    params = {"max_tokens": 64, "top_p": 0.9, "api_key": "a", "Api-Key": "b", "metadata": {"api_key": "c", "user": "me",
              "items": [{"token": "d", "n": 1}]}, "extra_headers": {"Authorization": "Bearer e"},
              "callback": "http://u:p@host/x"}
    assert public_params(params) == {"max_tokens": 64, "top_p": 0.9, "metadata": {"user": "me", "items": [{"n": 1}]},
                                     "extra_headers": {}, "callback": "http://***@host/x"}
    assert public_params({"api_key": "a", "max_tokens": 3}, keep_keys=True) == {"api_key": "***", "max_tokens": 3}


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TOGETHER_API_KEY", "my_token",
                                  "GROQ_KEY_2024", "AZURE_OPENAI_API_KEY_EASTUS2", "HF_TOKEN"])
def test_variable_names_are_not_keys(name: str) -> None:
    assert not looks_like_key(name)


@pytest.mark.parametrize("value", ["sk" + "0a1b2c3d4e5f" * 4, "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
                                   "hf_AbCdEfGhIjKlMnOpQrStUvWx", "gsk_" + "aB3" * 12,
                                   "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv"])
def test_pasted_keys_are_recognised(value: str) -> None:
    assert looks_like_key(value)


_KEY_CHARS = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_", min_size=20,
                     max_size=60)


@given(key=_KEY_CHARS, before=st.binary(max_size=8), after=st.binary(max_size=8))
def test_a_key_is_masked_in_every_form_it_comes_back_in(key: str, before: bytes, after: bytes) -> None:
    redact = Redactor(key_forms(key))
    for sent in (quote(key, safe=""), quote(key, safe="/"), quote_plus(key, safe="")):
        lower_hex = re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), sent)
        for echoed in (sent, lower_hex, unquote_plus(sent), unquote_plus(sent).replace("+", " "), key):
            assert key not in redact.clean(f"GET /v1?key={echoed} HTTP/1.1")
            assert redact.clean(f"?key={echoed}&x=1") == "?key=***&x=1"
    # base64 of a longer header block holding the key anywhere: no long run of the key's own base64 survives
    encoded = base64.b64encode(before + key.encode() + after).decode()
    cleaned = redact.clean(f"X-Echoed: {encoded}")
    assert "***" in cleaned
    for piece in cleaned.removeprefix("X-Echoed: ").split("***"):
        for start in range(4):
            chunk = piece[start:]
            chunk = chunk[:len(chunk) // 4 * 4]
            try:
                decoded = base64.b64decode(chunk, validate=True)
            except ValueError:
                continue
            assert key.encode()[:16] not in decoded and key.encode()[-16:] not in decoded
