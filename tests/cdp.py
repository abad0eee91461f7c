"""A headless Chromium driven over the DevTools protocol with aiohttp's WebSocket client.

No chromedriver or playwright: `Chromium.start()` runs Debian's `chromium` with a
throw-away profile, reads the port it chose from `DevToolsActivePort`, and attaches to
its first page. `goto`, `evaluate` and `screenshot` are all a test needs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1100",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    def __init__(self, profile: Path) -> None:
        self.profile = profile
        self.proc: asyncio.subprocess.Process | None = None
        self.http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)

    async def start(self, timeout_s: float = 30.0) -> Chromium:
        binary = chromium_binary()
        assert binary, "chromium is not installed"
        self.proc = await asyncio.create_subprocess_exec(
            binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        port_file = self.profile / "DevToolsActivePort"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.returncode is not None or loop.time() > deadline:
                raise RuntimeError(f"chromium did not open its DevTools port (status {self.proc.returncode})")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        self.http = aiohttp.ClientSession()
        page = None
        while page is None:
            async with self.http.get(f"http://127.0.0.1:{port}/json/list") as r:
                page = next((t for t in await r.json() if t.get("type") == "page"), None)
            if page is None:
                await asyncio.sleep(0.1)
        self.ws = await self.http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        await self.send("Page.enable")
        return self

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        assert self.ws is not None
        mid = next(self._ids)
        await self.ws.send_str(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads((await self.ws.receive(timeout=60)).data)
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    async def evaluate(self, expression: str) -> Any:
        got = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression}: {got['exceptionDetails']}")
        return got["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Poll a JS expression until it is truthy (the page's own polling updates the DOM)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if loop.time() > deadline:
                raise AssertionError(f"still false after {timeout_s:g} s: {expression}")
            await asyncio.sleep(0.2)

    async def screenshot(self, path: Path) -> Path:
        got = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(got["data"]))
        return path

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.http is not None:
            await self.http.close()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 10)
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
