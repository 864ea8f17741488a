"""A ``standard`` desktop through the real server and relay: panel, browser, launchable apps,
kept homes, the viewer in headless Chromium and ``/desktop apps`` in the chat.

One standard desktop serves the module (Chromium is heavy); the kept-home test uses a
``minimal`` one in its own slot.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import pytest
import pytest_asyncio
from PIL import Image
from playwright.async_api import Browser

from tests.e2e.test_viewer_browser import canvas_pixels, wait_for_state
from tests.e2e.viewer_stack import Desktop, ViewerStack, viewer_stack
from tests.support.browser import chromium
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.asyncio(loop_scope="module"),
]

WIDTH, HEIGHT = 1280, 800
PANEL_PX = 34  # relay/desktops/profiles/tint2rc: panel_size
LAUNCHABLE = ["chromium", "pcmanfm", "mousepad", "xterm"]
PAGE_TITLE = "relaydesk-page-ok"
MAGENTA = (255, 0, 255)
TASK_BLUE = (0x3B, 0x5B, 0x8C)  # tint2rc: the active task's (and the menu button's) background
PAGE = f"""<!doctype html><title>{PAGE_TITLE}</title>
<body style="margin:0;background:#ff00ff">
<h1 style="font:bold 96px sans-serif;color:#000;margin:40px">Hello relaydesk</h1>"""
# The session as a person gets it (a window manager), but no extra start-up terminal.
RELAY_ENV = {
    "RELAYDESK_WINDOW_MANAGER": "openbox --sm-disable",
    "RELAYDESK_DESKTOP_APPS": "true",
    "RELAYDESK_DESKTOP_START_TIMEOUT_S": str(scaled(30)),
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("standard-e2e"), RELAY_ENV) as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def standard(stack: ViewerStack) -> Desktop:
    answer = await stack.action(
        "desktop_start", slot="main", geometry=f"{WIDTH}x{HEIGHT}", profile="standard"
    )
    assert answer["profile"] == "standard", answer
    desktop = await _desktop(stack, "main", answer)
    await wait_for_window(desktop, "Chromium")
    return desktop


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as browser:
        yield browser


async def _desktop(stack: ViewerStack, slot: str, answer: dict[str, Any]) -> Desktop:
    sid = answer["desktop"]["desktop_session_id"]
    status = await stack.relays.request(stack.relay_id, "desktop.status", {}, 10.0)
    row = next(d for d in status["desktops"] if d["desktop_session_id"] == sid)
    desktop = Desktop(
        sid, slot, row["display"], row["vnc_port"], row["websockify_port"], answer["viewer_url"]
    )
    stack.desktops.append(desktop)
    return desktop


async def post(stack: ViewerStack, name: str, **args: Any) -> tuple[int, Any]:
    """An action as the seeded user, whatever its status."""
    body = {"conversation_id": stack.seed.conversation_id, **args}
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        response = await client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
    return response.status_code, response.json()


def _x_env(display: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "DISPLAY": display, "XAUTHORITY": os.environ["XAUTHORITY"]}


def window_titles(display: str) -> list[str]:
    done = subprocess.run(
        ["wmctrl", "-l"],
        env=_x_env(display),
        capture_output=True,
        text=True,
        timeout=scaled(10),
        check=False,
    )
    return [line.split(None, 3)[-1] for line in done.stdout.splitlines()]


async def wait_for_window(desktop: Desktop, part: str, timeout_s: float = 30) -> None:
    async def shown() -> bool:
        titles = await asyncio.to_thread(window_titles, desktop.display)
        return any(part in title for title in titles)

    await wait_until(shown, timeout_s, f"a window {part!r}", interval=0.2)


def home_of(stack: ViewerStack, desktop_session_id: str) -> Path:
    """The desktop's home, from the relay's own records (never sent in a row)."""
    state = json.loads((stack.seed.data_dir / "relay-state" / "desktops.json").read_text())
    record = next(d for d in state["desktops"] if d["desktop_session_id"] == desktop_session_id)
    return Path(record["home"])


async def screenshot(stack: ViewerStack, desktop: Desktop) -> np.ndarray:
    """The desktop's pixels through the ``screen`` action, as an ``(h, w, 3)`` RGB array."""
    status, body = await post(
        stack, "screen", action="screenshot", desktop_session_id=desktop.desktop_session_id
    )
    assert status == 200, body
    png = base64.b64decode(body["image"])
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


