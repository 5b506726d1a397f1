"""A proxy.py plugin for tests/client/test_proxy.py: the made-up host `model.test` is this machine's loopback.

Only the proxy knows this name, so a call to `model.test` that succeeds went through the proxy.
"""

from __future__ import annotations

from proxy.http.proxy import HttpProxyBasePlugin

TEST_HOST = "model.test"


class TestHostOnLoopback(HttpProxyBasePlugin):
    """Resolves `model.test` to 127.0.0.1; every other name as the system does."""

    def resolve_dns(self, host: str, port: int) -> tuple[str | None, None]:
        return ("127.0.0.1" if host == TEST_HOST else None), None
