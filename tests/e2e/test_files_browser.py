"""The viewer's Files panel and drag-and-drop upload in headless Chromium, on a real desktop.

A person signed in drops files on the viewer: they land in the desktop's ``~/Downloads`` with
the right bytes, owner and mode (read from the file system); a second drop of the same name
lands as a renamed copy; a file over ``RELAYDESK_FILE_MAX_MB`` is refused with the server's
reason. The Files panel lists the folder and a click downloads the file back identical.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, expect

from tests.e2e.viewer_stack import Desktop, ViewerStack, viewer_stack
from tests.support.browser import chromium
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

FILE_MAX_MB = 1
DROP = (
    "([name, b64]) => { const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));"
    " const data = new DataTransfer(); data.items.add(new File([bytes], name));"
    " document.getElementById('screen').dispatchEvent(new DragEvent('drop',"
    " {dataTransfer: data, bubbles: true, cancelable: true})); }"
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    env = {"RELAYDESK_FILE_MAX_MB": str(FILE_MAX_MB)}
    async with viewer_stack(tmp_path_factory.mktemp("files-e2e"), relay_env=env) as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def desktop(stack: ViewerStack) -> Desktop:
    return await stack.start_desktop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as browser:
        yield browser


def home_of(stack: ViewerStack, desktop: Desktop) -> Path:
    state = stack.seed.data_dir / "relay-state" / "desktops.json"
    (found,) = [
        d
        for d in json.loads(state.read_text(encoding="utf-8"))["desktops"]
        if d["desktop_session_id"] == desktop.desktop_session_id
    ]
    return Path(found["home"])


async def open_viewer(browser: Browser, stack: ViewerStack, desktop: Desktop) -> Page:
    context = await browser.new_context(
        viewport={"width": 1280, "height": 800}, accept_downloads=True
    )
    context.set_default_timeout(scaled(15) * 1000)
    cookie = (await stack.person_headers())["Cookie"].split("=", 1)[1]
    await context.add_cookies([{"name": "relaydesk_session", "value": cookie, "url": stack.url}])
    page = await context.new_page()
    await page.goto(stack.url + stack.viewer_path(desktop))
    await page.wait_for_function(
        "() => document.body.dataset.state === 'connected'", timeout=scaled(20) * 1000
    )
    return page


async def test_a_dropped_file_lands_in_downloads_and_downloads_back(
    browser: Browser, stack: ViewerStack, desktop: Desktop, tmp_path: Path
) -> None:
    home = home_of(stack, desktop)
    blob = os.urandom(300_000)
    page = await open_viewer(browser, stack, desktop)
    await page.evaluate(DROP, ["report.bin", base64.b64encode(blob).decode()])
    landed = home / "Downloads" / "report.bin"
    await wait_until(
        lambda: landed.exists() and landed.stat().st_size == len(blob),
        scaled(20),
        "the dropped file to land",
    )
    assert landed.read_bytes() == blob
    info = landed.stat()
    assert info.st_uid == home.stat().st_uid and stat.S_IMODE(info.st_mode) & 0o022 == 0
    uploads = page.locator("#files-uploads li[data-name='report.bin']")
    await expect(uploads.first).to_contain_text("~/Downloads/report.bin")

    await page.evaluate(DROP, ["report.bin", base64.b64encode(b"second").decode()])
    await expect(uploads.nth(1)).to_contain_text("report (1).bin")
    assert (home / "Downloads" / "report (1).bin").read_bytes() == b"second"
    assert landed.read_bytes() == blob  # never overwritten

    listed = page.locator("#files-list li[data-name='report.bin']")
    await expect(listed).to_contain_text("293.0 KB")  # 300,000 bytes
    async with page.expect_download() as waiting:
        await listed.get_by_role("link", name="report.bin").click()
    download = await waiting.value
    saved = tmp_path / "back.bin"
    await download.save_as(saved)
    assert saved.read_bytes() == blob
    await page.context.close()


async def test_a_file_over_the_limit_is_refused_with_the_reason(
    browser: Browser, stack: ViewerStack, desktop: Desktop
) -> None:
    home = home_of(stack, desktop)
    page = await open_viewer(browser, stack, desktop)
    big = base64.b64encode(b"x" * (FILE_MAX_MB * 1024 * 1024 + 1)).decode()
    await page.evaluate(DROP, ["big.bin", big])
    row = page.locator("#files-uploads li[data-name='big.bin']")
    await expect(row).to_have_attribute("data-refused", "file_too_large")
    await expect(row).to_contain_text("larger than")
    assert not (home / "Downloads" / "big.bin").exists()
    await page.context.close()
