"""Ctrl+V in the viewer pastes what the person has on the clipboard at that moment.

Headless Chromium with the clipboard permission granted, against the real server, relay and
desktop (x11vnc, and the desktop's clipboard bridge ``autocutsel``). The person's clipboard is
set three times in turn, each followed by Ctrl+V in a real GTK text editor on the desktop
(``tests/e2e/text_app.py``, which writes the text it holds to a file); then the editor's text
is selected (Ctrl+A: the desktop's PRIMARY selection) and a fourth text pasted over it. What
the editor holds after each paste is the evidence; and selecting text on the desktop must not
replace what the person has on their own clipboard.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import BrowserContext, Page

from tests.e2e import viewer_pages
from tests.e2e.test_viewer_bridge import bridge_stats, remote_clipboard, snapshot
from tests.e2e.viewer_pages import open_viewer
from tests.e2e.viewer_stack import Desktop, ViewerStack
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

TEXT_APP = Path(__file__).with_name("text_app.py")
SYSTEM_PYTHON = "/usr/bin/python3"  # GTK's bindings (python3-gi) are the system's
TEXTS = ("KKK-11", "LLL-12", "MMM-13")
OVER_SELECTION = "NNN-14"


# The shared fixtures, made visible to this module's tests.
stack = viewer_pages.stack
desktop = viewer_pages.desktop
browser = viewer_pages.browser
context = viewer_pages.context


class Editor:
    """The text app on the desktop's display, and what it holds."""

    def __init__(self, desktop: Desktop, state: Path) -> None:
        self.state = state
        env = {**os.environ, "DISPLAY": desktop.display, "NO_AT_BRIDGE": "1"}
        self.process = subprocess.Popen(
            [SYSTEM_PYTHON, str(TEXT_APP), str(state)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def read(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.state.read_text()))
        except (OSError, ValueError):
            return {}

    def text(self) -> str | None:
        return self.read().get("text")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(scaled(5))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest_asyncio.fixture(loop_scope="module")
async def editor(desktop: Desktop, tmp_path: Path) -> AsyncIterator[Editor]:
    app = Editor(desktop, tmp_path / "editor.json")
    try:
        await wait_until(lambda: _true(app.text() == ""), 20, "the editor's window")
        yield app
    finally:
        await asyncio.to_thread(app.stop)


async def _true(value: bool) -> bool:
    return value


async def settled_text(editor: Editor, seconds: float = 1.0) -> str | None:
    """The editor's text once it has not changed for ``seconds`` (a late paste shows)."""
    last, since = editor.read(), asyncio.get_running_loop().time()
    deadline = since + scaled(10)
    while asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
        now = editor.read()
        if now != last:
            last, since = now, asyncio.get_running_loop().time()
        elif asyncio.get_running_loop().time() - since >= seconds:
            break
    return last.get("text")


async def paste_sent(page: Page, count: int) -> None:
    """Wait until the viewer has sent the V press of its ``count``-th paste: it goes out once
    the desktop's clipboard reads back the text, which on a busy machine took longer than the
    editor's settling time (the first paste then seemed empty, and came with the second)."""

    async def sent() -> bool:
        return len((await bridge_stats(page))["pasteConfirms"]) >= count

    await wait_until(sent, 10, f"the V press of paste {count}")


async def set_local_clipboard(page: Page, text: str) -> None:
    await page.evaluate("(text) => navigator.clipboard.writeText(text)", text)


async def local_clipboard(page: Page) -> str:
    return str(await page.evaluate("() => navigator.clipboard.readText()"))


async def test_ctrl_v_pastes_the_clipboard_of_that_moment(
    context: BrowserContext,
    stack: ViewerStack,
    desktop: Desktop,
    editor: Editor,
    artifacts_dir: Path,
) -> None:
    page = await open_viewer(context, stack, desktop)
    await page.focus("#screen canvas")
    await page.mouse.click(640, 400)
    seen: list[str | None] = []
    expected = ""
    for count, text in enumerate(TEXTS, 1):
        await set_local_clipboard(page, text)
        await page.keyboard.press("Control+KeyV")
        await paste_sent(page, count)
        expected += text
        seen.append(await settled_text(editor))
    assert seen == [TEXTS[0], TEXTS[0] + TEXTS[1], "".join(TEXTS)], seen

    # Select everything on the desktop (its PRIMARY selection): the person's clipboard stays
    # theirs, and a paste over the selection pastes what they hold.
    await set_local_clipboard(page, OVER_SELECTION)
    await page.keyboard.press("Control+KeyA")
    await asyncio.sleep(scaled(1.5))  # the desktop's clipboard bridge polls twice a second
    assert await local_clipboard(page) == OVER_SELECTION
    await page.keyboard.press("Control+KeyV")
    await paste_sent(page, len(TEXTS) + 1)
    over = await settled_text(editor)
    stats = await bridge_stats(page)
    evidence = (
        f"editor after each Ctrl+V: {seen}\nafter Ctrl+A, Ctrl+V: {over!r}\n"
        f"desktop CLIPBOARD: {await remote_clipboard(desktop)!r}\n"
        f"confirmed: {stats['pasteConfirms']}, waits (ms): {stats['pasteWaitsMs']}"
    )
    print(evidence)
    await snapshot(page, artifacts_dir / "pasted.png", evidence)
    assert over == OVER_SELECTION, evidence
    assert await local_clipboard(page) == OVER_SELECTION
    # Each V press went out once the desktop's clipboard was read back holding the text.
    assert (await bridge_stats(page))["pasteConfirms"] == ["confirmed"] * 4
    await page.close()


async def test_the_clipboard_endpoint_answers_a_persons_viewer_only(
    stack: ViewerStack, desktop: Desktop
) -> None:
    person = stack.token(desktop.desktop_session_id)
    view_only = stack.token(desktop.desktop_session_id, person=False)
    forged = person[:-3] + ("abc" if not person.endswith("abc") else "xyz")
    sid = desktop.desktop_session_id
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(10)) as client:
        await client.get(f"/vnc/{sid}/{person}/clipboard")  # the relay's xclip is ready
        subprocess.run(
            ["xclip", "-selection", "clipboard", "-i"],
            input=b"OOO-15",
            check=True,
            env={**os.environ, "DISPLAY": desktop.display},
            timeout=scaled(5),
        )
        answer = await client.get(f"/vnc/{sid}/{person}/clipboard")
        assert answer.status_code == 200, answer.text
        assert answer.headers["cache-control"] == "no-store"
        assert answer.json() == {"ok": True, "known": True, "text": "OOO-15", "truncated": False}
        for token in (view_only, forged):
            refused = await client.get(f"/vnc/{sid}/{token}/clipboard")
            assert refused.status_code == 403, refused.text
            assert refused.json()["text"] is None and refused.json()["known"] is False
            assert refused.headers["cache-control"] == "no-store"
