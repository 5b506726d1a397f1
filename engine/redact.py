"""Secrets out of everything the engine stores or prints: the one home of redaction.

Three kinds of secret reach the engine, and each has one rule here:

- API keys (the value of a model's `api_key_env` variable): `Redactor` masks them as `***` in every
  text a server or a model sends back (answers, reasoning, tool arguments, error messages), always
  *before* the text is cut, so a cut never leaves part of a key behind. A text the server itself cut
  (an answer stopped at max_tokens, a stream that broke off, an error body read only so far) may end
  in the first characters of a key: a trailing piece of at least `MIN_FRAGMENT` characters is masked too.
  A key comes back in more forms than one (`key_forms`): percent-encoded as it was sent in a query
  (`+` as `%2B`, in either case of hex), with `+` read back as a space, or base64-encoded inside an echoed
  header, wherever it stood in it.
- Credentials written into a URL (`http://user:pass@host/v1?api-key=...`): `mask_url` / `mask_urls` replace
  the userinfo and every query value with `***` wherever a URL is shown (manifest, `served_by`, `--dry-run`,
  error text); `url_secrets` gives a `Redactor` the forms they can take in free text: the userinfo plain and
  percent-decoded, the password alone, the base64 of `user:password` an echoed `Authorization: Basic` header
  carries, and the values of credential-named query parameters (`secret_query_names`) and of long ones.
- Request params: only `public_params` goes to the manifest - keys named exactly like a credential
  are dropped at any depth, and nothing else (`max_tokens` stays).

`looks_like_key` tells a pasted key from the name of an environment variable, so the error that
refuses it never repeats it.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

__all__ = ["MASK", "MIN_FRAGMENT", "SECRET_PARAM_NAMES", "Redactor", "key_forms", "looks_like_key", "mask_url",
           "mask_urls", "public_params", "secret_query_names", "url_secrets"]

MASK = "***"
MIN_FRAGMENT = 8          # a cut-off key prefix this long is still treated as the key
_MIN_SECRET = 4           # shorter "secrets" would mask ordinary words in answers

# Request fields that carry credentials, compared exactly after lower-casing and dropping - and _
# ("api-key", "apiKey" and "api_key" are one name). Exact names, not substrings: `max_tokens` is no secret.
SECRET_PARAM_NAMES = frozenset({
    "apikey", "key", "secret", "secretkey", "clientsecret", "password", "passwd", "token", "accesstoken",
    "authtoken", "bearertoken", "refreshtoken", "idtoken", "sessiontoken", "authorization", "auth",
    "credentials", "credential", "privatekey", "xapikey", "openaiapikey", "cookie"})

# Query parameters that carry a credential besides SECRET_PARAM_NAMES: signatures (Azure SAS `sig`, S3's
# presigned `X-Amz-Signature`), subscription keys, OAuth codes.
_SECRET_QUERY_NAMES = SECRET_PARAM_NAMES | {"sig", "signature", "xamzsignature", "xamzsecuritytoken",
                                            "subscriptionkey", "ocpapimsubscriptionkey", "code", "sas", "pass"}
# A query value this long is a secret whatever its name (a token, a signature): masked in free text too.
_LONG_QUERY_VALUE = 16

_PERCENT_HEX = re.compile(r"%[0-9A-F]{2}")
_MIN_BASE64_CORE = 12     # a shorter run of a key's base64 could be ordinary text

_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s?#]+)@")
# A query string attached to a URL (`scheme://...`) or to a path (`/v1/...`, as in an echoed request line).
_QUERY = re.compile(r"(?P<path>(?:[A-Za-z][A-Za-z0-9+.-]*://|(?<![^\s(\[\"'=])/)[^\s?#\"'<>]*)\?"
                    r"(?P<query>[^\s#\"'<>]+)")
_QUERY_VALUE = re.compile(r"(?P<name>(?:^|&)[^=&]*)=[^&]*")


class Redactor:
    """Masks known secret values in text.

    Args:
        secrets: The values to mask (API keys, URL passwords). Empty and very short values are ignored.
    """

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Iterable[str | None]) -> None:
        unique = {s for s in secrets if s and len(s) >= _MIN_SECRET}
        self._secrets = tuple(sorted(unique, key=len, reverse=True))   # longest first: a key containing another

    def __bool__(self) -> bool:
        return bool(self._secrets)

    @property
    def longest(self) -> int:
        """The length of the longest secret (0 without any): how far past a cut to read before masking."""
        return len(self._secrets[0]) if self._secrets else 0

    def clean(self, text: str) -> str:
        """`text` with every secret, and a secret's cut-off start at the very end, masked."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
            head = secret[:MIN_FRAGMENT]
            if head in text[-len(secret):]:
                for size in range(len(secret) - 1, MIN_FRAGMENT - 1, -1):
                    if text.endswith(secret[:size]):
                        text = text[:-size] + MASK
                        break
        return text

    def excerpt(self, text: str, limit: int) -> str:
        """The start of a server's text for a message: masked first, then cut to `limit` characters, quoted."""
        return repr(mask_urls(self.clean(text))[:limit])


