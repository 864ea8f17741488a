"""The viewer's local-feel bridge in headless Chromium, against the real server, relay and desktop.

Clipboard both ways (``xclip`` on the desktop's display), NumLock aligned before the first key,
held Backspace repeating remotely, ``ResizeObserver`` loop errors kept from noVNC's fatal error
handler, and ``GET /vnc/{sid}/{token}/keyboard-state``. Remote key events are read by an X client
on the desktop's display (``tests/support/xrecorder.py``), so order and counts are the X
server's, not the page's.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page
from Xlib import display as xdisplay

from tests.e2e import viewer_pages
from tests.e2e.viewer_pages import clipboard_context, open_viewer
from tests.e2e.viewer_stack import Desktop, ViewerStack
from tests.support.processes import scaled
from tests.support.stack import wait_until
from tests.support.xrecorder import XRecorder

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

XK_NUM_LOCK = 0xFF7F
XK_BACKSPACE = 0xFF08
LED_NUM_LOCK = 1 << 1
# Headless Chromium has no OS keyboard: its lock states are always off, and CDP's
# Input.dispatchKeyEvent carries only Alt/Ctrl/Meta/Shift, so no real key event can report
# NumLock on. The page's own view of it is therefore set here, before any page script runs:
# trusted (Playwright) key events then report getModifierState("NumLock") as the test says,
# and everything else about them (order, repeat, target, default actions) stays real.
NUM_LOCK_SCRIPT = """
(() => {
  const original = KeyboardEvent.prototype.getModifierState;
  window.testNumLock = null;  // null: the browser's own answer
  KeyboardEvent.prototype.getModifierState = function (key) {
    if (key === "NumLock" && typeof window.testNumLock === "boolean") return window.testNumLock;
    return original.call(this, key);
  };
})();
"""
# noVNC's own fatal-error handler (app/error-handler.js) fills this element; the viewer page
# has no noVNC UI, so the test gives it the element vnc.html has.
FATAL_ERROR_UI = """() => {
  const box = document.createElement("div");
  box.id = "noVNC_fallback_error";
  box.innerHTML = '<div id="noVNC_fallback_errormsg"></div>';
  document.body.appendChild(box);
}"""
FATAL_SHOWN = """() => {
  const box = document.getElementById("noVNC_fallback_error");
  return box.classList.contains("noVNC_open") ||
    document.getElementById("noVNC_fallback_errormsg").childElementCount > 0;
}"""
# A ResizeObserver whose callback keeps resizing what it observes: Chromium then reports
# "ResizeObserver loop completed with undelivered notifications" as a window error event.
RESIZE_LOOP = """() => new Promise((resolve) => {
  const box = document.createElement("div");
  box.style.cssText = "position:absolute;left:0;top:0;width:10px;height:10px";
  document.body.appendChild(box);
  const observer = new ResizeObserver(() => { box.style.width = (box.offsetWidth + 1) + "px"; });
  observer.observe(box);
  setTimeout(() => { observer.disconnect(); box.remove(); resolve(); }, 300);
})"""
# Registered before any page script, so it sees every error (and paste) event before the bridge.
ERROR_SPY_SCRIPT = """
window.testErrors = [];
window.addEventListener("error", (event) => window.testErrors.push(event.message), true);
window.testPasteEvents = 0;
window.addEventListener("paste", () => { window.testPasteEvents += 1; }, true);
"""


# The shared fixtures, made visible to this module's tests.
stack = viewer_pages.stack
desktop = viewer_pages.desktop
browser = viewer_pages.browser
recorder = viewer_pages.recorder


@pytest_asyncio.fixture(loop_scope="module")
async def context(browser: Browser, stack: ViewerStack) -> AsyncIterator[BrowserContext]:
    context = await clipboard_context(browser, stack, NUM_LOCK_SCRIPT, ERROR_SPY_SCRIPT)
    yield context
    await context.close()


async def snapshot(page: Page, path: Path, evidence: str) -> None:
    """Screenshot with a caption naming what the test saw (the canvas alone shows no keys)."""
    await page.evaluate(
        """(text) => {
          const note = document.createElement("pre");
          note.textContent = "test evidence\\n" + text;
          note.style.cssText = "position:fixed;left:16px;bottom:16px;margin:0;padding:8px;" +
            "background:#fffbe6;color:#111;font:13px monospace;z-index:9;white-space:pre-wrap";
          document.body.appendChild(note);
        }""",
        evidence,
    )
    await page.screenshot(path=path)


async def bridge_stats(page: Page) -> Any:
    return await page.evaluate("() => JSON.parse(JSON.stringify(window.relaydeskBridge))")


def _env(desktop: Desktop) -> dict[str, str]:
    return {**os.environ, "DISPLAY": desktop.display}


async def remote_clipboard(desktop: Desktop) -> str | None:
    """The desktop's CLIPBOARD text, or None while nobody owns it."""
    process = await asyncio.create_subprocess_exec(
        "xclip",
        "-o",
        "-selection",
        "clipboard",
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
    return out.decode() if process.returncode == 0 else None


async def xdotool(desktop: Desktop, *args: str) -> None:
    process = await asyncio.create_subprocess_exec("xdotool", *args, env=_env(desktop))
    assert await asyncio.wait_for(process.wait(), scaled(5)) == 0


def led_num_lock(desktop: Desktop) -> bool:
    """The desktop's NumLock LED, read straight from its X server."""
    conn = xdisplay.Display(desktop.display)
    try:
        return bool(int(conn.get_keyboard_control().led_mask) & LED_NUM_LOCK)
    finally:
        conn.close()


async def led_equals(desktop: Desktop, on: bool) -> bool:
    return await asyncio.to_thread(led_num_lock, desktop) is on


async def set_remote_num_lock(desktop: Desktop, on: bool) -> None:
    if not await led_equals(desktop, on):
        await xdotool(desktop, "key", "Num_Lock")
    await wait_until(lambda: led_equals(desktop, on), 5, f"NumLock LED {on}")


async def key_events_until(
    recorder: XRecorder, done: Callable[[list[dict[str, Any]]], bool], what: str
) -> list[dict[str, Any]]:
    """Recorded key events, gathered until ``done(events)`` holds."""
    events: list[dict[str, Any]] = []

    async def more() -> bool:
        batch = await asyncio.to_thread(recorder.drain)
        events.extend(e for e in batch if e["type"] in ("KeyPress", "KeyRelease"))
        return done(events)

    await wait_until(more, 10, what)
    return events


async def browser_clipboard_is(page: Page, text: str) -> bool:
    return bool(await page.evaluate("() => navigator.clipboard.readText()") == text)


def presses(events: list[dict[str, Any]]) -> list[int]:
    return [int(e["keysym"]) for e in events if e["type"] == "KeyPress"]


def released(keysym: int) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: any(e["type"] == "KeyRelease" and e["keysym"] == keysym for e in events)


async def test_remote_copy_reaches_the_browser_clipboard(
    context: BrowserContext, stack: ViewerStack, desktop: Desktop, artifacts_dir: Path
) -> None:
    page = await open_viewer(context, stack, desktop)
    await page.evaluate("() => navigator.clipboard.writeText('before')")
    text = f"remote copy {uuid.uuid4().hex[:8]}"
    # -quiet keeps xclip in the foreground as the selection owner, so it is ours to stop.
    owner = subprocess.Popen(
        ["xclip", "-quiet", "-selection", "clipboard", "-i"],
        env=_env(desktop),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert owner.stdin is not None
        owner.stdin.write(text.encode())
        owner.stdin.close()
        await wait_until(
            lambda: browser_clipboard_is(page, text), 10, "the remote copy in the browser clipboard"
        )
    finally:
        owner.terminate()
        await asyncio.to_thread(owner.wait, scaled(5))
    assert (await bridge_stats(page))["clipboardWrites"] >= 1
    await snapshot(
        page, artifacts_dir / "remote-copy-in-browser.png", f"browser clipboard: {text!r}"
    )
    await page.close()


async def paste_in_browser(page: Page, desktop: Desktop, recorder: XRecorder) -> None:
    """Ctrl+V a fresh text in the viewer; it must reach the remote CLIPBOARD, then Ctrl+V."""
    text = f"browser paste {uuid.uuid4().hex[:8]}"
    await page.evaluate("(text) => navigator.clipboard.writeText(text)", text)
    await page.focus("#screen canvas")
    await page.keyboard.press("Control+KeyV")

    async def arrived() -> bool:
        return await remote_clipboard(desktop) == text

    await wait_until(arrived, 10, "the browser paste in the remote CLIPBOARD")
    events = await key_events_until(recorder, released(ord("v")), "the V release")
    v_presses = [e for e in events if e["type"] == "KeyPress" and e["keysym"] == ord("v")]
    assert len(v_presses) == 1, events
    assert v_presses[0]["state"] & 0x4, f"V pressed without Control: {events}"  # ControlMask


async def test_browser_paste_reaches_the_remote_clipboard(
    context: BrowserContext,
    stack: ViewerStack,
    desktop: Desktop,
    recorder: XRecorder,
    artifacts_dir: Path,
) -> None:
    page = await open_viewer(context, stack, desktop)
    # First key of the page: Ctrl and V are held while the NumLock state is read, so the text
    # comes from the async clipboard API when they are replayed.
    await paste_in_browser(page, desktop, recorder)
    assert (await bridge_stats(page))["pastes"] == 1
    assert await page.evaluate("() => window.testPasteEvents") == 0
    # Later: the browser's own "paste" event carries the text.
    await paste_in_browser(page, desktop, recorder)
    assert (await bridge_stats(page))["pastes"] == 2
    assert await page.evaluate("() => window.testPasteEvents") == 1
    evidence = f"remote CLIPBOARD: {await remote_clipboard(desktop)!r}\n{await bridge_stats(page)}"
    await snapshot(page, artifacts_dir / "browser-paste-in-remote.png", evidence)
    await page.close()


async def test_num_lock_is_aligned_once_before_the_first_key(
    context: BrowserContext,
    stack: ViewerStack,
    desktop: Desktop,
    recorder: XRecorder,
    artifacts_dir: Path,
) -> None:
    await set_remote_num_lock(desktop, False)
    await asyncio.to_thread(recorder.drain)
    page = await open_viewer(context, stack, desktop)
    await page.evaluate("() => { window.testNumLock = true; }")
    await page.focus("#screen canvas")
    # Typed at once: the keys that arrive while the state is read keep their order.
    await page.keyboard.type("abc")
    events = await key_events_until(recorder, released(ord("c")), "the C release")
    assert presses(events) == [XK_NUM_LOCK, ord("a"), ord("b"), ord("c")], events
    await wait_until(lambda: led_equals(desktop, True), 5, "the remote NumLock LED on")
    stats = await bridge_stats(page)
    assert stats["aligns"] == [{"local": True, "remote": False, "sent": True}]
    await snapshot(page, artifacts_dir / "num-lock-aligned.png", f"remote presses: {events}")
    await page.close()

    # States agree (both on): a fresh page sends no NumLock press before its first key.
    page = await open_viewer(context, stack, desktop)
    await page.evaluate("() => { window.testNumLock = true; }")
    await page.focus("#screen canvas")
    await page.keyboard.press("d")
    events = await key_events_until(recorder, released(ord("d")), "the D release")
    assert presses(events) == [ord("d")], events
    assert (await bridge_stats(page))["aligns"] == [{"local": True, "remote": True, "sent": False}]

    # Focus returns with the browser's NumLock now off: aligned again, once, before the key.
    await page.evaluate(
        "() => { window.testNumLock = false; window.dispatchEvent(new Event('focus')); }"
    )
    await page.keyboard.press("e")
    events = await key_events_until(recorder, released(ord("e")), "the E release")
    assert presses(events) == [XK_NUM_LOCK, ord("e")], events
    await wait_until(lambda: led_equals(desktop, False), 5, "the remote NumLock LED off")
    assert (await bridge_stats(page))["aligns"][-1] == {
        "local": False,
        "remote": True,
        "sent": True,
    }
    await snapshot(page, artifacts_dir / "num-lock-after-focus.png", f"remote presses: {events}")
    await page.close()


async def test_held_backspace_repeats_remotely(
    context: BrowserContext,
    stack: ViewerStack,
    desktop: Desktop,
    recorder: XRecorder,
    artifacts_dir: Path,
) -> None:
    page = await open_viewer(context, stack, desktop)
    await page.focus("#screen canvas")
    await page.keyboard.press("Shift")  # the alignment read happens on this first key
    await asyncio.to_thread(recorder.drain)
    # Headless Chromium has no OS auto-repeat; a held key is what the OS would deliver: one
    # keydown, then keydowns with repeat=true (Playwright sets it for a key already down) at
    # the usual ~30 Hz, then one keyup. The pacing imitates the repeat rate, it waits for nothing.
    repeats = 20
    await page.keyboard.down("Backspace")
    for _ in range(repeats):
        await asyncio.sleep(0.03)
        await page.keyboard.down("Backspace")
    await page.keyboard.up("Backspace")
    events = await key_events_until(
        recorder,
        lambda evs: (
            sum(1 for e in evs if e["type"] == "KeyRelease" and e["keysym"] == XK_BACKSPACE)
            > repeats
        ),
        "every BackSpace release",
    )
    backspaces = presses(events).count(XK_BACKSPACE)
    assert backspaces == repeats + 1, events
    assert (await bridge_stats(page))["repeats"] == repeats
    evidence = f"BackSpace presses seen remotely: {backspaces}\n{await bridge_stats(page)}"
    await snapshot(page, artifacts_dir / "held-backspace.png", evidence)
    await page.close()


async def test_resize_observer_loops_never_reach_the_fatal_error_handler(
    context: BrowserContext, stack: ViewerStack, desktop: Desktop, artifacts_dir: Path
) -> None:
    page = await open_viewer(context, stack, desktop)
    await page.evaluate(FATAL_ERROR_UI)
    # The server serves noVNC's core only; the test brings noVNC's UI handler (Debian's
    # novnc package) to the page, from the page's own origin as its policy requires.
    handler = Path("/usr/share/novnc/app/error-handler.js").read_text()
    await page.route(
        "**/test/error-handler.js",
        lambda route: route.fulfill(body=handler, content_type="text/javascript"),
    )
    await page.add_script_tag(url="/test/error-handler.js")
    await page.evaluate(RESIZE_LOOP)
    errors = await page.evaluate("() => window.testErrors")
    assert any("ResizeObserver loop" in message for message in errors), errors
    assert not await page.evaluate(FATAL_SHOWN)
    assert await page.evaluate("() => document.body.dataset.state") == "connected"
    assert await page.is_hidden("#overlay")
    await snapshot(page, artifacts_dir / "resize-observer-loop.png", f"window errors: {errors}")

    # The handler is live: any other uncaught error does reach it.
    await page.evaluate("() => { setTimeout(() => { throw new Error('a real failure'); }); }")
    await page.wait_for_function(FATAL_SHOWN, timeout=scaled(5) * 1000)
    await page.close()


async def test_keyboard_state_endpoint(
    context: BrowserContext, stack: ViewerStack, desktop: Desktop, artifacts_dir: Path
) -> None:
    path = stack.viewer_path(desktop)
    sid, token = desktop.desktop_session_id, path.split("/")[3]
    forged = token[:-3] + ("abc" if not token.endswith("abc") else "xyz")
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(10)) as client:

        async def num_lock() -> Any:
            response = await client.get(f"/vnc/{sid}/{token}/keyboard-state")
            assert response.status_code == 200, response.text
            assert response.headers["cache-control"] == "no-store"
            body = response.json()
            assert body["ok"] is True and body["known"] is True, body
            return body["num_lock"]

        refused = await client.get(f"/vnc/{sid}/{forged}/keyboard-state")
        assert refused.status_code == 403
        assert refused.headers["cache-control"] == "no-store"
        assert refused.json()["known"] is False and refused.json()["num_lock"] is None

        before = await asyncio.to_thread(led_num_lock, desktop)
        assert await num_lock() is before
        await xdotool(desktop, "key", "Num_Lock")
        await wait_until(lambda: led_equals(desktop, not before), 5, "the LED to flip")
        assert await num_lock() is (not before)
        await xdotool(desktop, "key", "Num_Lock")
        await wait_until(lambda: led_equals(desktop, before), 5, "the LED to flip back")
        assert await num_lock() is before

    page = await context.new_page()
    await page.goto(f"{stack.url}/vnc/{sid}/{token}/keyboard-state")
    await page.screenshot(path=artifacts_dir / "keyboard-state.png")
    await page.close()
