"""The viewer page of a desktop that is reset in place follows it: the old desktop's stream
closes, the page finds the slot's new desktop through ``desktop_attach`` (``desktop_changed``)
and shows it in the same tab. Real server, relay, desktop and headless Chromium. Documented in
docs/desktops.md, "Reset".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, Page

from tests.e2e import chat_fixtures
from tests.e2e.chat_fixtures import shot, sign_in
from tests.e2e.viewer_stack import ViewerStack
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

browser = chat_fixtures.browser
chat_stack = chat_fixtures.chat_stack
context = chat_fixtures.context


async def _connected_to(page: Page, session_id: str) -> None:
    await page.wait_for_function(
        "sid => window.relaydeskViewer && window.relaydeskViewer.state === 'connected'"
        " && window.location.pathname.startsWith(`/vnc/${sid}/`)",
        arg=session_id,
        timeout=scaled(40) * 1000,
    )


async def test_a_viewer_follows_its_desktop_through_a_reset(
    chat_stack: ViewerStack, context: BrowserContext, artifacts_dir: Path
) -> None:
    desktop = await chat_stack.start_desktop(slot="reset")
    page = await context.new_page()
    await sign_in(page, chat_stack)
    await page.goto(chat_stack.url + chat_stack.viewer_path(desktop))
    await _connected_to(page, desktop.desktop_session_id)

    answer = await chat_stack.action("desktop_reset", desktop_session_id=desktop.desktop_session_id)
    reset = answer.get("result", answer)
    new = reset["desktop"]["desktop_session_id"]
    assert new != desktop.desktop_session_id
    assert reset["desktop"]["slot"] == "reset"

    await _connected_to(page, new)
    visible = await page.evaluate("!document.getElementById('overlay').hidden")
    assert not visible, "the page shows the new desktop, no overlay"
    await shot(page, artifacts_dir, "after-reset")
