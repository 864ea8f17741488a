"""The host helper's ``pyautogui`` input backend, in a real ``relaydesk host-helper`` process
started with ``--input-backend pyautogui`` on a private Xvfb (pyautogui drives the screen of
the process it runs in, so it never runs inside the test process). A real X client records
every input event."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import mss
import numpy as np
import pytest
from PIL import Image
from Xlib import XK

from tests.host_helper.conftest import TOKEN
from tests.support.processes import ProcessFactory, free_port
from tests.support.stack import relaydesk_argv, wait_until
from tests.support.xrecorder import XRecorder
from tests.support.xvfb import XvfbServer, start_xvfb
from wire.guard import crop_rect, cut, encode_crop

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def host_screen() -> Iterator[XvfbServer]:
    """This module's own screen size (the shared ``recorder`` covers it)."""
    server = start_xvfb(640, 480)
    try:
        yield server
    finally:
        server.stop()


class Helper:
    def __init__(self, url: str, http: aiohttp.ClientSession) -> None:
        self.url, self.http = url, http

    async def call(self, action: str, body: dict[str, Any]) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with self.http.post(
            f"{self.url}/v1/screen/{action}", json=body, headers=headers
        ) as resp:
            return resp.status, await resp.json()


@pytest.fixture
async def helper(
    host_screen: XvfbServer, recorder: XRecorder, process_factory: ProcessFactory
) -> AsyncIterator[Helper]:
    port = free_port()
    argv = relaydesk_argv(
        "host-helper",
        "--port",
        str(port),
        "--display",
        host_screen.display,
        "--input-backend",
        "pyautogui",
    )
    # No DISPLAY of our own: the helper must point pyautogui at --display itself.
    process_factory(
        argv, name="host-helper", env={"RELAYDESK_HOST_HELPER_TOKEN": TOKEN, "DISPLAY": ""}
    )
    async with aiohttp.ClientSession() as http:
        running = Helper(f"http://127.0.0.1:{port}", http)

        async def answers() -> bool:
            try:
                return (await running.call("screen_size", {}))[0] == 200
            except aiohttp.ClientError:
                return False

        await wait_until(answers, 20, "the host helper to answer")
        yield running


async def events(recorder: XRecorder, kind: str) -> list[dict[str, Any]]:
    return [e for e in await asyncio.to_thread(recorder.drain) if e["type"] == kind]


def pixels_of(shot: dict[str, Any]) -> np.ndarray:
    image = Image.open(io.BytesIO(base64.b64decode(shot["image"])))
    return np.asarray(image.convert("RGB"), dtype=np.uint8)


async def test_screenshot_is_the_screen(helper: Helper, host_screen: XvfbServer) -> None:
    status, shot = await helper.call("screenshot", {})
    assert status == 200, shot
    assert (shot["width"], shot["height"]) == (640, 480)
    with mss.MSS(display=host_screen.display) as grabber:
        direct = np.asarray(grabber.grab({"left": 0, "top": 0, "width": 640, "height": 480}))
    assert np.array_equal(pixels_of(shot), direct[:, :, 2::-1])
    status, size = await helper.call("screen_size", {})
    assert (status, size["width"], size["height"]) == (200, 640, 480)


async def test_guarded_click_lands_once_and_a_stale_one_sends_nothing(
    helper: Helper, recorder: XRecorder
) -> None:
    status, shot = await helper.call("screenshot", {})
    assert status == 200, shot
    pixels = pixels_of(shot)
    rect = crop_rect((200, 150), (640, 480))
    guard = {"crop": encode_crop(cut(pixels, rect)), "rect": rect.to_dict()}
    await asyncio.to_thread(recorder.drain)

    status, body = await helper.call("click", {"x": 200, "y": 150, "guard": guard})
    assert status == 200, body
    presses = await events(recorder, "ButtonPress")
    assert [(e["x"], e["y"], e["button"]) for e in presses] == [(200, 150, 1)]

    await asyncio.to_thread(recorder.paint, 150, 110, 100, 80, 0x00FF00)
    status, body = await helper.call("click", {"x": 200, "y": 150, "guard": guard})
    assert (status, body["error"]["code"]) == (409, "stale_screen")
    moved = await asyncio.to_thread(recorder.drain)
    assert not [e for e in moved if e["type"] in ("ButtonPress", "MotionNotify")]


async def _guard(helper: Helper, point: tuple[int, int]) -> dict[str, object]:
    status, shot = await helper.call("screenshot", {})
    assert status == 200, shot
    rect = crop_rect(point, (shot["width"], shot["height"]))
    return {"crop": encode_crop(cut(pixels_of(shot), rect)), "rect": rect.to_dict()}


async def test_an_unguarded_click_is_refused_and_sends_nothing(
    helper: Helper, recorder: XRecorder
) -> None:
    await asyncio.to_thread(recorder.drain)
    status, body = await helper.call("click", {"x": 200, "y": 150})
    assert (status, body["error"]["code"]) == (400, "invalid_args")
    assert "guard" in body["error"]["message"]
    moved = await asyncio.to_thread(recorder.drain)
    assert not [e for e in moved if e["type"] in ("ButtonPress", "MotionNotify")]


