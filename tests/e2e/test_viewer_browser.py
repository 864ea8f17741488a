"""The viewer page in headless Chromium: noVNC through the server shows the real desktop."""

from __future__ import annotations

import asyncio
import base64
import io
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from playwright.async_api import Browser, Page

from tests.e2e import viewer_pages
from tests.e2e.viewer_pages import show_viewer
from tests.e2e.viewer_stack import Desktop, ViewerStack, capture, without_cursor
from tests.support.processes import scaled
from tests.support.stack import wait_until
from wire.errors import CloseCode

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

CANVAS_PNG = "() => document.querySelector('#screen canvas').toDataURL('image/png')"


# The shared fixtures, made visible to this module's tests.
stack = viewer_pages.stack
desktop = viewer_pages.painted_desktop
browser = viewer_pages.browser


async def open_page(browser: Browser, stack: ViewerStack, desktop: Desktop) -> Page:
    page = await browser.new_page(viewport={"width": 1280, "height": 860})
    await show_viewer(page, stack, desktop)
    return page


async def wait_for_state(page: Page, state: str, timeout_s: float = 10) -> None:
    await page.wait_for_function(
        f"() => document.body.dataset.state === {state!r}", timeout=scaled(timeout_s) * 1000
    )


async def viewer_info(page: Page) -> Any:
    return await page.evaluate("() => window.relaydeskViewer")


async def canvas_pixels(page: Page) -> np.ndarray:
    url = await page.evaluate(CANVAS_PNG)
    png = base64.b64decode(url.split(",", 1)[1])
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


async def canvas_matches(page: Page, desktop: Desktop) -> bool:
    shown = await canvas_pixels(page)
    expected = await asyncio.to_thread(capture, desktop.display)
    if shown.shape != expected.shape:
        return False
    shown, expected = (without_cursor(image, desktop.display) for image in (shown, expected))
    # noVNC may receive lossy (JPEG) rectangles: allow small per-pixel error.
    error = np.abs(shown.astype(int) - expected.astype(int)).max(axis=2)
    return bool((error <= 24).mean() > 0.995)


async def test_the_viewer_page_shows_the_desktop(
    browser: Browser, stack: ViewerStack, desktop: Desktop, artifacts_dir: Path
) -> None:
    page = await open_page(browser, stack, desktop)
    response = await page.request.get(stack.url + stack.viewer_path(desktop))
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["referrer-policy"] == "no-referrer"
    await wait_until(lambda: canvas_matches(page, desktop), 10, "the canvas to show the desktop")
    await page.screenshot(path=artifacts_dir / "viewer.png")
    assert "Connected" in await page.inner_text("#status")
    await page.close()


async def test_relay_restart_reconnects_the_page_by_itself(
    browser: Browser, stack: ViewerStack, desktop: Desktop, artifacts_dir: Path
) -> None:
    page = await open_page(browser, stack, desktop)
    stack.relay.kill()
    await wait_for_state(page, "unreachable", 5)
    info = await viewer_info(page)
    assert info["lastClose"]["code"] == CloseCode.RELAY_UNREACHABLE
    assert "relay unreachable" in info["lastClose"]["reason"]
    await page.screenshot(path=artifacts_dir / "relay-unreachable.png")

    stack.start_relay()
    await wait_for_state(page, "connected", 20)
    assert (await viewer_info(page))["connects"] == 2
    await wait_until(lambda: canvas_matches(page, desktop), 10, "the desktop after reconnecting")
    await page.screenshot(path=artifacts_dir / "reconnected.png")
    await page.close()


async def test_three_viewers_all_see_the_stopped_overlay_within_2_s(
    browser: Browser, stack: ViewerStack, desktop: Desktop, artifacts_dir: Path
) -> None:
    pages = [await open_page(browser, stack, desktop) for _ in range(3)]
    await wait_until(lambda: stack.viewers(desktop.desktop_session_id) == 3, 5, "three viewers")
    for page in pages:
        await wait_until(lambda p=page: canvas_matches(p, desktop), 10, "every canvas")

    async def overlay_shown(page: Page) -> float:
        await page.wait_for_selector("#overlay:not([hidden])", timeout=scaled(5) * 1000)
        return time.perf_counter()

    # Watch from before the stop: the stop action itself may take longer than the viewers'
    # close (it waits for the desktop's processes to be reaped), and is not what is timed.
    await stack.person_headers()  # signed in before the clock starts (argon2 takes its time)
    overlays = [asyncio.create_task(overlay_shown(page)) for page in pages]
    started = time.perf_counter()
    await stack.stop_desktop(desktop)
    stack.desktops.remove(desktop)
    shown = await asyncio.gather(*overlays)
    elapsed = max(shown) - started
    print(f"overlays after {elapsed:.2f} s")  # shown with -rA
    assert elapsed < scaled(2), f"overlays after {elapsed:.2f}s"
    for index, page in enumerate(pages):
        assert await page.inner_text("#overlay-title") == "Desktop stopped"
        await page.screenshot(path=artifacts_dir / f"stopped-{index}.png")
        await page.close()
    await wait_until(lambda: stack.viewers() == 0, 5, "every viewer to be released")
