"""Screen actions on the host display through the helper: guarded clicks, typing, key state."""

from __future__ import annotations

import asyncio
import base64
import io
from typing import Any

import numpy as np
import pytest
from PIL import Image
from Xlib import X

from tests.host_helper.conftest import Helper
from tests.support.xrecorder import XRecorder
from wire.guard import crop_rect, cut, encode_crop

pytestmark = pytest.mark.integration


def pixels_of(shot: dict[str, Any]) -> np.ndarray:
    image = Image.open(io.BytesIO(base64.b64decode(shot["image"])))
    return np.asarray(image.convert("RGB"), dtype=np.uint8)


def guard_for(pixels: np.ndarray, at: tuple[int, int]) -> dict[str, Any]:
    rect = crop_rect(at, (pixels.shape[1], pixels.shape[0]))
    return {"crop": encode_crop(cut(pixels, rect)), "rect": rect.to_dict()}


async def drained(recorder: XRecorder, kind: str) -> list[dict[str, Any]]:
    events = await asyncio.to_thread(recorder.drain)
    return [event for event in events if event["type"] == kind]


async def test_guarded_click_lands_and_a_stale_one_is_refused(
    helper: Helper, recorder: XRecorder
) -> None:
    status, shot = await helper.call("POST", "/v1/screen/screenshot", {})
    assert status == 200, shot
    assert (shot["width"], shot["height"]) == (800, 600)
    assert shot["capture"]["encoding"] == "png-bands"
    pixels = pixels_of(shot)
    guard = guard_for(pixels, (200, 150))

    status, body = await helper.call(
        "POST", "/v1/screen/click", {"x": 200, "y": 150, "guard": guard}
    )
    assert status == 200, body
    assert body["guard"]["checked"] is True and body["guard"]["stale"] is False
    presses = await drained(recorder, "ButtonPress")
    assert [(e["x"], e["y"], e["button"]) for e in presses] == [(200, 150, 1)]

    await asyncio.to_thread(recorder.paint, 150, 110, 100, 80, 0xFF0000)
    status, body = await helper.call(
        "POST", "/v1/screen/click", {"x": 200, "y": 150, "guard": guard}
    )
    assert (status, body["error"]["code"]) == (409, "stale_screen")
    assert body["error"]["details"]["difference"] > body["error"]["details"]["threshold"]
    events = await asyncio.to_thread(recorder.drain)
    assert not [e for e in events if e["type"] in ("ButtonPress", "MotionNotify")]


async def test_type_key_and_keyboard_state(helper: Helper, recorder: XRecorder) -> None:
    status, body = await helper.call("POST", "/v1/screen/type", {"text": "Hi é"})
    assert status == 200, body
    typed = {k: v for k, v in body.items() if not k.startswith("effect")}  # and its verdict
    assert typed == {"ok": True, "typed": 4, "display": helper.display}
    assert body["effect"] in ("changed", "no_visible_change", "unverifiable")
    chars = [e["char"] for e in await drained(recorder, "KeyPress") if e["char"]]
    assert "".join(c for c in chars if c in "Hi é") == "Hi é"

    status, body = await helper.call("POST", "/v1/screen/key", {"keys": "ctrl+a"})
    assert status == 200, body
    presses = await drained(recorder, "KeyPress")
    assert presses[-1]["char"] in ("a", "\x01") and presses[-1]["state"] & 0x4

    status, body = await helper.call("POST", "/v1/screen/keyboard_state", {})
    assert status == 200
    assert set(body) >= {"num_lock", "caps_lock", "scroll_lock"} and body["source"] == "led_mask"

    status, body = await helper.call("POST", "/v1/screen/click", {"x": 5000, "y": 1})
    assert (status, body["error"]["code"]) == (400, "invalid_args")
    status, body = await helper.call("POST", "/v1/screen/nonsense", {})
    assert (status, body["error"]["code"]) == (404, "not_found")


async def test_guarded_drag_runs_from_start_to_end_and_a_stale_start_is_refused(
    helper: Helper, recorder: XRecorder
) -> None:
    status, shot = await helper.call("POST", "/v1/screen/screenshot", {})
    assert status == 200, shot
    start, end = (100, 120), (420, 300)
    guard = guard_for(pixels_of(shot), start)
    drag = {"x": start[0], "y": start[1], "to_x": end[0], "to_y": end[1], "guard": guard}

    status, body = await helper.call("POST", "/v1/screen/drag", drag)
    assert status == 200, body
    assert (body["x"], body["y"], body["to_x"], body["to_y"], body["button"]) == (*start, *end, 1)
    assert body["guard"]["checked"] is True and body["guard"]["stale"] is False
    events = await asyncio.to_thread(recorder.drain)
    buttons = [e for e in events if e["type"] in ("ButtonPress", "ButtonRelease")]
    assert [(e["type"], e["x"], e["y"], e["button"]) for e in buttons] == [
        ("ButtonPress", *start, 1),
        ("ButtonRelease", *end, 1),
    ]
    pressed = events.index(buttons[0])
    released = events.index(buttons[1])
    held = [e for e in events[pressed:released] if e["type"] == "MotionNotify"]
    assert len(held) >= 5, events  # moved in steps while the button was down
    assert all(e["state"] & X.Button1Mask for e in held)
    assert (held[-1]["x"], held[-1]["y"]) == end

    # The screen around the START point changes: no press, no motion, nothing at all.
    await asyncio.to_thread(recorder.paint, 60, 80, 80, 80, 0x00FF00)
    status, body = await helper.call("POST", "/v1/screen/drag", drag)
    assert (status, body["error"]["code"]) == (409, "stale_screen")
    assert body["error"]["details"]["difference"] > body["error"]["details"]["threshold"]
    assert await asyncio.to_thread(recorder.drain) == []

    # A change around the END point only is not guarded: the agent chose the start point.
    status, shot = await helper.call("POST", "/v1/screen/screenshot", {})
    guard = guard_for(pixels_of(shot), start)
    await asyncio.to_thread(recorder.paint, 380, 260, 80, 80, 0xFF00FF)
    status, body = await helper.call("POST", "/v1/screen/drag", drag | {"guard": guard})
    assert status == 200 and body["guard"]["stale"] is False, body
    presses = await drained(recorder, "ButtonPress")
    assert [(e["x"], e["y"]) for e in presses] == [start]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"to_x": 800}, "to_x"),
        ({"to_y": -1}, "to_y"),
        ({"to_x": "9"}, "to_x"),
        ({"x": 800}, "x"),
        ({"button": "fourth"}, "button"),
    ],
)
async def test_a_bad_drag_sends_no_input(
    helper: Helper, recorder: XRecorder, change: dict[str, Any], field: str
) -> None:
    drag = {"x": 10, "y": 10, "to_x": 20, "to_y": 20} | change
    status, body = await helper.call("POST", "/v1/screen/drag", drag)
    assert (status, body["error"]["code"]) == (400, "invalid_args")
    assert body["error"]["details"]["field"] == field
    assert await asyncio.to_thread(recorder.drain) == []
