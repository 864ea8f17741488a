"""The viewer's bar and panels fit and read at phone, tablet and laptop sizes.

Headless Chromium on a real server, relay and desktop, at 390x844 (a phone, touch), 768x1024
(a tablet, touch) and 1280x800. At each size the status label must show its whole text, also
once an agent is in control (an agent's input through the API puts its name in the bar); and
each panel of the bar (Keys, Clipboard, Display, and the control panel) must open inside the
viewport with every control in it visible and on top at its centre (what a click there
reaches). A screenshot per size and panel is kept in test-artifacts/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Page, ViewportSize

from tests.e2e import viewer_pages
from tests.e2e.viewer_pages import open_viewer
from tests.e2e.viewer_stack import Desktop, ViewerStack
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

SIZES: dict[str, tuple[ViewportSize, bool]] = {
    "390x844": ({"width": 390, "height": 844}, True),
    "768x1024": ({"width": 768, "height": 1024}, True),
    "1280x800": ({"width": 1280, "height": 800}, False),
}
# toolbar button (its accessible name) → the panel it opens
PANELS = {
    "Special keys": "#keys-menu",
    "Clipboard": "#clipboard-panel",
    "Display settings": "#settings-panel",
    "control": "#control-panel",
}
# A text shown whole, in a font one can read: not cut (scrollWidth), not shrunk to nothing.
LABEL = """(selector) => {
  const el = document.querySelector(selector);
  const box = el.getBoundingClientRect();
  const style = getComputedStyle(el);
  return { text: el.textContent, scroll: el.scrollWidth, client: el.clientWidth,
    font: parseFloat(style.fontSize), visible: style.visibility !== "hidden" && box.width > 0,
    left: box.left, right: box.right, top: box.top, bottom: box.bottom };
}"""
# Every control of an open panel: its box, and whether a click at its centre reaches it.
CONTROLS = """(selector) => {
  const panel = document.querySelector(selector);
  const box = (el) => { const r = el.getBoundingClientRect();
    return { left: r.left, right: r.right, top: r.top, bottom: r.bottom,
             width: r.width, height: r.height }; };
  const controls = [...panel.querySelectorAll("button, select, textarea, input, a")]
    .filter((el) => el.getClientRects().length > 0)
    .map((el) => { const r = box(el);
      const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
      return { name: (el.textContent || el.id || el.tagName).trim().slice(0, 40), ...r,
               onTop: Boolean(hit && (hit === el || el.contains(hit) || hit.contains(el) &&
                 hit.tagName === "LABEL")) }; });
  return { panel: box(panel), controls };
}"""


# The shared fixtures, made visible to this module's tests.
stack = viewer_pages.stack
desktop = viewer_pages.painted_desktop
browser = viewer_pages.browser


async def open_at(
    browser: Browser, stack: ViewerStack, desktop: Desktop, size: str
) -> tuple[BrowserContext, Page]:
    viewport, touch = SIZES[size]
    context = await browser.new_context(
        viewport=viewport, is_mobile=touch, has_touch=touch, device_scale_factor=2 if touch else 1
    )
    context.set_default_timeout(scaled(15) * 1000)
    return context, await open_viewer(context, stack, desktop, 20)


def inside(box: dict[str, Any], viewport: ViewportSize) -> bool:
    return bool(
        box["left"] >= 0
        and box["top"] >= 0
        and box["right"] <= viewport["width"]
        and box["bottom"] <= viewport["height"]
    )


async def check_label(page: Page, selector: str, viewport: ViewportSize, words: str) -> None:
    label = await page.evaluate(LABEL, selector)
    assert words in label["text"], label
    assert label["visible"] and label["font"] >= 11, label
    assert label["scroll"] <= label["client"], f"{selector} is cut: {label}"
    assert inside(label, viewport), label


async def agent_in_control(stack: ViewerStack, desktop: Desktop) -> None:
    """An agent's input (its API token) on the desktop: the bar names the agent."""
    await stack.action(
        "desktop_clipboard_set", relay=stack.relay_id, slot=desktop.slot, text="agent was here"
    )


@pytest.mark.parametrize("size", list(SIZES))
async def test_every_panel_and_label_fits_and_reads(
    browser: Browser, stack: ViewerStack, desktop: Desktop, artifacts_dir: Path, size: str
) -> None:
    viewport = SIZES[size][0]
    context, page = await open_at(browser, stack, desktop, size)
    await check_label(page, "#status", viewport, "Connected")
    await page.screenshot(path=artifacts_dir / f"{size}-bar.png")
    await agent_in_control(stack, desktop)
    await page.wait_for_function(
        "() => document.getElementById('control').dataset.state === 'agent'",
        timeout=scaled(10) * 1000,
    )
    await check_label(page, "#status", viewport, "Connected")
    await check_label(page, "#control-text", viewport, "is in control")
    await page.screenshot(path=artifacts_dir / f"{size}-bar-agent.png")

    for button, panel in PANELS.items():
        opener = (
            page.locator("#control")
            if button == "control"
            else (
                page.get_by_role("toolbar", name="Viewer controls").get_by_role(
                    "button", name=button, exact=True
                )
            )
        )
        await opener.click()
        await page.locator(panel).wait_for(state="visible")
        name = panel.lstrip("#")
        await page.screenshot(path=artifacts_dir / f"{size}-{name}.png")
        found = await page.evaluate(CONTROLS, panel)
        assert inside(found["panel"], viewport), f"{name} at {size}: {found['panel']}"
        # the control panel's buttons are in the bar where it is wide enough
        assert found["controls"] or panel == "#control-panel", name
        assert (await page.locator(panel).inner_text()).strip(), name
        for control in found["controls"]:
            assert inside(control, viewport), f"{control['name']!r} of {name} at {size}: {control}"
            assert control["onTop"], f"{control['name']!r} of {name} is covered at {size}"
        await page.keyboard.press("Escape")
        await page.locator(panel).wait_for(state="hidden")
    # the way out of the clipboard panel is there too: its Send button is clickable
    await (
        page.get_by_role("toolbar", name="Viewer controls")
        .get_by_role("button", name="Clipboard", exact=True)
        .click()
    )
    await page.get_by_role("button", name="Send to desktop").click(trial=True)
    await context.close()