async def test_double_click_drag_scroll_and_pointer(helper: Helper, recorder: XRecorder) -> None:
    args = {"x": 30, "y": 40, "button": "right", "guard": await _guard(helper, (30, 40))}
    await asyncio.to_thread(recorder.drain)
    assert (await helper.call("double_click", args))[0] == 200
    presses = await events(recorder, "ButtonPress")
    assert [(e["x"], e["y"], e["button"]) for e in presses] == [(30, 40, 3)] * 2

    drag = {"x": 100, "y": 100, "to_x": 300, "to_y": 200, "guard": await _guard(helper, (100, 100))}
    await asyncio.to_thread(recorder.drain)
    status, body = await helper.call("drag", drag)
    assert status == 200, body
    recorded = await asyncio.to_thread(recorder.drain)
    buttons = [(e["type"], e["x"], e["y"]) for e in recorded if e["type"].startswith("Button")]
    assert buttons == [("ButtonPress", 100, 100), ("ButtonRelease", 300, 200)]
    held = [e for e in recorded if e["type"] == "MotionNotify" and e["state"] & 0x100]
    assert len(held) >= 3  # moved with the button held, in steps

    for direction, button in (("up", 4), ("down", 5), ("left", 6), ("right", 7)):
        status, body = await helper.call("scroll", {"direction": direction, "amount": 2})
        assert status == 200, body
        assert [e["button"] for e in await events(recorder, "ButtonPress")] == [button] * 2

    assert (await helper.call("move", {"x": 321, "y": 123}))[0] == 200
    status, position = await helper.call("mouse_position", {})
    assert (status, position["x"], position["y"]) == (200, 321, 123)


async def test_typing_and_chords(helper: Helper, recorder: XRecorder) -> None:
    status, body = await helper.call("type", {"text": "Hello, World!"})
    assert status == 200 and body["typed"] == 13, body
    chars = [e["char"] for e in await events(recorder, "KeyPress") if e["char"]]
    assert "".join(c for c in chars if c.isprintable()) == "Hello, World!"

    assert (await helper.call("key", {"keys": "ctrl+shift+t"}))[0] == 200
    pressed = await events(recorder, "KeyPress")
    assert [e["keysym"] for e in pressed[:2]] == [XK.XK_Control_L, XK.XK_Shift_L]
    # One chord: the recorder reads the last key at its shifted level, with both held.
    assert len(pressed) == 3 and pressed[2]["keysym"] == XK.XK_T
    assert pressed[2]["state"] & 0x5 == 0x5  # ShiftMask | ControlMask

    assert (await helper.call("key", {"keys": "Return"}))[0] == 200
    assert [e["keysym"] for e in await events(recorder, "KeyPress")] == [XK.XK_Return]


async def test_what_pyautogui_cannot_type_is_refused_before_any_key(
    helper: Helper, recorder: XRecorder
) -> None:
    status, body = await helper.call("type", {"text": "abc wörld ☃"})
    assert (status, body["error"]["code"]) == (400, "invalid_args")
    assert "'ö'" in body["error"]["message"] and "'☃'" in body["error"]["message"]
    status, body = await helper.call("key", {"keys": "ctrl+nosuchkey"})
    assert (status, body["error"]["code"]) == (400, "invalid_args")
    assert "nosuchkey" in body["error"]["message"]
    assert await events(recorder, "KeyPress") == []


async def test_keyboard_state_says_it_is_not_observable(helper: Helper) -> None:
    status, body = await helper.call("keyboard_state", {})
    assert status == 200, body
    assert body["source"] == "not_observable"
    # unknown, not "off": the viewer must not align NumLock on a guess
    assert (body["num_lock"], body["caps_lock"], body["scroll_lock"]) == (None, None, None)


async def test_a_display_pyautogui_cannot_open_is_unavailable(
    process_factory: ProcessFactory,
) -> None:
    port = free_port()
    argv = relaydesk_argv(
        "host-helper",
        "--port",
        str(port),
        "--display",
        ":0.nothing-here",
        "--input-backend",
        "pyautogui",
    )
    process_factory(argv, name="host-helper", env={"RELAYDESK_HOST_HELPER_TOKEN": TOKEN})
    async with aiohttp.ClientSession() as http:
        helper = Helper(f"http://127.0.0.1:{port}", http)
        answer: list[tuple[int, Any]] = []

        async def answered() -> bool:
            try:
                answer.append(await helper.call("click", {"x": 1, "y": 1}))
            except aiohttp.ClientError:
                return False
            return True

        await wait_until(answered, 20, "the host helper to answer")
    status, body = answer[-1]
    assert (status, body["error"]["code"]) == (503, "unavailable")
    assert "pyautogui cannot open the screen" in body["error"]["message"]
