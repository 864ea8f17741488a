"""PNG images on the clipboard, both ways, in the viewer: headless Chromium against the real
server, relay and desktop.

Person → desktop: an image on the browser's clipboard goes to the desktop's CLIPBOARD as
``image/png`` (the clipboard panel's "Send image", and Ctrl+V in the desktop). Desktop →
person: an image copied on the desktop is written to the browser's clipboard ("Get image").
The evidence is read where it lands: the desktop's CLIPBOARD with ``xclip`` on its display,
the browser's clipboard with ``navigator.clipboard.read``; the bytes must decode to the same
picture. Without the clipboard permission the panel says the browser refused.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
import pytest_asyncio
from PIL import Image
from playwright.async_api import Browser, BrowserContext, Page

from tests.e2e import viewer_pages
from tests.e2e.viewer_pages import VIEWER_VIEWPORT, open_viewer
from tests.e2e.viewer_stack import Desktop, ViewerStack
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

PNG = "image/png"

# The shared fixtures, made visible to this module's tests.
stack = viewer_pages.stack
desktop = viewer_pages.desktop
browser = viewer_pages.browser
context = viewer_pages.context

WRITE_BROWSER_CLIPBOARD = """async (b64) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const blob = new Blob([bytes], { type: "image/png" });
  await navigator.clipboard.write([new ClipboardItem({ "image/png": blob })]);
}"""
READ_BROWSER_CLIPBOARD = """async () => {
  for (const item of await navigator.clipboard.read()) {
    if (!item.types.includes("image/png")) continue;
    const bytes = new Uint8Array(await (await item.getType("image/png")).arrayBuffer());
    let text = "";
    for (const byte of bytes) text += String.fromCharCode(byte);
    return btoa(text);
  }
  return null;
}"""

# What the browser's clipboard holds instead, and what the viewer wrote there (a failure's
# message).
DESCRIBE_BROWSER_CLIPBOARD = """async () => {
  const items = await navigator.clipboard.read().catch((e) => String(e));
  const types = Array.isArray(items) ? items.map((item) => item.types) : items;
  const text = await navigator.clipboard.readText().catch((e) => String(e));
  const { clipboardWrites, echoesIgnored } = window.relaydeskBridge;
  return { types, text: text.slice(0, 80), clipboardWrites, echoesIgnored };
}"""


def picture(seed: int, size: tuple[int, int] = (97, 61)) -> Image.Image:
    """A small picture no two seeds share: gradients and a block of the seed's colour."""
    width, height = size
    x = np.linspace(0, 255, width, dtype=np.uint8)[None, :].repeat(height, 0)
    y = np.linspace(0, 255, height, dtype=np.uint8)[:, None].repeat(width, 1)
    pixels = np.stack([x, y, np.full_like(x, (seed * 53) % 256)], axis=2)
    pixels[10:30, 20:50] = ((seed * 91) % 256, 255 - seed, 7)
    return Image.fromarray(pixels, "RGB")


def png_bytes(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def same_picture(data: bytes, image: Image.Image) -> bool:
    got = Image.open(io.BytesIO(data))
    assert data.startswith(b"\x89PNG"), data[:16]
    return got.size == image.size and np.array_equal(
        np.asarray(got.convert("RGB")), np.asarray(image.convert("RGB"))
    )


def _env(desktop: Desktop) -> dict[str, str]:
    return {**os.environ, "DISPLAY": desktop.display}


async def desktop_png(desktop: Desktop) -> bytes | None:
    """The desktop's CLIPBOARD as image/png, or None while it holds none."""
    process = await asyncio.create_subprocess_exec(
        *("xclip", "-o", "-selection", "clipboard", "-t", PNG),
        env=_env(desktop),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), scaled(5))
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return out if process.returncode == 0 and out else None


