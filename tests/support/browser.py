"""Debian's Chromium, headless, for browser tests (never a downloaded browser)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from playwright.async_api import Browser, BrowserContext, ConsoleMessage, async_playwright, expect

from tests.support.processes import scaled

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


# Playwright's assertions wait 5 s by default: a loaded machine answers a click or a message
# round trip slower than that. They return as soon as they hold, so a longer bound only
# changes how long a real failure takes to show.
expect.set_options(timeout=scaled(15) * 1000)

# How Chromium words a Content-Security-Policy violation in a page's console.
CSP_VIOLATION = "Content Security Policy"


class CspWatch:
    """Every Content-Security-Policy violation any page of a browser reports in its console."""

    def __init__(self, browser: Browser) -> None:
        self.violations: list[str] = []
        for name in ("new_context", "new_page"):
            setattr(browser, name, self._watching(getattr(browser, name)))

    def _watching(self, create: Any) -> Any:
        async def watched(*args: Any, **kwargs: Any) -> Any:
            made = await create(*args, **kwargs)
            context: BrowserContext = made if isinstance(made, BrowserContext) else made.context
            context.on("console", self._heard)
            return made

        return watched

    def _heard(self, message: ConsoleMessage) -> None:
        if CSP_VIOLATION in message.text:
            self.violations.append(f"{message.page.url if message.page else '?'}: {message.text}")


@contextlib.asynccontextmanager
async def chromium(*extra_args: str) -> AsyncIterator[Browser]:
    """A headless Chromium, closed on exit; a page that broke the server's
    Content-Security-Policy fails the test that used it."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra_args]
        )
        watch = CspWatch(browser)
        try:
            yield browser
        finally:
            await browser.close()
        assert not watch.violations, "\n".join(watch.violations)
