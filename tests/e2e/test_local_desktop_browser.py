"""The relay host's real screen in headless Chromium: ``/desktop local`` → the viewer shows it.

A private Xvfb stands in for the user's real screen. A real ``relaydesk host-helper`` process
shares it, a real relay subprocess reaches the helper only at ``RELAYDESK_HOST_HELPER`` with
its token, and the server runs in-process. The viewer's canvas is compared with the host
display's own pixels (read with mss), so the whole chain — x11vnc on the host display,
websockify, the helper's connect stream, the relay channel, the server's viewer socket, noVNC —
is what is checked.
"""

from __future__ import annotations

import asyncio
import base64
import io
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio
from PIL import Image
from playwright.async_api import Browser, BrowserContext, Page, expect
from Xlib import display as xdisplay

from tests.e2e import chat_fixtures
from tests.e2e.chat_fixtures import VIEWPORT, last_result, send, shot, sign_in
from tests.e2e.viewer_stack import ViewerStack, capture, paint_root, without_cursor
from tests.host_helper.conftest import TOKEN, x11vnc_on
from tests.support.processes import ManagedProcess, ProcessTracker, free_port, scaled
from tests.support.stack import (
    inprocess_server,
    relaydesk_argv,
    seed_database,
    start_relay,
    wait_until,
)
from tests.support.xvfb import XvfbServer, start_xvfb

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

browser = chat_fixtures.browser

HOST_SIZE = (1024, 768)
LED_NUM_LOCK = 0x2
CANVAS_PNG = "() => document.querySelector('#screen canvas').toDataURL('image/png')"
# Headless Chromium has no OS keyboard (its NumLock is always off): the page's view of the
# browser's NumLock is set by the test, before any page script runs (as in
# test_viewer_bridge.py); the key events themselves stay real.
NUM_LOCK_SCRIPT = """
(() => {
  const original = KeyboardEvent.prototype.getModifierState;
  window.testNumLock = null;
  KeyboardEvent.prototype.getModifierState = function (key) {
    if (key === "NumLock" && typeof window.testNumLock === "boolean") return window.testNumLock;
    return original.call(this, key);
  };
})();
"""


