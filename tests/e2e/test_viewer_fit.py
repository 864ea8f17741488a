""" "Fit desktop to window" in headless Chromium: a person signed in to the web app chooses it
in the Display panel, confirms, and the viewer comes back on a desktop whose X screen has the
window's size, rounded down to the supported step (``desktop_fit``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, expect
from Xlib import display as xdisplay

from server.actions.desktop_fit import FIT_STEP, fit_geometry
from tests.e2e import viewer_pages
from tests.e2e.viewer_stack import Desktop, ViewerStack
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

stack = viewer_pages.stack
browser = viewer_pages.browser


@pytest_asyncio.fixture(loop_scope="module")
async def desktop(stack: ViewerStack) -> AsyncIterator[Desktop]:
    desktop = await stack.start_desktop()  # 1280x800
    yield desktop


def x_screen_size(display_name: str) -> tuple[int, int]:
    """The X screen's size, asked of the X server (not of relaydesk)."""
    conn = xdisplay.Display(display_name)
    try:
        screen = conn.screen()
        return int(screen.width_in_pixels), int(screen.height_in_pixels)
    finally:
        conn.close()


async def person_viewer(browser: Browser, stack: ViewerStack, desktop: Desktop) -> Page:
    context = await browser.new_context(viewport={"width": 1100, "height": 700})
    context.set_default_timeout(scaled(20) * 1000)
    cookie = (await stack.person_headers())["Cookie"].split("=", 1)[1]
    await context.add_cookies([{"name": "relaydesk_session", "value": cookie, "url": stack.url}])
    page = await context.new_page()
    await viewer_pages.show_viewer(page, stack, desktop, 20)
    return page


async def test_fit_desktop_to_window_restarts_it_at_the_windows_size(browser, stack, desktop):
    page = await person_viewer(browser, stack, desktop)
    area = await page.evaluate(
        "() => { const s = document.getElementById('screen');"
        " return [Math.floor(s.clientWidth), Math.floor(s.clientHeight)]; }"
    )
    expected = fit_geometry(*area)
    await page.get_by_role("button", name="Display settings").click()
    fit = page.get_by_role("button", name="Fit desktop to window")
    await fit.click()
    await expect(page.locator("#fit-note")).to_contain_text("Programs running in it end")
    async with page.expect_navigation():
        await page.get_by_role("button", name="Restart at this size").click()
    await page.wait_for_function(
        "() => document.body.dataset.state === 'connected'", timeout=scaled(20) * 1000
    )
    sid = page.url.split("/vnc/", 1)[1].split("/", 1)[0]
    assert sid != desktop.desktop_session_id  # a new session in the same slot
    listed = await stack.action("desktop_list_active")
    (row,) = [r for r in listed["desktops"] if r["slot"] == desktop.slot]
    assert row["desktop_session_id"] == sid and row["geometry"] == expected, (row, area)
    width, height = x_screen_size(row["display"])
    assert f"{width}x{height}" == expected
    assert area[0] - FIT_STEP < width <= area[0] and area[1] - FIT_STEP < height <= area[1]
    picture = await page.evaluate(
        "() => { const c = document.querySelector('#screen canvas'); return [c.width, c.height]; }"
    )
    assert picture == [width, height]  # the viewer shows the new screen whole
    await stack.action(
        "desktop_stop_confirm",
        person=True,
        relay=stack.relay_id,
        kind="virtual",
        slot=desktop.slot,
        desktop_session_id=sid,
    )
    stack.desktops.remove(desktop)


@pytest.mark.parametrize(
    ("width", "height", "geometry"),
    [
        (1100, 651, "1096x648"),
        (390, 700, "640x696"),  # a phone: the narrowest accepted width
        (8000, 100, "1920x480"),  # at least 480 px tall, at most 4:1
        (5000, 800, "3200x800"),  # at most 4:1
    ],
)
async def test_the_fitted_geometry_is_one_the_relay_accepts(width, height, geometry):
    assert fit_geometry(width, height) == geometry
