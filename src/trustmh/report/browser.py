"""Drive a local headless Chromium over the DevTools protocol, to check and time the HTML report
(tests and bench/report_scale.py). Uses the system `chromium` and aiohttp's websocket client: nothing
is downloaded, and the browser is started with networking features off."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio",
         "--remote-debugging-port=0", "--remote-allow-origins=*")


def find_chromium() -> str | None:
    exe = os.environ.get("TRUSTMH_CHROMIUM")
    if exe:
        return exe
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Page:
    """One tab. Collects console errors, uncaught exceptions and error log entries (CSP, failed loads)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self.ws = ws
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future] = {}
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data:
                fut = self.waiting.pop(data["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(data)
                continue
            self.events.append(data)
            method, params = data.get("method"), data.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                self.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                          for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                d = params.get("exceptionDetails", {})
                self.errors.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                self.errors.append("log: " + params["entry"].get("text", ""))

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        i = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.waiting[i] = fut
        await self.ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
        reply = await asyncio.wait_for(fut, 60)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def goto(self, url: str, timeout: float = 60) -> None:
        start = len(self.events)
        await self.send("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events[start:]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load in {timeout}s")
            await asyncio.sleep(0.01)

    async def eval(self, expression: str) -> Any:
        res = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"evaluating {expression!r}: {res['exceptionDetails'].get('text')}")
        return res.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = await self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout}s for {expression}")
            await asyncio.sleep(0.02)

    async def click(self, selector: str) -> None:
        found = await self.eval(f"(() => {{ const n = document.querySelector({json.dumps(selector)});"
                                f" if (!n) return false; n.click(); return true; }})()")
        if not found:
            raise LookupError(f"nothing matches {selector}")

    async def screenshot(self, path: Path, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            metrics = await self.send("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 12000),
                                "scale": 1})
        shot = await self.send("Page.captureScreenshot", **params)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


class Chromium:
    """`async with Chromium() as page:` a fresh browser profile in a temporary directory, killed on exit."""

    def __init__(self, executable: str | None = None, width: int = 1280, height: int = 900):
        self.executable = executable or find_chromium()
        if not self.executable:
            raise FileNotFoundError("chromium not found (install the Debian package `chromium`)")
        self.width, self.height = width, height

    async def __aenter__(self) -> Page:
        self.tmp = tempfile.TemporaryDirectory(prefix="trustmh-chromium-")
        profile = Path(self.tmp.name)
        self.proc = subprocess.Popen([self.executable, *FLAGS, f"--user-data-dir={profile}",
                                      f"--window-size={self.width},{self.height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)  # its own group: helpers end with it
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.is_file() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._stop()
                raise RuntimeError(f"chromium did not start (exit code {self.proc.poll()})")
            await asyncio.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
            targets = await r.json(content_type=None)
        url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
        self.ws = await self.session.ws_connect(url, max_msg_size=0)
        page = Page(self.ws)
        for domain in ("Page", "Runtime", "Log"):
            await page.send(f"{domain}.enable")
        await page.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                        deviceScaleFactor=1, mobile=False)
        self.page = page
        return page

    async def __aexit__(self, *exc) -> None:
        self.page.reader.cancel()
        await self.ws.close()
        await self.session.close()
        self._stop()

    def _stop(self) -> None:
        # The group this browser was started in: its renderer and GPU helper processes, nothing else.
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self.tmp.cleanup()
