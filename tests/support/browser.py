"""Debian's Chromium, headless, for browser tests (never a downloaded browser)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from playwright.async_api import Browser, async_playwright

CHROMIUM = "/usr/bin/chromium"
# Background networking and component updates would reach for hosts this machine cannot
# reach; the sandbox needs a user namespace that tests running as root do not get.
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
)


@contextlib.asynccontextmanager
async def chromium(*extra_args: str) -> AsyncIterator[Browser]:
    """A headless Chromium, closed on exit."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra_args]
        )
        try:
            yield browser
        finally:
            await browser.close()
