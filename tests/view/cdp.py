"""Headless Chromium driven over the DevTools protocol (a websocket, aiohttp's client): navigate, run a line of
script, press keys, catch dialogs, take screenshots."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = Path("/usr/bin/chromium")
# Every wait has a limit: this many polls of the page, 100 ms apart.
POLLS = 600


class Browser:
    """One Chromium process and its first page."""

    def __init__(self, profile: Path) -> None:
        self.profile = profile
        self.process: subprocess.Popen[str] | None = None
        self.session: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.dialogs: list[dict[str, Any]] = []
        self.console: list[str] = []
        self.reader: asyncio.Task[None] | None = None

    async def start(self) -> Browser:
        self.process = subprocess.Popen(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--remote-debugging-port=0",
             "--remote-debugging-address=127.0.0.1", "--window-size=1400,1000", "--hide-scrollbars",
             f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.process.stderr is not None
        port = None
        for _ in range(200):
            line = await asyncio.to_thread(self.process.stderr.readline)
            found = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if found:
                port = int(found.group(1))
                break
            if not line:
                break
        assert port, "Chromium printed no DevTools address"
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json()
        page = next(t for t in targets if t["type"] == "page")
        self.ws = await self.session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        self.reader = asyncio.create_task(self._read())
        for method in ("Page.enable", "Runtime.enable"):
            await self.call(method)
        return self

    async def _read(self) -> None:
        assert self.ws is not None
        async for message in self.ws:
            data = json.loads(message.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif data.get("method") == "Page.javascriptDialogOpening":
                self.dialogs.append(data["params"])
                await self.ws.send_str(json.dumps({"id": next(self.ids), "method": "Page.handleJavaScriptDialog",
                                                   "params": {"accept": True}}))
            elif data.get("method") == "Runtime.exceptionThrown":
                self.console.append(json.dumps(data["params"])[:500])

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        assert self.ws is not None
        ident = next(self.ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[ident] = future
        await self.ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        reply = await asyncio.wait_for(future, 60)
        assert "error" not in reply, (method, reply["error"])
        return reply.get("result", {})

    async def js(self, expression: str) -> Any:
        """The value of a script expression in the page (awaited when it is a promise)."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    async def wait(self, expression: str) -> None:
        """Poll until the expression is true (at most POLLS times)."""
        for _ in range(POLLS):
            if await self.js(expression):
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"never true: {expression}; page errors: {self.console}")

    async def ready(self, page: str) -> None:
        await self.wait(f"document.body && document.body.dataset.ready === 'yes' "
                        f"&& document.body.dataset.page === '{page}'")

    async def goto(self, url: str, page: str) -> None:
        await self.js("document.body && (document.body.dataset.ready = 'no')")
        await self.call("Page.navigate", url=url)
        await self.ready(page)

    async def key(self, key: str) -> None:
        for kind in ("keyDown", "keyUp"):
            await self.call("Input.dispatchKeyEvent", type=kind, key=key, text=key if kind == "keyDown" else "",
                            code=f"Key{key.upper()}", windowsVirtualKeyCode=ord(key.upper()))

    async def screenshot(self, path: Path) -> None:
        height = await self.js("Math.min(3000, document.documentElement.scrollHeight)")
        await self.call("Emulation.setDeviceMetricsOverride", width=1400, height=int(height), deviceScaleFactor=1,
                        mobile=False)
        shot = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        await self.call("Emulation.clearDeviceMetricsOverride")

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)