async def wait_for_browser_painted(stack: ViewerStack, desktop: Desktop) -> None:
    """Until Chromium's tab strip and toolbar are drawn (dark icons and text on light grey):
    a mapped window may still be empty, and keys sent to it then are lost."""

    async def painted() -> bool:
        top = (await screenshot(stack, desktop))[:90].astype(int)
        return bool((top.max(axis=2) < 120).mean() > 0.002)

    await wait_until(painted, 30, "the browser's toolbar on the screen", interval=0.5)


async def open_in_browser(desktop: Desktop, url: str, title: str) -> None:
    """Type ``url`` into Chromium's address bar until a window titled ``title`` shows."""
    xdotool = [
        "xdotool",
        "search",
        "--onlyvisible",
        "--class",
        "chromium",
        "windowactivate",
        "--sync",
        "key",
        "--clearmodifiers",
        "ctrl+l",
        "type",
        "--delay",
        "5",
        f"{url}\n",
    ]
    for attempt in range(3):
        await asyncio.to_thread(
            subprocess.run,
            xdotool,
            env=_x_env(desktop.display),
            capture_output=True,
            timeout=scaled(20),
            check=False,
        )
        try:
            await wait_for_window(desktop, title, 10)
            return
        except AssertionError:
            if attempt == 2:
                raise


def panel_strip(pixels: np.ndarray) -> np.ndarray:
    """The panel's rows, without the clock (it changes every minute)."""
    return pixels[HEIGHT - PANEL_PX + 2 : HEIGHT - 2, : WIDTH - 120].astype(int)


