"""The run's HTTP connections: aiohttp, one connection pool, proxies from the environment but never for loopback.

`Sessions(limit)` is opened once per run (`async with`). One `aiohttp.TCPConnector` holds the run's connections
(at most `limit` open at once, when given) and serves two sessions: one with `trust_env=True` for every host but
loopback, so `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` apply as in every Python HTTP tool, and one without for loopback
hosts (127.0.0.0/8, ::1, localhost), which never go through a proxy: the embedded models listen there, and a
corporate proxy cannot reach this machine's loopback. aiohttp decides everything else about proxies itself.
A request made with a callable `trace_request_ctx` has it called once its headers are written: when the server
can first count it (the rate-limit budget's clock for it, `engine.client.ratelimit`).
"""

from __future__ import annotations

from types import SimpleNamespace, TracebackType
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies

import aiohttp

from engine.base.hosts import is_loopback
from engine.redact import url_secrets

__all__ = ["Sessions", "proxy_secrets"]


def proxy_secrets() -> list[str]:
    """The credentials written into the environment's proxy URLs (`HTTPS_PROXY=http://user:pw@...`), to mask."""
    return [secret for scheme, url in getproxies().items() if scheme != "no" for secret in url_secrets(url)]


async def _headers_sent(session: aiohttp.ClientSession, context: SimpleNamespace, params: Any) -> None:
    if callable(context.trace_request_ctx):
        context.trace_request_ctx()


class Sessions:
    """The run's sessions over one connection pool; `for_url` picks the one a URL is called through.

    Args:
        limit: Connections open at once, at most (more requests wait for one); None: no limit (the calls in
            flight are bounded by the run's windows, `engine.client.window`).
    """

    def __init__(self, limit: int | None) -> None:
        connector = aiohttp.TCPConnector(limit=0 if limit is None else max(1, limit), limit_per_host=0,
                                         ttl_dns_cache=300)
        no_limit = aiohttp.ClientTimeout(total=None)   # each try sets its own (`engine.client.transport`)
        sent = aiohttp.TraceConfig()
        sent.on_request_headers_sent.append(_headers_sent)
        self._proxied = aiohttp.ClientSession(connector=connector, timeout=no_limit, trust_env=True,
                                              cookie_jar=aiohttp.DummyCookieJar(), trace_configs=[sent])
        self._direct = aiohttp.ClientSession(connector=connector, connector_owner=False, timeout=no_limit,
                                             cookie_jar=aiohttp.DummyCookieJar(), trace_configs=[sent])
        self._by_url: dict[str, aiohttp.ClientSession] = {}

    def for_url(self, url: str) -> aiohttp.ClientSession:
        """The session to call `url` through: direct for a loopback host, else the environment's proxy, if any."""
        found = self._by_url.get(url)
        if found is None:
            try:
                host = urlsplit(url).hostname
            except ValueError:
                host = None
            if len(self._by_url) > 1024:
                self._by_url.clear()
            found = self._by_url[url] = self._direct if is_loopback(host) else self._proxied
        return found

    async def close(self) -> None:
        """Close both sessions and the connections."""
        await self._direct.close()
        await self._proxied.close()

    async def __aenter__(self) -> Sessions:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, value: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.close()
