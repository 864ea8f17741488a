"""The viewer page renews its capability through ``desktop_attach``.

Documented in docs/viewing.md, "Renewing the capability".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, BrowserContext, Page

from tests.e2e import chat_fixtures
from tests.e2e.chat_fixtures import VIEWPORT, shot, sign_in
from tests.e2e.viewer_stack import Desktop, ViewerStack
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

browser = chat_fixtures.browser
chat_stack = chat_fixtures.chat_stack
context = chat_fixtures.context


async def _desktop(stack: ViewerStack) -> Desktop:
    for desktop in stack.desktops:
        if desktop.slot == "refresh":
            return desktop
    return await stack.start_desktop(slot="refresh")


async def _viewer_state(page: Page, state: str) -> None:
    await page.wait_for_function(
        "s => window.relaydeskViewer && window.relaydeskViewer.state === s",
        arg=state,
        timeout=scaled(20) * 1000,
    )


async def test_an_expired_link_is_renewed_for_a_signed_in_member(
    chat_stack: ViewerStack, context: BrowserContext, artifacts_dir: Path
) -> None:
    desktop = await _desktop(chat_stack)
    page = await context.new_page()
    await sign_in(page, chat_stack)
    expired = chat_stack.token(desktop.desktop_session_id, ttl_s=-10)
    await page.goto(chat_stack.url + chat_stack.viewer_path(desktop, expired))
    await _viewer_state(page, "connected")
    await shot(page, artifacts_dir, "renewed")
    info = await page.evaluate("window.relaydeskViewer")
    assert info["refreshes"] == 1
    assert info["lastClose"]["code"] == 4401
    path = await page.evaluate("window.location.pathname")
    assert path.startswith(f"/vnc/{desktop.desktop_session_id}/")
    assert expired not in path, "the page now carries the renewed capability"


async def test_without_a_session_an_expired_link_shows_access_expired(
    chat_stack: ViewerStack, browser: Browser, artifacts_dir: Path
) -> None:
    desktop = await _desktop(chat_stack)
    stranger = await browser.new_context(viewport=VIEWPORT)
    try:
        page = await stranger.new_page()
        expired = chat_stack.token(desktop.desktop_session_id, ttl_s=-10)
        await page.goto(chat_stack.url + chat_stack.viewer_path(desktop, expired))
        await _viewer_state(page, "expired")
        await shot(page, artifacts_dir, "expired")
        assert await page.locator("#overlay").is_visible()
        assert "expired" in (await page.locator("#overlay-title").inner_text()).lower()
    finally:
        await stranger.close()


async def test_a_capability_close_to_expiry_is_renewed_while_connected(
    chat_stack: ViewerStack, context: BrowserContext
) -> None:
    desktop = await _desktop(chat_stack)
    page = await context.new_page()
    await sign_in(page, chat_stack)
    # 125 s of validity: renewal falls due 120 s before expiry, i.e. right away (5 s floor)
    soon = chat_stack.token(desktop.desktop_session_id, ttl_s=125)
    await page.goto(chat_stack.url + chat_stack.viewer_path(desktop, soon))
    await _viewer_state(page, "connected")
    await page.wait_for_function(
        "() => window.relaydeskViewer.refreshes >= 1", timeout=scaled(30) * 1000
    )
    info = await page.evaluate("window.relaydeskViewer")
    assert info["state"] == "connected", "renewal never interrupts the stream"
    assert info["connects"] == 1
