"""The Recordings view in headless Chromium: a recorded agent session is listed, its player
seeks to a marker of the timeline and shows that moment's picture, with the click point
drawn over it; the same in the phone layout (docs/recording.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, expect

from tests.e2e.chat_fixtures import shot, sign_in
from tests.e2e.viewer_stack import ViewerStack, viewer_stack
from tests.support.browser import chromium
from tests.support.processes import scaled
from tests.support.recording_session import RED, RELAY_ENV, WINDOW, near, play_session

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

# The colour at the window's middle in the picture the <video> shows now.
VIDEO_PIXEL = """([x, y]) => {
  const video = document.getElementById('rec-video');
  const canvas = document.createElement('canvas');
  canvas.width = video.videoWidth; canvas.height = video.videoHeight;
  const g = canvas.getContext('2d');
  g.drawImage(video, 0, 0);
  return Array.from(g.getImageData(x, y, 1, 1).data.slice(0, 3));
}"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("rec-ui"), relay_env=RELAY_ENV) as s:
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(stack: ViewerStack) -> dict[str, Any]:
    return await play_session(stack)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as b:
        yield b


async def open_recording(page: Page, stack: ViewerStack, recording_id: str) -> None:
    await sign_in(page, stack)
    await page.get_by_role("button", name="Recordings").click()
    await page.locator(f".rec-item[data-id='{recording_id}']").click()
    await page.wait_for_function(
        "() => document.getElementById('rec-video').readyState >= 2",
        timeout=scaled(20) * 1000,
    )


async def seek_to_marker(page: Page, selector: str) -> None:
    await page.evaluate(
        "() => { window.seekedAt = null; document.getElementById('rec-video')"
        ".addEventListener('seeked', () => { window.seekedAt = performance.now(); },"
        " { once: true }); }"
    )
    await page.locator(selector).first.click()
    await page.wait_for_function("() => window.seekedAt !== null", timeout=scaled(10) * 1000)


async def test_the_player_seeks_to_a_marker_and_shows_that_moment(
    stack: ViewerStack, session: dict[str, Any], browser: Browser, artifacts_dir: Path
) -> None:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    try:
        await open_recording(page, stack, session["recording_id"])
        markers = page.locator(".rec-marker")
        assert await markers.count() >= 6
        await expect(page.locator(".rec-marker.kind-refused")).to_have_count(1)
        await expect(page.locator(".rec-shade")).to_have_count(1)  # the person's takeover
        # The first agent click's marker: the window shows red (the click's effect) and the
        # click point is drawn where it was.
        click_marker = ".rec-marker.kind-agent_action[title*='screen.click']"
        await seek_to_marker(page, click_marker)
        middle = (WINDOW[0] + WINDOW[2] // 2, WINDOW[1] + WINDOW[3] // 2 + 60)
        colour = await page.evaluate(VIDEO_PIXEL, list(middle))
        if session["click_effect"] == "changed":
            assert near(tuple(colour), RED), colour
        await expect(page.locator(".rec-point")).to_have_count(1)
        await expect(page.locator(".rec-event.past")).not_to_have_count(0)
        await shot(page, artifacts_dir, "recording-player")
        # The event list seeks too.
        await page.locator(".rec-event button[data-kind='stop']").click()
        await page.wait_for_function(
            "() => Math.abs(document.getElementById('rec-video').currentTime * 1000 -"
            " Number(document.querySelector(\".rec-event button[data-kind='stop']\").dataset.t))"
            " < 50"
        )
    finally:
        await context.close()


async def test_the_recordings_view_works_in_the_phone_layout(
    stack: ViewerStack, session: dict[str, Any], browser: Browser, artifacts_dir: Path
) -> None:
    context = await browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = await context.new_page()
    try:
        await open_recording(page, stack, session["recording_id"])
        video_box = await page.locator("#rec-video").bounding_box()
        assert video_box is not None and video_box["width"] <= 390
        await seek_to_marker(page, ".rec-marker.kind-refused")
        await expect(page.locator(".rec-point.kind-refused")).to_have_count(1)
        await shot(page, artifacts_dir, "recording-phone")
    finally:
        await context.close()
