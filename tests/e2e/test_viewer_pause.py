"""The viewer page of a paused desktop: an overlay says so, no input leaves the page, and the
picture comes back with the resume without a reload or a new connection; a page opened while
the desktop is paused waits for the resume. Real server, relay, desktop (cgroup freezer, a
root relay) and headless Chromium. Documented in docs/desktops.md, "Pause and resume".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import BrowserContext, Page

from tests.e2e import chat_fixtures
from tests.e2e.chat_fixtures import shot, sign_in
from tests.e2e.viewer_stack import Desktop, ViewerStack
from tests.support.processes import scaled

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(os.geteuid() != 0, reason="desktop cgroups need a root relay"),
]

browser = chat_fixtures.browser
chat_stack = chat_fixtures.chat_stack
context = chat_fixtures.context


async def _viewer_state(page: Page, state: str) -> None:
    await page.wait_for_function(
        "s => window.relaydeskViewer && window.relaydeskViewer.state === s",
        arg=state,
        timeout=scaled(20) * 1000,
    )


async def _set_paused(stack: ViewerStack, desktop: Desktop, paused: bool) -> dict[str, Any]:
    name = "desktop_pause" if paused else "desktop_resume"
    answer = await stack.action(name, desktop_session_id=desktop.desktop_session_id)
    row: dict[str, Any] = answer.get("result", answer)["desktop"]
    assert row["state"] == ("paused" if paused else "running"), answer
    return row


async def _overlay(page: Page) -> str | None:
    """The overlay's title while it shows, else None."""
    visible: bool = await page.evaluate("!document.getElementById('overlay').hidden")
    return await page.text_content("#overlay-title") if visible else None


async def test_a_paused_desktop_shows_paused_and_comes_back_without_a_reload(
    chat_stack: ViewerStack, context: BrowserContext, artifacts_dir: Path
) -> None:
    desktop = await chat_stack.start_desktop(slot="pause")
    page = await context.new_page()
    await sign_in(page, chat_stack)
    await page.goto(chat_stack.url + chat_stack.viewer_path(desktop))
    await _viewer_state(page, "connected")
    await page.evaluate("window.sameDocument = true")

    await _set_paused(chat_stack, desktop, True)
    await _viewer_state(page, "paused")
    assert await _overlay(page) == "Desktop paused"
    assert await page.evaluate("window.relaydeskViewer.connects") == 1
    await shot(page, artifacts_dir, "paused")

    # A second page opened while the desktop is paused waits for the resume.
    late = await context.new_page()
    await late.goto(chat_stack.url + chat_stack.viewer_path(desktop))
    await _viewer_state(late, "paused")
    assert (await late.evaluate("window.relaydeskViewer.lastClose"))["code"] == 4423

    await _set_paused(chat_stack, desktop, False)
    await _viewer_state(page, "connected")
    assert await _overlay(page) is None
    info = await page.evaluate("window.relaydeskViewer")
    assert info["connects"] == 1, "the stream stayed open through the pause"
    assert await page.evaluate("window.sameDocument") is True, "no reload"
    await _viewer_state(late, "connected")
    assert await _overlay(late) is None
    await shot(page, artifacts_dir, "resumed")