def first_task_x(pixels: np.ndarray) -> int:
    """Where the first task button (#3b5b8c) starts, right of the menu button and the
    launchers: 4 launchers end near x = 200; each more moves it ~28 px right."""
    row = pixels[HEIGHT - PANEL_PX // 2, 90:].astype(int)
    hits = np.flatnonzero(np.abs(row - np.array(TASK_BLUE)).max(axis=1) <= 12)
    return 90 + int(hits[0]) if hits.size else -1


def looks_like_the_panel(pixels: np.ndarray) -> bool:
    """Mostly the panel's dark blue (#1b2433), unlike the browser above it."""
    strip = panel_strip(pixels)
    dark_blue = (strip.max(axis=2) < 90) & (strip[:, :, 2] > strip[:, :, 0])
    above = pixels[HEIGHT - PANEL_PX - 60 : HEIGHT - PANEL_PX - 10].astype(int)
    return bool(dark_blue.mean() > 0.6) and bool(np.median(above) > 150)


async def test_an_unknown_profile_is_refused_naming_the_field(stack: ViewerStack) -> None:
    status, body = await post(stack, "desktop_start", slot="other", profile="nonesuch")
    assert status == 400, body
    assert body["error"]["code"] == "invalid_args"
    assert body["error"]["field"] == "profile"
    assert "standard" in body["error"]["message"] and "minimal" in body["error"]["message"]


async def test_the_standard_desktop_shows_its_panel_and_browser(
    stack: ViewerStack, standard: Desktop, artifacts_dir: Path
) -> None:
    await wait_for_window(standard, "tint2")
    await wait_for_window(standard, "Chromium")
    await wait_for_browser_painted(stack, standard)
    pixels = await screenshot(stack, standard)
    Image.fromarray(pixels).save(artifacts_dir / "standard.png")
    assert pixels.shape == (HEIGHT, WIDTH, 3)
    assert looks_like_the_panel(pixels)
    assert 150 < first_task_x(pixels) < 240, "not 4 launchers between the menu and the tasks"
    # The wallpaper setter ran and was collected: no zombie waits for the desktop to stop.
    children = psutil.Process(stack.relay.pid).children()
    zombies = [p.name() for p in children if p.status() == psutil.STATUS_ZOMBIE]
    assert "hsetroot" not in zombies, zombies


async def test_chromium_shows_a_local_page_through_the_screen_action(
    stack: ViewerStack, standard: Desktop, artifacts_dir: Path
) -> None:
    home = home_of(stack, standard.desktop_session_id)
    page = home / "page.html"
    page.write_text(PAGE, encoding="utf-8")
    os.chown(page, home.stat().st_uid, home.stat().st_gid)  # the desktop user's, like its home
    await wait_for_browser_painted(stack, standard)
    await open_in_browser(standard, f"file://{page}", PAGE_TITLE)

    async def page_painted() -> bool:
        pixels = await screenshot(stack, standard)
        return bool((pixels[150:600] == MAGENTA).all(axis=2).mean() > 0.5)

    await wait_until(page_painted, 15, "the page's colour on the screen")
    pixels = await screenshot(stack, standard)
    Image.fromarray(pixels).save(artifacts_dir / "page.png")
    # The heading: black glyphs on the page's magenta, in its first rows.
    heading = pixels[100:320, :900].astype(int)
    black = (heading.max(axis=2) < 60).mean()
    magenta = (heading == MAGENTA).all(axis=2).mean()
    assert 0.05 < black < 0.6, f"heading glyphs cover {black:.2%}"
    assert magenta > 0.3, f"page background covers {magenta:.2%}"


async def test_the_viewer_in_headless_chromium_shows_the_panel(
    stack: ViewerStack, standard: Desktop, browser: Browser, artifacts_dir: Path
) -> None:
    page = await browser.new_page(viewport={"width": 1280, "height": 860})
    try:
        await page.goto(stack.url + stack.viewer_path(standard))
        await wait_for_state(page, "connected", 20)
        assert "Connected" in await page.inner_text("#status")

        async def panel_shown() -> bool:
            canvas = await canvas_pixels(page)
            return canvas.shape == (HEIGHT, WIDTH, 3) and looks_like_the_panel(canvas)

        await wait_until(panel_shown, 15, "the panel on the viewer's canvas")
        await page.screenshot(path=artifacts_dir / "viewer-standard.png")
        canvas = await canvas_pixels(page)
        shot = await screenshot(stack, standard)
        Image.fromarray(canvas).save(artifacts_dir / "canvas.png")
        # The same panel as the screen tool sees (noVNC may get lossy rectangles).
        error = np.abs(panel_strip(canvas) - panel_strip(shot)).max(axis=2)
        assert (error <= 32).mean() > 0.95, f"panel differs on {(error > 32).mean():.1%}"
    finally:
        await page.close()


async def test_desktop_apps_and_the_chat_list_the_launchable_apps(
    stack: ViewerStack, standard: Desktop
) -> None:
    answer = await stack.action("desktop_apps", slot="main")
    assert answer["profile"] == "standard"
    assert answer["desktop_session_id"] == standard.desktop_session_id
    assert [app["id"] for app in answer["launchable"]] == LAUNCHABLE
    assert answer["launchable"][0] == {
        "id": "chromium",
        "name": "Chromium",
        "icon": "chromium",
        "desktop_entry": "relaydesk-chromium.desktop",
        "accessible": True,
    }
    terminal = next(app for app in answer["launchable"] if app["id"] == "xterm")
    assert terminal["accessible"] is False
    # the running apps come from the desktop's accessibility bus
    assert answer["a11y"] == {"available": True}
    assert any(app["name"] == "Chromium" for app in answer["running"]), answer["running"]

    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    url = f"/api/v1/conversations/{stack.seed.conversation_id}/messages"
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        response = await client.post(url, json={"text": "/desktop apps"}, headers=headers)
    assert response.status_code == 201, response.text
    reply = response.json()["reply"]
    for name in (
        "Chromium (chromium)",
        "Files (pcmanfm)",
        "Text Editor (mousepad)",
        "Terminal (xterm)",
    ):
        assert name in reply["text"], reply["text"]
    assert [app["id"] for app in reply["payload"]["launchable"]] == LAUNCHABLE


async def test_desktop_launch_opens_the_editor(stack: ViewerStack, standard: Desktop) -> None:
    answer = await stack.action("desktop_launch", slot="main", app="mousepad")
    assert answer["desktop_session_id"] == standard.desktop_session_id
    assert answer["app"] == "mousepad" and answer["launched"] is True
    # it answers once the editor's window is on the accessibility bus
    titles = [window["name"] for window in answer["app_window"]["windows"]]
    assert any("Mousepad" in title for title in titles), answer["app_window"]
    await wait_for_window(standard, "Mousepad")
    terminal = await stack.action("desktop_launch", slot="main", app="xterm")
    assert "app_window" not in terminal and "accessibility" in terminal["note"]
    status, body = await post(stack, "desktop_launch", slot="main", app="rm -rf /")
    assert status == 400 and body["error"]["field"] == "app", body


async def _editor_text(stack: ViewerStack, marker: str) -> str | None:
    """The text of the editor's text area holding ``marker``, read from its accessibility tree
    (None while no such text is shown)."""
    status, found = await post(stack, "desktop_find", slot="main", selector="text", app="mousepad")
    if status != 200:
        return None
    for match in found["matches"]:
        status, read = await post(stack, "desktop_read", slot="main", ref=match["ref"])
        if status == 200 and marker in str(read.get("text", "")):
            return str(read["text"])
    return None


async def test_the_editor_opens_a_file_an_agent_wrote(
    stack: ViewerStack, standard: Desktop
) -> None:
    text = "Notes an agent wrote\nfor the editor to show\n"
    written = await stack.action(
        "desktop_file_write", slot="main", path="Documents/agent-notes.txt", content=text
    )
    assert written["path"] == "Documents/agent-notes.txt", written
    path = home_of(stack, standard.desktop_session_id) / "Documents" / "agent-notes.txt"
    assert path.read_text(encoding="utf-8") == text

    async def screen(**args: Any) -> None:
        await stack.action("screen", desktop_session_id=standard.desktop_session_id, **args)

    # The agent opens it in the editor as a person would: Ctrl+O, the
    # home folder (Alt+Home), Ctrl+L, the path, Return.
    # The editor runs one instance: another test may have opened it already.
    launched = await stack.action("desktop_launch", slot="main", app="mousepad", wait_s=0)
    assert launched["launched"] is True, launched
    await wait_for_window(standard, "Mousepad")
    windows = (await stack.action("desktop_windows", slot="main"))["windows"]
    editor = next(w for w in windows if w["name"].endswith("Mousepad"))
    await stack.action("desktop_window", slot="main", window_id=editor["id"], op="activate")
    await screen(action="key", key="ctrl+o")
    await wait_for_window(standard, "Open")
    await screen(action="key", key="alt+Home")  # the home folder, not the recent files
    await screen(action="key", key="ctrl+l")
    await screen(action="type", text="Documents/agent-notes.txt")
    await screen(action="key", key="Return")
    await wait_for_window(standard, "agent-notes.txt")

    shown: list[str] = []

    async def editor_shows_it() -> bool:
        found = await _editor_text(stack, "Notes an agent wrote")
        shown[:] = [found] if found is not None else []
        return found is not None

    await wait_until(editor_shows_it, 30, "the file's text in the editor", interval=0.5)
    assert shown[0].rstrip("\n") == text.rstrip("\n")


async def test_a_kept_home_survives_a_restart_and_is_wiped_only_when_confirmed(
    stack: ViewerStack,
) -> None:
    async def start() -> Desktop:
        answer = await stack.action(
            "desktop_start", slot="kept", profile="minimal", persist_home=True
        )
        assert answer["persist_home"] is True, answer
        return await _desktop(stack, "kept", answer)

    async def stop(desktop: Desktop) -> None:
        await stack.stop_desktop(desktop)
        stack.desktops.remove(desktop)

    desktop = await start()
    home = home_of(stack, desktop.desktop_session_id)
    (home / "notes.txt").write_text("kept")

    asked = await stack.action("desktop_reset_home", slot="kept")
    assert asked["confirm_required"] is True
    assert asked["confirm"]["action"] == "desktop_reset_home"
    confirm = asked["confirm"]["args"]
    assert confirm["confirm"] is True and confirm["slot"] == "kept"
    status, body = await post(stack, "desktop_reset_home", **confirm)
    assert status == 409 and body["error"]["code"] == "busy", body
    assert (home / "notes.txt").exists()

    await stop(desktop)
    desktop = await start()
    assert home_of(stack, desktop.desktop_session_id) == home
    assert (home / "notes.txt").read_text() == "kept"
    await stop(desktop)

    wiped = await stack.action("desktop_reset_home", **confirm)
    assert wiped["reset"] is True and wiped["existed"] is True
    assert not (home / "notes.txt").exists()