def key_forms(key: str) -> list[str]:
    """Every form an API key can come back in, for a `Redactor`: as it is; percent-encoded as it was sent in a
    query (`quote(key, safe="")`, `/` kept or not, a space as `+` or `%20`, hex in either case); with `+` read
    back as a space (a query decoded as a form); base64-encoded, alone or as `key:` / `:key` (Basic auth), and
    the part of its base64 that stays the same wherever the key stands inside a longer encoded header.
    """
    forms: list[str] = []
    for raw in dict.fromkeys((key, key.replace("+", " "))):
        forms.append(raw)
        for encoded in (quote(raw, safe=""), quote(raw, safe="/"), quote_plus(raw, safe=""), quote_plus(raw, safe="/")):
            forms += [encoded, _PERCENT_HEX.sub(lambda m: m.group(0).lower(), encoded)]
    data = key.encode("utf-8", "replace")
    for text in (data, data + b":", b":" + data):
        forms.append(base64.b64encode(text).decode("ascii"))
    for skip in range(3):   # the key at each position mod 3 of a longer base64-encoded text
        whole = (len(data) - skip) // 3 * 3
        core = base64.b64encode(data[skip:skip + whole]).decode("ascii") if whole > 0 else ""
        if len(core) >= _MIN_BASE64_CORE:
            forms += [core, core.replace("+", "-").replace("/", "_")]
    return list(dict.fromkeys(forms))


def mask_url(url: str | None, *, secrets_only: bool = False) -> str | None:
    """The URL with any `user:password@` replaced by `***@` and every query value by `***` (`?api-version=***`).

    Args:
        url: The URL, or None.
        secrets_only: Mask only the values of credential-named query parameters, keep the others (what a
            cache key needs: `api-version=2024-06-01` tells two endpoints apart, a key must not).
    """
    if not url or ("@" not in url and "?" not in url):
        return url
    masked = _URL_USERINFO.sub(lambda m: m.group("scheme") + MASK + "@", url)
    if "?" not in masked:
        return masked
    head, _, query = masked.partition("?")
    query, hash_, fragment = query.partition("#")
    return f"{head}?{_mask_query(query, secrets_only=secrets_only)}{hash_}{fragment}"


def mask_urls(text: str) -> str:
    """Every URL inside `text` with its userinfo and query values masked (for error messages and logs).

    A query string after a bare path (an echoed request line, `POST /v1/chat/completions?key=...`) is masked too.
    """
    if "@" in text:
        text = _URL_USERINFO.sub(lambda m: m.group("scheme") + MASK + "@", text)
    if "?" in text:
        text = _QUERY.sub(lambda m: m.group("path") + "?" + _mask_query(m.group("query")), text)
    return text


def _mask_query(query: str, *, secrets_only: bool = False) -> str:
    """`a=1&key=s` -> `a=***&key=***` (a name without `=` is left as it is)."""
    if secrets_only:
        return _QUERY_VALUE.sub(lambda m: m.group(0) if _plain(unquote(m.group("name").lstrip("&")))
                                not in _SECRET_QUERY_NAMES else m.group("name") + "=" + MASK, query)
    return _QUERY_VALUE.sub(lambda m: m.group("name") + "=" + MASK, query)


