"""The viewer's toolbar in headless Chromium, at desktop and phone sizes, on a real desktop.

Keys and clipboard are checked where they land: on the desktop's X display (the recorder
window and ``xclip``); the picture is checked on the canvas; the phone tests use touch input
(Chrome DevTools ``Input.dispatchTouchEvent``) in a mobile context.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Page, ViewportSize, expect

from tests.e2e import viewer_pages
from tests.e2e.test_viewer_bridge import key_events_until, presses, remote_clipboard, snapshot
from tests.e2e.viewer_pages import clipboard_context, show_viewer
from tests.e2e.viewer_stack import Desktop, ViewerStack, pointer_position
from tests.support.stack import wait_until
from tests.support.xrecorder import XRecorder

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

XK_CONTROL_L, XK_ALT_L, XK_DELETE, XK_TAB = 0xFFE3, 0xFFE9, 0xFFFF, 0xFF09
PHONE: ViewportSize = {"width": 390, "height": 844}
# Three points of the picture, read the moment the page says "Connected".
CANVAS_BRIGHTNESS = (
    "() => { const c = document.querySelector('#screen canvas');"
    " if (!c || !c.width) return []; const g = c.getContext('2d'); const out = [];"
    " for (const [x, y] of [[20, 60], [640, 400], [1200, 700]]) {"
    " const d = g.getImageData(x, y, 1, 1).data; out.push(d[0] + d[1] + d[2]); }"
    " return out; }"
)
CANVAS_CSS_WIDTH = "() => document.querySelector('#screen canvas').getBoundingClientRect().width"


# The shared fixtures, made visible to this module's tests.
stack = viewer_pages.stack
desktop = viewer_pages.painted_desktop
browser = viewer_pages.browser
recorder = viewer_pages.recorder


async def new_context(browser: Browser, stack: ViewerStack, *, phone: bool) -> BrowserContext:
    if phone:
        return await clipboard_context(
            browser, stack, viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True
        )
    return await clipboard_context(browser, stack, viewport={"width": 1100, "height": 760})


async def open_viewer(context: BrowserContext, stack: ViewerStack, desktop: Desktop) -> Page:
    page = await context.new_page()
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    await show_viewer(page, stack, desktop, 20)
    page.missing = missing  # type: ignore[attr-defined]
    return page


async def toolbar(page: Page) -> Any:
    return await page.evaluate("() => JSON.parse(JSON.stringify(window.relaydeskToolbar))")


async def test_connected_means_the_picture_is_there(
    browser: Browser, stack: ViewerStack, desktop: Desktop, artifacts_dir: Path
) -> None:
    """On a phone as on a desktop: no "Connected" over a black screen, and no 404 (favicon)."""
    for phone in (True, False):
        context = await new_context(browser, stack, phone=phone)
        page = await open_viewer(context, stack, desktop)
        # Read in the same task turn as the state: the picture must already be on the canvas.
        brightness = await page.evaluate(CANVAS_BRIGHTNESS)
        assert brightness and all(total > 40 for total in brightness), brightness
        assert "Connected" in (await page.inner_text("#status"))
        assert page.missing == []  # type: ignore[attr-defined]
        size = "phone" if phone else "desktop"
        await page.screenshot(path=artifacts_dir / f"connected-{size}.png")
        await context.close()


async def test_the_toolbar_offers_what_a_noVNC_viewer_offers(
    browser: Browser, stack: ViewerStack, desktop: Desktop, artifacts_dir: Path
) -> None:
    context = await new_context(browser, stack, phone=False)
    page = await open_viewer(context, stack, desktop)
    bar = page.get_by_role("toolbar", name="Viewer controls")
    back = bar.get_by_role("link", name="Back to the chat")
    assert (await back.get_attribute("href")) == f"/#/c/{stack.seed.conversation_id}"
    for name in (
        "Special keys",
        "Clipboard",
        "Pan and zoom",
        "Desktop audio",
        "Display settings",
        "Full screen",
        "Disconnect",
    ):
        await expect(bar.get_by_role("button", name=name, exact=True)).to_be_visible()
    # The on-screen keyboard is for touch screens only.
    await expect(bar.get_by_role("button", name="On-screen keyboard")).to_be_hidden()
    await page.screenshot(path=artifacts_dir / "01-toolbar.png")

    await bar.get_by_role("button", name="Display settings").click()
    panel = page.get_by_role("dialog", name="Display settings")
    await expect(panel).to_be_visible()
    await page.screenshot(path=artifacts_dir / "02-display-settings.png")
    fit_width = await page.evaluate(CANVAS_CSS_WIDTH)
    assert fit_width < 1280
    await panel.get_by_label("Scaling").select_option("actual")
    await wait_until(lambda: _css_width_is(page, 1280), 5, "the picture at 100 %")
    remote = panel.locator("option[value='remote']")
    if await remote.is_disabled():  # x11vnc on Xvfb keeps its own size: the choice is hidden
        assert await remote.evaluate("option => option.hidden")
    await panel.get_by_label("Picture quality").select_option("low")
    assert await page.evaluate("() => window.relaydeskViewer && 1") == 1
    assert (await toolbar(page))["quality"] == "low"
    await page.reload()
    await page.wait_for_function("() => document.body.dataset.state === 'connected'")
    stats = await toolbar(page)
    assert (stats["scaling"], stats["quality"]) == ("actual", "low")  # kept across reloads
    await page.get_by_role("button", name="Display settings").click()
    await page.get_by_label("Scaling").select_option("fit")
    await page.get_by_label("Picture quality").select_option("balanced")
    await wait_until(lambda: _css_width_below(page, 1280), 5, "the picture fitted again")
    await context.close()


async def _css_width_is(page: Page, width: int) -> bool:
    return bool(abs(await page.evaluate(CANVAS_CSS_WIDTH) - width) < 1)


async def _css_width_below(page: Page, width: int) -> bool:
    return bool(await page.evaluate(CANVAS_CSS_WIDTH) < width)


async def test_special_keys_and_the_clipboard_panel_reach_the_desktop(
    browser: Browser,
    stack: ViewerStack,
    desktop: Desktop,
    recorder: XRecorder,
    artifacts_dir: Path,
) -> None:
    context = await new_context(browser, stack, phone=False)
    page = await open_viewer(context, stack, desktop)
    await asyncio.to_thread(recorder.drain)
    await page.get_by_role("button", name="Special keys").click()
    await page.screenshot(path=artifacts_dir / "01-keys-menu.png")
    await page.get_by_role("menuitem", name="Ctrl+Alt+Del").click()
    events = await key_events_until(
        recorder, lambda ev: len([e for e in ev if e["type"] == "KeyRelease"]) >= 3, "the combo"
    )
    assert presses(events)[:3] == [XK_CONTROL_L, XK_ALT_L, XK_DELETE]
    await page.get_by_role("button", name="Special keys").click()
    await page.get_by_role("menuitem", name="Tab", exact=True).click()
    events = await key_events_until(recorder, lambda ev: XK_TAB in presses(ev), "Tab")

    await page.get_by_role("button", name="Clipboard").click()
    panel = page.get_by_role("dialog", name="Clipboard")
    await panel.get_by_label("Desktop clipboard").fill("sent from the clipboard panel")
    await snapshot(page, artifacts_dir / "02-clipboard-panel.png", "typed in the panel")
    await panel.get_by_role("button", name="Send to desktop").click()

    async def arrived() -> bool:
        return await remote_clipboard(desktop) == "sent from the clipboard panel"

    await wait_until(arrived, 10, "the text on the desktop's clipboard")
    await expect(panel).to_be_hidden()
    await context.close()


async def test_disconnect_leaves_the_desktop_running_and_reconnect_returns(
    browser: Browser, stack: ViewerStack, desktop: Desktop, artifacts_dir: Path
) -> None:
    context = await new_context(browser, stack, phone=False)
    page = await open_viewer(context, stack, desktop)
    await wait_until(lambda: _viewers_are(stack, desktop, 1), 5, "one viewer")
    await page.get_by_role("button", name="Disconnect").click()
    overlay = page.locator("#overlay")
    await expect(overlay).to_be_visible()
    await expect(overlay).to_contain_text("The desktop keeps running")
    await wait_until(lambda: _viewers_are(stack, desktop, 0), 5, "the viewer stream to close")
    await asyncio.sleep(1.5)  # longer than the first reconnect delay: none happens
    assert stack.viewers(desktop.desktop_session_id) == 0
    await page.screenshot(path=artifacts_dir / "01-disconnected.png")
    rows = (await stack.action("desktop_list_active"))["desktops"]
    assert any(
        r["desktop_session_id"] == desktop.desktop_session_id and r["state"] == "running"
        for r in rows
    )
    await page.get_by_role("button", name="Reconnect").click()
    await page.wait_for_function("() => document.body.dataset.state === 'connected'")
    await expect(overlay).to_be_hidden()
    await context.close()


async def _viewers_are(stack: ViewerStack, desktop: Desktop, count: int) -> bool:
    return stack.viewers(desktop.desktop_session_id) == count


async def test_phone_toolbar_is_compact_and_pinch_zooms_and_pans(
    browser: Browser,
    stack: ViewerStack,
    desktop: Desktop,
    recorder: XRecorder,
    artifacts_dir: Path,
) -> None:
    context = await new_context(browser, stack, phone=True)
    page = await open_viewer(context, stack, desktop)
    # Two rows of 40 px targets at most: where and who (Chat, status, control), then the tools.
    bar = await page.locator("#bar").bounding_box()
    assert bar is not None and bar["height"] <= 92, bar
    for button in await page.locator("#bar > .tool:visible, #bar .group > .tool:visible").all():
        box = await button.bounding_box()
        assert box is not None and box["x"] + box["width"] <= PHONE["width"] + 0.5, box
    screen = await page.locator("#screen").bounding_box()
    assert screen is not None and screen["height"] >= PHONE["height"] - 92
    await page.screenshot(path=artifacts_dir / "01-phone.png")

    # The on-screen keyboard: typed text reaches the desktop as key presses.
    await asyncio.to_thread(recorder.drain)
    await page.get_by_role("button", name="On-screen keyboard").click()
    assert await page.evaluate("() => document.activeElement.id") == "keyboard-input"
    await page.keyboard.insert_text("hi")
    events = await key_events_until(
        recorder, lambda ev: [ord("h"), ord("i")] == presses(ev)[-2:], "h and i on the desktop"
    )
    assert presses(events)[-2:] == [ord("h"), ord("i")]

    before_pointer = await asyncio.to_thread(pointer_position, desktop.display)
    await page.get_by_role("button", name="Pan and zoom").click()
    fitted = await page.evaluate(CANVAS_CSS_WIDTH)
    cdp = await context.new_cdp_session(page)
    await pinch(cdp, (195, 420), start=40, end=200)
    zoomed = await page.evaluate(CANVAS_CSS_WIDTH)
    assert zoomed > fitted * 2.5, (fitted, zoomed)
    view = "document.querySelector('#screen > div')"
    scroll_before = await page.evaluate(f"() => {view}.scrollLeft")
    await drag(cdp, (300, 420), (100, 420))
    scroll_after = await page.evaluate(f"() => {view}.scrollLeft")
    assert scroll_after > scroll_before + 100, (scroll_before, scroll_after)
    await page.screenshot(path=artifacts_dir / "02-phone-zoomed.png")
    # While panning and zooming the desktop got no pointer input.
    assert await asyncio.to_thread(pointer_position, desktop.display) == before_pointer
    await context.close()


async def touch(cdp: Any, kind: str, points: list[dict[str, float]]) -> None:
    await cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": points})


async def pinch(cdp: Any, centre: tuple[int, int], start: int, end: int, steps: int = 8) -> None:
    x, y = centre

    def points(gap: float) -> list[dict[str, float]]:
        return [{"x": x - gap / 2, "y": y, "id": 0}, {"x": x + gap / 2, "y": y, "id": 1}]

    await touch(cdp, "touchStart", points(start))
    for step in range(1, steps + 1):
        await touch(cdp, "touchMove", points(start + (end - start) * step / steps))
    await touch(cdp, "touchEnd", [])


async def drag(cdp: Any, source: tuple[int, int], target: tuple[int, int], steps: int = 8) -> None:
    (x0, y0), (x1, y1) = source, target
    await touch(cdp, "touchStart", [{"x": x0, "y": y0, "id": 0}])
    for step in range(1, steps + 1):
        share = step / steps
        await touch(
            cdp, "touchMove", [{"x": x0 + (x1 - x0) * share, "y": y0 + (y1 - y0) * share, "id": 0}]
        )
    await touch(cdp, "touchEnd", [])
