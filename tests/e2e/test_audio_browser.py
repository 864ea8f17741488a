"""The viewer page plays desktop audio in headless Chromium: WebCodecs decodes, no errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page

from benchmarks.bench_audio import tone
from tests.e2e.viewer_stack import Desktop, ViewerStack, viewer_stack
from tests.support.browser import chromium
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("audio-e2e")) as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium("--autoplay-policy=no-user-gesture-required") as browser:
        yield browser


async def audio_stats(page: Page) -> Any:
    return await page.evaluate("() => ({...window.relaydeskAudio})")


async def open_viewer(browser: Browser, stack: ViewerStack, desktop: Desktop) -> Page:
    page = await browser.new_page()
    await page.goto(stack.url + stack.viewer_path(desktop))
    await page.wait_for_function(
        "() => window.relaydeskAudio !== undefined", timeout=scaled(10) * 1000
    )
    return page


async def test_the_speaker_plays_decoded_desktop_audio(
    stack: ViewerStack, browser: Browser
) -> None:
    desktop = await stack.start_desktop()
    page = await open_viewer(browser, stack, desktop)
    assert (await audio_stats(page))["state"] == "off", "nothing plays before a user gesture"
    with tone(desktop.display, 30):
        await page.click("#audio")  # the user gesture that may start audio
        await page.wait_for_function(
            "() => window.relaydeskAudio.decoded >= 25", timeout=scaled(10) * 1000
        )
    stats = await audio_stats(page)
    assert stats["state"] == "on", stats
    assert stats["errors"] == 0, stats
    assert await page.get_attribute("#audio", "aria-pressed") == "true"
    await page.click("#audio")
    assert (await audio_stats(page))["state"] == "off"
    await page.close()


async def test_a_desktop_without_audio_shows_audio_unavailable(
    stack: ViewerStack, browser: Browser
) -> None:
    answer = await stack.action("desktop_start", slot="quiet", geometry="1280x800", audio=False)
    row = answer.get("result", answer)
    silent = Desktop(row["desktop"]["desktop_session_id"], "quiet", "", 0, 0, row["viewer_url"])
    stack.desktops.append(silent)
    page = await open_viewer(browser, stack, silent)
    await page.click("#audio")
    await page.wait_for_function(
        "() => window.relaydeskAudio.state === 'unavailable'", timeout=scaled(10) * 1000
    )
    text = await page.text_content("#audio-status")
    assert text is not None and text.startswith("Audio unavailable"), text
    assert "no audio" in text
    assert await page.is_disabled("#audio")
    await asyncio.wait_for(page.close(), scaled(10))
