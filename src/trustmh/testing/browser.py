"""The system Chromium driven by Playwright, to check and time the HTML report (tests/test_report_browser.py,
bench/report_scale.py).

Playwright is a dev dependency and is imported only here. It never downloads a browser: it launches the
Debian `chromium` (or $TRUSTMH_CHROMIUM) with networking features off, so a page can reach nothing."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

SYSTEM_CHROMIUM = "/usr/bin/chromium"
ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking")


def find_chromium() -> str | None:
    """$TRUSTMH_CHROMIUM, else the Debian package's /usr/bin/chromium, else a chromium on PATH."""
    exe = os.environ.get("TRUSTMH_CHROMIUM")
    if exe:
        return exe
    if Path(SYSTEM_CHROMIUM).is_file():
        return SYSTEM_CHROMIUM
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Tab:
    """A Playwright page and what went wrong in it: console errors (Chromium reports CSP violations and
    failed loads there too) and uncaught exceptions."""

    page: Any
    errors: list[str] = field(default_factory=list)


@contextmanager
def chromium_browser(executable: str | None = None) -> Iterator[Any]:
    """`with chromium_browser() as browser:` one headless browser to open several tabs in
    (`chromium_tab(browser=browser)`), closed on exit. Playwright's synchronous API runs an event loop of
    its own in this thread: while the browser is open, `asyncio.run` (a trustmh run) cannot run here."""
    from playwright.sync_api import sync_playwright
    exe = executable or find_chromium()
    if not exe:
        raise FileNotFoundError("chromium not found (install the Debian package `chromium`)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=list(ARGS))
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def chromium_tab(executable: str | None = None, width: int = 1280, height: int = 900,
                 browser: Any = None) -> Iterator[Tab]:
    """`with chromium_tab() as tab:` one page in a fresh headless browser, closed on exit. With `browser`
    (chromium_browser's), a page in a fresh context of that browser instead: its own cookies, storage and
    cache, as a new browser's, without the second of CPU a launch costs."""
    if browser is None:
        with chromium_browser(executable) as own, chromium_tab(width=width, height=height, browser=own) as tab:
            yield tab
        return
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        tab = Tab(context.new_page())
        tab.page.on("console", lambda m: tab.errors.append(f"console: {m.text}") if m.type in ("error", "assert")
                    else None)
        tab.page.on("pageerror", lambda e: tab.errors.append(f"exception: {e}"))
        yield tab
    finally:
        context.close()
