"""Fixtures for the viewer's browser tests: a stack, a desktop and Chromium per module, and
viewer pages opened on them.

A test module takes the fixtures it uses by assigning them to the names its tests ask for
(``stack = viewer_pages.stack``; ``desktop = viewer_pages.painted_desktop`` for a desktop whose
root shows the test picture).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, ViewportSize
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from tests.e2e.viewer_stack import Desktop, ViewerStack, viewer_stack
from tests.support.browser import chromium
from tests.support.processes import scaled
from tests.support.xrecorder import XRecorder

VIEWER_VIEWPORT: ViewportSize = {"width": 1280, "height": 860}
CLIPBOARD_PERMISSIONS = ["clipboard-read", "clipboard-write"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ViewerStack]:
    """The module's server, relay and database (in a folder named after the module)."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    async with viewer_stack(tmp_path_factory.mktemp(name)) as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def desktop(stack: ViewerStack) -> Desktop:
    # viewer_stack stops every desktop in stack.desktops when the module ends.
    return await stack.start_desktop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def painted_desktop(stack: ViewerStack) -> Desktop:
    """A desktop whose root window shows the test picture (``paint_root``)."""
    return await stack.start_desktop(paint=True)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as browser:
        yield browser


@pytest_asyncio.fixture(loop_scope="module")
async def recorder(desktop: Desktop) -> AsyncIterator[XRecorder]:
    """An X client on the desktop's display recording the key events that reach it."""
    recorder = await asyncio.to_thread(XRecorder, desktop.display, scaled(10))
    try:
        yield recorder
    finally:
        await asyncio.to_thread(recorder.stop)


async def clipboard_context(
    browser: Browser, stack: ViewerStack, *init_scripts: str, **options: Any
) -> BrowserContext:
    """A browser context whose pages may read and write the clipboard on the stack's origin.

    ``options`` go to ``Browser.new_context`` (the viewport is ``VIEWER_VIEWPORT`` unless
    given); each of ``init_scripts`` runs in every page before the page's own scripts."""
    context = await browser.new_context(**{"viewport": VIEWER_VIEWPORT, **options})
    await context.grant_permissions(CLIPBOARD_PERMISSIONS, origin=stack.url)
    for script in init_scripts:
        await context.add_init_script(script)
    context.set_default_timeout(scaled(15) * 1000)
    return context


@pytest_asyncio.fixture(loop_scope="module")
async def context(browser: Browser, stack: ViewerStack) -> AsyncIterator[BrowserContext]:
    context = await clipboard_context(browser, stack)
    yield context
    await context.close()


async def show_viewer(
    page: Page, stack: ViewerStack, desktop: Desktop, timeout_s: float = 30
) -> None:
    """``page`` goes to the desktop's viewer and waits until the viewer says it is connected;
    if it does not, the error says what the page showed and what failed on its way.

    The wait is a hang's limit, not a speed check (bench_viewer measures that): a viewer that
    connects in 3-6 s took over 10 s once with three workers beside a busy core."""
    seen: list[str] = []
    listeners: dict[str, Callable[[Any], None]] = {
        "console": lambda message: seen.append(f"console {message.type}: {message.text}"),
        "pageerror": lambda error: seen.append(f"page error: {error}"),
        "requestfailed": lambda request: seen.append(
            f"request failed: {request.url} {request.failure}"
        ),
        "framenavigated": lambda frame: seen.append(f"navigated: {frame.url}"),
    }
    for event, listener in listeners.items():
        page.on(event, listener)  # type: ignore[call-overload]
    began = asyncio.get_running_loop().time()
    try:
        await page.goto(stack.url + stack.viewer_path(desktop))
        await page.wait_for_function(
            "() => document.body.dataset.state === 'connected'", timeout=scaled(timeout_s) * 1000
        )
    except PlaywrightTimeoutError:
        shown = await page.evaluate(VIEWER_STATE)
        waited = asyncio.get_running_loop().time() - began
        events = "\n".join(seen[-30:])
        raise AssertionError(
            f"the viewer did not say connected within {waited:.1f} s; it shows {shown}\n{events}"
        ) from None
    finally:
        for event, listener in listeners.items():
            page.remove_listener(event, listener)


# What a viewer page shows and knows of its connection (web/viewer/viewer.js).
VIEWER_STATE = """() => ({
    state: document.body.dataset.state,
    status: document.getElementById("status")?.textContent,
    info: window.relaydeskViewer ?? null,
})"""


async def open_viewer(
    context: BrowserContext, stack: ViewerStack, desktop: Desktop, timeout_s: float = 30
) -> Page:
    """A new page of ``context`` on the desktop's viewer, connected."""
    page = await context.new_page()
    await show_viewer(page, stack, desktop, timeout_s)
    return page