def secret_query_names(url: str | None) -> list[str]:
    """The names of a URL's query parameters that carry a credential (`api-key`, `key`, `token`, `sig`, ...)."""
    if not url or "?" not in url:
        return []
    query = url.partition("?")[2].partition("#")[0]
    return [name for name, _ in parse_qsl(query, keep_blank_values=True) if _plain(name) in _SECRET_QUERY_NAMES]


def url_secrets(url: str | None) -> list[str]:
    """What a URL's credentials can look like in text a server sends back, for a `Redactor`.

    The userinfo (`user:pass`) and the password, each as written and percent-decoded; the base64 of
    `user:password` (the `Authorization: Basic` header sent for it, which a server may echo); the values of
    credential-named query parameters (`secret_query_names`) and of any query value of 16 characters or
    more, as written and decoded. Short values of other names (`api-version=2024-06-01`) are left out:
    they would mask ordinary text in answers (URLs shown by the engine mask every query value anyway).
    """
    if not url or ("@" not in url and "?" not in url):
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found: list[str] = []
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        found += [userinfo, unquote(userinfo)]
        user, _, password = userinfo.partition(":")
        if password:
            found += [password, unquote(password)]
        pair = f"{unquote(user)}:{unquote(password)}"
        for encoding in ("latin-1", "utf-8"):   # aiohttp's BasicAuth encodes latin-1; others UTF-8
            try:
                found.append(base64.b64encode(pair.encode(encoding)).decode("ascii"))
            except (UnicodeEncodeError, binascii.Error):
                continue
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if value and (_plain(name) in _SECRET_QUERY_NAMES or len(value) >= _LONG_QUERY_VALUE):
            found.append(value)
            raw = next((v for n, _, v in (p.partition("=") for p in parts.query.split("&"))
                        if unquote(n.replace("+", " ")) == name), None)
            if raw and raw != value:
                found.append(raw)
    return list(dict.fromkeys(found))


def _plain(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def public_params(params: Mapping[str, Any], *, keep_keys: bool = False) -> dict[str, Any]:
    """Request params fit to store or print: credential-named keys dropped at every depth.

    Args:
        params: A model's `params`, or a whole request body.
        keep_keys: Keep such keys with the value `***` (`--dry-run` shows what is sent, minus secrets).
    """
    out: dict[str, Any] = {}
    for key, value in params.items():
        if _plain(str(key)) in SECRET_PARAM_NAMES:
            if keep_keys:
                out[key] = MASK
        else:
            out[key] = _public_value(value, keep_keys)
    return out


def _public_value(value: Any, keep_keys: bool) -> Any:
    if isinstance(value, Mapping):
        return public_params(value, keep_keys=keep_keys)
    if isinstance(value, (list, tuple)):
        return [_public_value(v, keep_keys) for v in value]
    if isinstance(value, str):
        return mask_urls(value)
    return value


_KEY_PREFIXES = ("sk-", "sk_", "pk-", "pk_", "rk-", "hf_", "gsk_", "xai-", "ghp_", "glpat-", "aiza", "key-")


def looks_like_key(name: str) -> bool:
    """Whether an `api_key_env` value is more likely a pasted key than a variable name.

    Variable names are short and wordy (`OPENAI_API_KEY`, `together_key`); keys are long runs of
    mixed letters and digits, or start with a vendor's key prefix (`sk-`, `hf_`, `gsk_`, ...).
    """
    lowered = name.lower()
    if lowered.startswith(_KEY_PREFIXES) and len(name) >= 16:
        return True
    if len(name) < 24:
        return False
    digits = sum(c.isdigit() for c in name)
    has_upper = any(c.isupper() for c in name)
    has_lower = any(c.islower() for c in name)
    words = [w for w in name.split("_") if w]
    longest = max((len(w) for w in words), default=0)
    return digits >= 3 and ((has_upper and has_lower) or longest >= 20)