def clipboard_owners(stack: ViewerStack, desktop: Desktop) -> list[int]:
    """The uids of the clipboard servers the relay started in the desktop (each xclip's
    process group, joined to the desktop's)."""
    state = json.loads((stack.seed.data_dir / "relay-state" / "desktops.json").read_text())
    (record,) = [
        d for d in state["desktops"] if d["desktop_session_id"] == desktop.desktop_session_id
    ]
    groups = {int(p["pid"]) for p in record["processes"] if p["name"] == "clipboard"}
    uids = []
    for process in psutil.process_iter(["pid", "uids"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(process.info["pid"]) in groups:
                uids.append(process.info["uids"].effective)
    return uids


def home_owner(stack: ViewerStack, desktop: Desktop) -> int:
    state = json.loads((stack.seed.data_dir / "relay-state" / "desktops.json").read_text())
    (record,) = [
        d for d in state["desktops"] if d["desktop_session_id"] == desktop.desktop_session_id
    ]
    return Path(record["home"]).stat().st_uid


async def set_browser_clipboard(page: Page, image: Image.Image) -> None:
    await page.bring_to_front()
    await page.evaluate(WRITE_BROWSER_CLIPBOARD, base64.b64encode(png_bytes(image)).decode())


async def panel_says(page: Page, words: str) -> str:
    status = page.locator("#clipboard-image-status")
    await page.wait_for_function(
        "(words) => document.getElementById('clipboard-image-status').textContent.includes(words)",
        arg=words,
        timeout=scaled(15) * 1000,
    )
    return await status.text_content() or ""


async def open_panel(page: Page) -> None:
    if await page.locator("#clipboard-panel").is_hidden():
        await page.locator("#clipboard-button").click()


@pytest_asyncio.fixture(loop_scope="module")
async def page(
    context: BrowserContext, stack: ViewerStack, desktop: Desktop
) -> AsyncIterator[Page]:
    page = await open_viewer(context, stack, desktop)
    yield page
    await page.close()


async def test_send_image_puts_the_browsers_png_on_the_desktops_clipboard(
    page: Page, stack: ViewerStack, desktop: Desktop
) -> None:
    image = picture(1)
    await set_browser_clipboard(page, image)
    await open_panel(page)
    await page.get_by_role("button", name="Send image").click()
    await panel_says(page, "Image sent")

    held: list[bytes] = []

    async def arrived() -> bool:
        data = await desktop_png(desktop)
        held[:] = [data] if data else []
        return data is not None and same_picture(data, image)

    await wait_until(arrived, 10, "the image on the desktop's clipboard")
    # Served by the relay's xclip, as the desktop's user.
    owners = clipboard_owners(stack, desktop)
    assert owners and set(owners) == {home_owner(stack, desktop)}, owners


async def test_ctrl_v_in_the_desktop_sends_the_pasted_image(page: Page, desktop: Desktop) -> None:
    image = picture(2)
    await set_browser_clipboard(page, image)
    await page.locator("#screen canvas").click(position={"x": 600, "y": 400})
    await page.keyboard.press("Control+V")

    async def arrived() -> bool:
        data = await desktop_png(desktop)
        return data is not None and same_picture(data, image)

    await wait_until(arrived, 10, "the pasted image on the desktop's clipboard")
    # The bridge sent it, before the V press.
    await page.wait_for_function(
        "() => window.relaydeskBridge.imagePastes.includes('sent')", timeout=scaled(10) * 1000
    )


async def test_get_image_writes_the_desktops_png_to_the_browsers_clipboard(
    page: Page, desktop: Desktop, tmp_path: Path
) -> None:
    image = picture(3, (140, 90))
    with _copied_on_desktop(desktop, image, tmp_path):
        await wait_until(
            lambda: _holds(desktop, image), 10, "the desktop's own copy on its clipboard"
        )
        await page.bring_to_front()
        await open_panel(page)
        await page.get_by_role("button", name="Get image").click()
        await panel_says(page, "Copied the desktop's image")
        preview = page.locator("#clipboard-image")
        assert await preview.is_visible()
        shown = await preview.evaluate("(img) => [img.naturalWidth, img.naturalHeight]")
        assert tuple(shown) == image.size
        copied = await page.evaluate(READ_BROWSER_CLIPBOARD)
        assert copied is not None, await page.evaluate(DESCRIBE_BROWSER_CLIPBOARD)
        assert same_picture(base64.b64decode(copied), image)


async def test_an_image_copied_on_the_desktop_never_reaches_the_persons_clipboard_as_text(
    page: Page, desktop: Desktop, tmp_path: Path
) -> None:
    """The desktop's clipboard holding an image answers x11vnc's request for text with the
    image's bytes; the viewer sees them as the desktop's clipboard text and leaves the
    person's clipboard alone."""
    await page.bring_to_front()
    await page.evaluate("(t) => navigator.clipboard.writeText(t)", "the person's own text")
    image = picture(4, (60, 40))
    with _copied_on_desktop(desktop, image, tmp_path):
        await wait_until(lambda: _holds(desktop, image), 10, "the desktop's own copy")
        await page.wait_for_function(
            "() => window.relaydeskBridge.binaryIgnored > 0", timeout=scaled(15) * 1000
        )
        text = await page.evaluate("() => navigator.clipboard.readText()")
        assert text == "the person's own text", await page.evaluate(DESCRIBE_BROWSER_CLIPBOARD)


@contextlib.contextmanager
def _copied_on_desktop(desktop: Desktop, image: Image.Image, tmp_path: Path) -> Iterator[None]:
    """An app on the desktop copies ``image`` (xclip stays in the foreground with -quiet,
    stopped by its pid on exit)."""
    source = tmp_path / "copied.png"
    source.write_bytes(png_bytes(image))
    owner = subprocess.Popen(
        ["xclip", "-quiet", "-selection", "clipboard", "-t", PNG, "-i", str(source)],
        env=_env(desktop),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        owner.kill()
        owner.wait()


async def _holds(desktop: Desktop, image: Image.Image) -> bool:
    data = await desktop_png(desktop)
    return data is not None and same_picture(data, image)


async def test_without_the_clipboard_permission_the_panel_says_the_browser_refused(
    browser: Browser, stack: ViewerStack, desktop: Desktop
) -> None:
    context = await browser.new_context(viewport=VIEWER_VIEWPORT)
    context.set_default_timeout(scaled(15) * 1000)
    try:
        page = await open_viewer(context, stack, desktop)
        await open_panel(page)
        await page.get_by_role("button", name="Send image").click()
        said = await panel_says(page, "refused")
        assert "Allow clipboard access" in said, said
    finally:
        await context.close()


async def test_the_image_route_answers_a_persons_viewer_only_and_refuses_bad_bodies(
    stack: ViewerStack, desktop: Desktop
) -> None:
    person = stack.token(desktop.desktop_session_id)
    view_only = stack.token(desktop.desktop_session_id, person=False)
    base = f"/vnc/{desktop.desktop_session_id}"
    image = png_bytes(picture(4))
    png = {"Content-Type": PNG}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(15)) as client:
        for token in (view_only, person[:-3] + ("abc" if not person.endswith("abc") else "xyz")):
            got = await client.get(f"{base}/{token}/clipboard-image")
            put = await client.put(f"{base}/{token}/clipboard-image", content=image, headers=png)
            assert (got.status_code, put.status_code) == (403, 403), (got.text, put.text)
        wrong_type = await client.put(
            f"{base}/{person}/clipboard-image",
            content=image,
            headers={"Content-Type": "text/plain"},
        )
        assert wrong_type.status_code == 415, wrong_type.text
        not_png = await client.put(
            f"{base}/{person}/clipboard-image", content=b"GIF89a", headers=png
        )
        assert not_png.status_code == 400 and not_png.json()["error"]["field"] == "body"
        assert await desktop_png(desktop) != b"GIF89a"

        put = await client.put(f"{base}/{person}/clipboard-image", content=image, headers=png)
        assert put.status_code == 200 and put.headers["cache-control"] == "no-store", put.text
        got = await client.get(f"{base}/{person}/clipboard-image")
        assert got.status_code == 200 and got.headers["content-type"] == PNG
        assert same_picture(got.content, picture(4))
        # Text on the clipboard is no image.
        subprocess.run(
            ["xclip", "-selection", "clipboard", "-i"],
            input=b"only text",
            check=True,
            env=_env(desktop),
            timeout=scaled(5),
        )
        await wait_until(
            lambda: _text_only(client, f"{base}/{person}/clipboard-image"), 10, "no image"
        )


async def _text_only(client: httpx.AsyncClient, url: str) -> bool:
    return (await client.get(url)).status_code == 204
