"""Secrets out of everything the engine stores or prints: the one home of redaction.

Three kinds of secret reach the engine, and each has one rule here:

- API keys (the value of a model's `api_key_env` variable): `Redactor` masks them as `***` in every
  text a server or a model sends back (answers, reasoning, tool arguments, error messages), always
  *before* the text is cut, so a cut never leaves part of a key behind. A text the server itself cut
  (an answer stopped at max_tokens, a stream that broke off, an error body read only so far) may end
  in the first characters of a key: a trailing piece of at least `MIN_FRAGMENT` characters is masked too.
- Credentials written into a URL (`http://user:pass@host/v1`): `mask_url` / `mask_urls` replace the
  userinfo with `***` wherever a URL is shown (manifest, `--dry-run`, error text).
- Request params: only `public_params` goes to the manifest - keys named exactly like a credential
  are dropped at any depth, and nothing else (`max_tokens` stays).

`looks_like_key` tells a pasted key from the name of an environment variable, so the error that
refuses it never repeats it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["MASK", "MIN_FRAGMENT", "SECRET_PARAM_NAMES", "Redactor", "looks_like_key", "mask_url", "mask_urls",
           "public_params", "url_secrets"]

MASK = "***"
MIN_FRAGMENT = 8          # a cut-off key prefix this long is still treated as the key
_MIN_SECRET = 4           # shorter "secrets" would mask ordinary words in answers

# Request fields that carry credentials, compared exactly after lower-casing and dropping - and _
# ("api-key", "apiKey" and "api_key" are one name). Exact names, not substrings: `max_tokens` is no secret.
SECRET_PARAM_NAMES = frozenset({
    "apikey", "key", "secret", "secretkey", "clientsecret", "password", "passwd", "token", "accesstoken",
    "authtoken", "bearertoken", "refreshtoken", "idtoken", "sessiontoken", "authorization", "auth",
    "credentials", "credential", "privatekey", "xapikey", "openaiapikey", "cookie"})

_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s?#]+)@")


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


def mask_url(url: str | None) -> str | None:
    """The URL with any `user:password@` replaced by `***@`."""
    if not url or "@" not in url:
        return url
    return _URL_USERINFO.sub(lambda m: m.group("scheme") + MASK + "@", url)


def mask_urls(text: str) -> str:
    """Every URL inside `text` with its userinfo masked (for error messages and logs)."""
    if "@" not in text:
        return text
    return _URL_USERINFO.sub(lambda m: m.group("scheme") + MASK + "@", text)


def url_secrets(url: str | None) -> list[str]:
    """The credentials written into a URL (`user:pass` and `pass`), for a `Redactor`."""
    if not url or "@" not in url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = []
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        found.append(userinfo)
    if parts.password:
        found.append(parts.password)
    return found


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
