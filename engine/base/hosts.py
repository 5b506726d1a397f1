"""Whether a host is this machine's loopback: the one rule the client (no proxy), the viewer (no token) and the
models file (a local server's default concurrency) share."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["is_loopback", "is_loopback_url"]


def is_loopback(host: str | None) -> bool:
    """Whether `host` (a name or an address, IPv6 with or without brackets) is localhost, 127.0.0.0/8 or ::1."""
    if not host:
        return False
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_loopback_url(url: str | None) -> bool:
    """Whether a URL's host is this machine's loopback (False for no URL or one that does not parse)."""
    if not url:
        return False
    try:
        return is_loopback(urlsplit(url).hostname)
    except ValueError:
        return False
