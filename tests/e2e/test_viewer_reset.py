"""The viewer page of a desktop that is reset in place follows it: the old desktop's stream
closes, the page finds the slot's new desktop through ``desktop_attach`` (``desktop_changed``)
and shows it in the same tab. Real server, relay, desktop and headless Chromium. Documented in
docs/desktops.md, "Reset".
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import BrowserContext, Page, Response

from tests.e2e import chat_fixtures
from tests.e2e.chat_fixtures import shot, sign_in
from tests.e2e.viewer_stack import ViewerStack
from tests.support.processes import scaled
from tests.support.stack import wait_until
from wire.snapshots import DESKTOP_RESET, DesktopResetArgs

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


async def test_a_viewer_waits_for_a_successor_recorded_late(
    chat_stack: ViewerStack, context: BrowserContext
) -> None:
    """The relay's word that the old desktop ended reaches the server before the reset's
    answer records the new one (a cold start under load takes seconds): the page keeps asking
    through that gap, instead of showing "Desktop stopped" for good."""
    desktop = await chat_stack.start_desktop(slot="late")
    page = await context.new_page()
    await sign_in(page, chat_stack)
    await page.goto(chat_stack.url + chat_stack.viewer_path(desktop))
    await _connected_to(page, desktop.desktop_session_id)

    # The page's questions the server refused (409) once the old desktop's end is recorded.
    refused: list[str] = []

    def answered(response: Response) -> None:
        if response.url.endswith("/desktop_attach") and response.status == 409:
            refused.append(response.url)

    page.on("response", answered)
    # The relay resets; the server hears only the old desktop's end ("reset"), as in the gap.
    request = DesktopResetArgs(
        desktop_session_id=desktop.desktop_session_id, kind="virtual", slot="late"
    )
    result = await chat_stack.relays.request(
        chat_stack.relay_id, DESKTOP_RESET.name, dict(request), scaled(60)
    )
    inventory = chat_stack.app.state.parts.inventory
    await wait_until(
        lambda: _ended(inventory, chat_stack.relay_id, desktop.desktop_session_id),
        10,
        "the old desktop's end, recorded",
    )
    await wait_until(lambda: len(refused) >= GAP_QUESTIONS, 10, "the page's questions in the gap")
    state = await page.evaluate("window.relaydeskViewer.state")
    assert state == "reconnecting", f"the page gave up in the gap: {state}"

    row = await inventory.record_started(chat_stack.relay_id, result)  # the reset's answer
    chat_stack.desktops.append(replace(desktop, desktop_session_id=row.desktop_session_id))
    await _connected_to(page, row.desktop_session_id)


# Questions the page asks in the gap before the new desktop is recorded (one every 0.5 s).
GAP_QUESTIONS = 3


async def _ended(inventory: Any, relay_id: str, session_id: str) -> bool:
    row = await inventory.row(relay_id, session_id)
    return row is not None and row.state == "stopped" and row.reason == "reset"