@dataclass
class LocalStack:
    """Server + relay (``stack``), the stand-in host screen and the helper sharing it."""

    stack: ViewerStack
    host: XvfbServer
    helper: ManagedProcess

    async def action(self, name: str, **args: Any) -> tuple[int, Any]:
        body = {"conversation_id": self.stack.seed.conversation_id, **args}
        headers = {"Authorization": f"Bearer {self.stack.seed.api_token}"}
        async with httpx.AsyncClient(base_url=self.stack.url, timeout=scaled(30)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
        return response.status_code, response.json()


def stop_x11vnc_on(display: str) -> list[int]:
    """Teardown safety net: SIGTERM (never SIGKILL: MIT-SHM) x11vnc left on our display."""
    left = x11vnc_on(display)
    for proc in left:
        proc.send_signal(signal.SIGTERM)
    for proc in left:
        proc.wait(scaled(5))
    return [proc.pid for proc in left]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def local(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalStack]:
    workdir = tmp_path_factory.mktemp("local-e2e")
    host = await asyncio.to_thread(start_xvfb, *HOST_SIZE)
    tracker = ProcessTracker(workdir / "processes")
    try:
        await asyncio.to_thread(paint_root, host.display, *HOST_SIZE)
        seed = await seed_database(workdir / "data")
        port = free_port()
        helper = tracker.start(
            relaydesk_argv("host-helper", "--port", str(port), "--allow-remote-desktop"),
            name="host-helper",
            env={"RELAYDESK_HOST_HELPER_TOKEN": TOKEN, "DISPLAY": host.display},
        )
        await helper.wait_for_port_async(port, 20)
        async with inprocess_server(seed) as (app, url):
            helper_env = {
                "RELAYDESK_HOST_HELPER": f"http://127.0.0.1:{port}",
                "RELAYDESK_HOST_HELPER_TOKEN": TOKEN,
            }
            relay = start_relay(tracker.start, seed, url, env=helper_env)
            stack = ViewerStack(app, url, seed, tracker, relay)
            await wait_until(lambda: stack.relays.is_connected(stack.relay_id), 20, "the relay")
            assert "local_desktop" in stack.relays.capabilities(stack.relay_id)
            try:
                yield LocalStack(stack, host, helper)
            finally:
                # Relay first, then the helper: SIGTERM makes it stop the x11vnc it started.
                tracker.cleanup()
    finally:
        tracker.cleanup()
        leaked = await asyncio.to_thread(stop_x11vnc_on, host.display)
        host.stop()
    assert not leaked, f"x11vnc left running on the host display: {leaked}"


@pytest_asyncio.fixture(loop_scope="module")
async def context(browser: Browser, local: LocalStack) -> AsyncIterator[BrowserContext]:
    context = await browser.new_context(viewport=VIEWPORT)
    await context.add_init_script(NUM_LOCK_SCRIPT)
    context.set_default_timeout(scaled(15) * 1000)
    yield context
    await context.close()


async def canvas_pixels(page: Page) -> np.ndarray:
    url = await page.evaluate(CANVAS_PNG)
    png = base64.b64decode(url.split(",", 1)[1])
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


async def canvas_shows_host(page: Page, display: str) -> bool:
    """The canvas equals the host display's pixels (cursor box aside, small JPEG error)."""
    shown = await canvas_pixels(page)
    expected = await asyncio.to_thread(capture, display)
    if shown.shape != expected.shape:
        return False
    shown, expected = (without_cursor(image, display) for image in (shown, expected))
    error = np.abs(shown.astype(int) - expected.astype(int)).max(axis=2)
    return bool((error <= 24).mean() > 0.995)


async def viewer_connected(viewer: Page) -> None:
    await viewer.wait_for_url("**/vnc/**")
    await viewer.wait_for_function(
        "() => document.body.dataset.state === 'connected'", timeout=scaled(20) * 1000
    )


def save_host(display: str, path: Path) -> None:
    Image.fromarray(capture(display)).save(path)


def host_num_lock(display: str) -> bool:
    conn = xdisplay.Display(display)
    try:
        return bool(int(conn.get_keyboard_control().led_mask) & LED_NUM_LOCK)
    finally:
        conn.close()


async def xsetroot_solid(display: str, colour: str) -> None:
    process = await asyncio.create_subprocess_exec(
        "xsetroot", "-display", display, "-solid", colour
    )
    assert await asyncio.wait_for(process.wait(), scaled(5)) == 0


async def test_desktop_local_in_the_chat_shows_the_host_screen(
    context: BrowserContext, local: LocalStack, artifacts_dir: Path
) -> None:
    page = await context.new_page()
    await sign_in(page, local.stack)
    async with context.expect_page() as opened:
        await send(page, "/desktop local")
    viewer = await opened.value
    await viewer_connected(viewer)
    result = await last_result(page)
    assert await result.get_attribute("data-outcome") == "started"
    await expect(result).to_contain_text("local screen")
    await shot(page, artifacts_dir, "01-chat")

    display = local.host.display
    await wait_until(lambda: canvas_shows_host(viewer, display), 10, "the host screen's pixels")
    await asyncio.to_thread(save_host, display, artifacts_dir / "02-host-screen.png")
    await shot(viewer, artifacts_dir, "03-viewer")

    # The viewer is live: a change on the host screen reaches the canvas.
    await xsetroot_solid(display, "#c03070")
    await wait_until(lambda: canvas_shows_host(viewer, display), 10, "the repainted host screen")
    corner = (await canvas_pixels(viewer))[700, 900].astype(int)
    assert np.abs(corner - (0xC0, 0x30, 0x70)).max() <= 24, corner
    await shot(viewer, artifacts_dir, "04-viewer-after-repaint")

    await send(page, "/desktop list")
    listed = await last_result(page, "listed")
    await expect(listed).to_contain_text("local")
    await shot(page, artifacts_dir, "05-list")
    await viewer.close()
    await page.close()


async def test_num_lock_is_aligned_on_the_host_screen_and_stop_reaches_the_viewer(
    context: BrowserContext, local: LocalStack, artifacts_dir: Path
) -> None:
    display = local.host.display
    # The typed action returns the running local desktop and a viewer URL for it.
    status, body = await local.action("desktop_start", kind="local")
    assert status == 200, body
    row = body.get("result", body)
    assert row["desktop"]["kind"] == "local"
    session = row["desktop"]["desktop_session_id"]
    assert row["viewer_url"].endswith("?view_only=1"), "the API token's viewer only watches"
    # The person's viewer (desktop_attach in her web session gives her this capability).
    viewer_url = f"{local.stack.url}/vnc/{session}/{local.stack.token(session)}/"
    async with httpx.AsyncClient(timeout=scaled(10)) as client:
        response = await client.get(viewer_url.rstrip("/") + "/keyboard-state")
    assert response.status_code == 200, response.text
    state = response.json()
    assert state["known"] is True
    assert state["num_lock"] is await asyncio.to_thread(host_num_lock, display) is False

    viewer = await context.new_page()
    await viewer.goto(viewer_url)
    await viewer_connected(viewer)
    await viewer.evaluate("() => { window.testNumLock = true; }")
    await viewer.focus("#screen canvas")
    await viewer.keyboard.press("a")

    async def host_num_lock_on() -> bool:
        return await asyncio.to_thread(host_num_lock, display)

    await wait_until(host_num_lock_on, 5, "the host display's NumLock LED on")
    stats = await viewer.evaluate("() => JSON.parse(JSON.stringify(window.relaydeskBridge))")
    assert stats["aligns"] == [{"local": True, "remote": False, "sent": True}]
    assert stats["numLockPresses"] == 1
    await shot(viewer, artifacts_dir, "01-num-lock-aligned")

    # She stops it herself: her key press holds the desktop, so her agent could not.
    await local.stack.action(
        "desktop_stop_confirm",
        person=True,
        relay=local.stack.relay_id,
        kind="local",
        slot="main",
        desktop_session_id=session,
    )
    await viewer.wait_for_function(
        "() => document.body.dataset.state === 'stopped'", timeout=scaled(10) * 1000
    )
    assert await viewer.inner_text("#overlay-title") == "Desktop stopped"
    await shot(viewer, artifacts_dir, "02-stopped")
    assert not await asyncio.to_thread(x11vnc_on, display)
    await viewer.close()
