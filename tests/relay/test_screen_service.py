"""The relay's screen service against real Xvfb displays, with an event-recording X client."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
from PIL import Image
from Xlib import XK, X, display
from Xlib.protocol import event

from relay.screen.service import ScreenService
from tests.support.processes import scaled
from tests.support.screens import private_screen, recorder_on, screen_service
from tests.support.xrecorder import XRecorder
from tests.support.xvfb import private_xvfb
from wire.errors import ErrorCode, OpError
from wire.guard import crop_rect, cut, encode_crop

pytestmark = pytest.mark.integration

WIDTH, HEIGHT = 1280, 800


xvfb = private_screen(WIDTH, HEIGHT)
recorder = recorder_on("xvfb")
service = screen_service()


async def _guard_for(svc: ScreenService, disp: str, point: tuple[int, int]) -> dict[str, object]:
    shot = await svc.screenshot(disp, {})
    rect = crop_rect(point, (shot.width, shot.height))
    return {"crop": encode_crop(cut(shot.pixels, rect)), "rect": rect.to_dict()}


def _presses(events: list[dict[str, object]]) -> list[dict[str, object]]:
    return [ev for ev in events if ev["type"] == "ButtonPress"]


async def test_unchanged_guarded_click_presses_once(xvfb, recorder, service):
    guard = await _guard_for(service, xvfb.display, (400, 300))
    result = await service.run(xvfb.display, "click", {"x": 400, "y": 300, "guard": guard})
    assert result["guard"]["checked"] is True
    assert result["guard"]["difference"] == 0.0
    presses = _presses(recorder.drain())
    assert len(presses) == 1
    assert (presses[0]["x"], presses[0]["y"], presses[0]["button"]) == (400, 300, 1)


async def test_changed_region_is_stale_and_sends_nothing(xvfb, recorder, service):
    recorder.drain()
    guard = await _guard_for(service, xvfb.display, (400, 300))
    recorder.paint(360, 270, 80, 60, 0xFFFFFF)  # a dialog appeared under the target
    with pytest.raises(OpError) as info:
        await service.run(xvfb.display, "click", {"x": 400, "y": 300, "guard": guard})
    assert info.value.code is ErrorCode.STALE_SCREEN
    assert info.value.details["difference"] > info.value.details["threshold"]
    assert recorder.drain() == []


async def test_change_elsewhere_does_not_block(xvfb, recorder, service):
    guard = await _guard_for(service, xvfb.display, (400, 300))
    recorder.paint(900, 600, 200, 150, 0xFF0000)
    await service.run(xvfb.display, "double_click", {"x": 400, "y": 300, "guard": guard})
    presses = _presses(recorder.drain())
    assert [(p["x"], p["y"]) for p in presses] == [(400, 300), (400, 300)]


async def test_stale_drag_sends_nothing(xvfb, recorder, service):
    guard = await _guard_for(service, xvfb.display, (200, 200))
    recorder.paint(150, 150, 100, 100, 0x00FF00)
    args = {"x": 200, "y": 200, "to_x": 500, "to_y": 400, "guard": guard}
    with pytest.raises(OpError) as info:
        await service.run(xvfb.display, "drag", args)
    assert info.value.code is ErrorCode.STALE_SCREEN
    assert recorder.drain() == []


@pytest.mark.parametrize(
    ("action", "args"),
    [
        ("click", {"x": 400, "y": 300}),
        ("double_click", {"x": 400, "y": 300}),
        ("drag", {"x": 100, "y": 100, "to_x": 300, "to_y": 200}),
        ("mouse_down", {"x": 400, "y": 300}),
        ("mouse_down", {}),
    ],
)
async def test_an_unguarded_click_or_drag_is_refused_and_sends_nothing(
    xvfb, recorder, service, action, args
):
    # The server always sends the guard; whatever else reaches the relay without one is refused.
    with pytest.raises(OpError) as caught:
        await service.run(xvfb.display, action, args)
    assert caught.value.code is ErrorCode.INVALID_ARGS
    assert "guard" in caught.value.message
    assert not [ev for ev in recorder.drain() if ev["type"] in ("ButtonPress", "MotionNotify")]


async def test_drag_holds_button_while_moving(xvfb, recorder, service):
    guard = await _guard_for(service, xvfb.display, (100, 100))
    args = {"x": 100, "y": 100, "to_x": 300, "to_y": 200, "guard": guard}
    await service.run(xvfb.display, "drag", args)
    events = recorder.drain()
    kinds = [ev["type"] for ev in events]
    assert kinds.count("ButtonPress") == 1
    assert kinds.count("ButtonRelease") == 1
    press, release = kinds.index("ButtonPress"), kinds.index("ButtonRelease")
    assert (events[press]["x"], events[press]["y"]) == (100, 100)
    assert (events[release]["x"], events[release]["y"]) == (300, 200)
    held = [ev for ev in events[press:release] if ev["type"] == "MotionNotify"]
    assert len(held) >= 5
    assert all(ev["state"] & X.Button1Mask for ev in held)


async def test_scroll_uses_wheel_buttons(xvfb, recorder, service):
    await service.run(xvfb.display, "scroll", {"x": 50, "y": 60, "direction": "up", "amount": 2})
    await service.run(xvfb.display, "scroll", {"direction": "right", "amount": 1})
    buttons = [(p["button"], p["x"], p["y"]) for p in _presses(recorder.drain())]
    assert buttons == [(4, 50, 60), (4, 50, 60), (7, 50, 60)]


async def test_type_unicode_exactly(xvfb, recorder, service):
    text = "Hello, wörld! ☃"
    result = await service.run(xvfb.display, "type", {"text": text})
    verdict = {"effect", "effect_ms"}  # whether it showed; never the text (a password?)
    assert {k: v for k, v in result.items() if k not in verdict} == {"typed": len(text)}
    assert result["effect"] in ("changed", "no_visible_change", "unverifiable")
    presses = [ev for ev in recorder.drain() if ev["type"] == "KeyPress"]
    typed = "".join(ev["char"] for ev in presses if ev["char"])
    assert typed == text
    assert 0x1002603 in {ev["keysym"] for ev in presses}  # ☃ via its Unicode keysym
    answer = await service.run(xvfb.display, "type", {"text": "ö"})
    assert {k: answer[k] for k in answer if k not in ("effect", "effect_ms")} == {"typed": 1}
    # the spare keycodes were restored: nothing is left bound to the snowman
    conn = display.Display(xvfb.display)
    try:
        assert conn.keysym_to_keycodes(0x1002603) == []
    finally:
        conn.close()


async def test_chord_arrives_with_modifiers(xvfb, recorder, service):
    await service.run(xvfb.display, "key", {"keys": "CTRL+Shift+t"})
    presses = [ev for ev in recorder.drain() if ev["type"] == "KeyPress"]
    assert [ev["keysym"] for ev in presses[:2]] == [XK.XK_Control_L, XK.XK_Shift_L]
    final = presses[-1]
    assert final["state"] & X.ControlMask
    assert final["state"] & X.ShiftMask
    assert final["keysym"] in (XK.XK_t, XK.XK_T)
    assert len(presses) == 3


async def test_named_keys(xvfb, recorder, service):
    await service.run(xvfb.display, "key", {"keys": "Return"})
    await service.run(xvfb.display, "key", {"keys": "alt+F4"})
    presses = [ev["keysym"] for ev in recorder.drain() if ev["type"] == "KeyPress"]
    assert presses == [XK.XK_Return, XK.XK_Alt_L, XK.XK_F4]


async def test_unknown_key_names_it_and_sends_nothing(xvfb, recorder, service):
    with pytest.raises(OpError) as info:
        await service.run(xvfb.display, "key", {"keys": "ctrl+bogus_key"})
    assert info.value.code is ErrorCode.INVALID_ARGS
    assert "bogus_key" in info.value.message
    assert recorder.drain() == []


@pytest.mark.parametrize(
    ("action", "args", "field"),
    [
        ("click", {"x": WIDTH, "y": 10}, "x"),
        ("click", {"x": 10, "y": -1}, "y"),
        ("move", {"x": 10, "y": HEIGHT}, "y"),
        ("drag", {"x": 10, "y": 10, "to_x": 99999, "to_y": 10}, "to_x"),
        ("type", {"text": "a" * 10_001}, "text"),
        ("scroll", {"direction": "sideways"}, "direction"),
        ("click", {"x": 1, "y": 1, "button": "fourth"}, "button"),
        ("mouse_down", {"x": 1, "y": 1, "button": "fourth"}, "button"),
        ("mouse_up", {"button": "fourth"}, "button"),
        ("mouse_up", {"x": WIDTH, "y": 1}, "x"),
        ("key_down", {"keys": "ctrl+a"}, "keys"),
        ("key_down", {"keys": "bogus_key"}, "keys"),
        ("key_down", {}, "keys"),
        ("key_up", {"keys": ""}, "keys"),
    ],
)
async def test_invalid_args_send_nothing(xvfb, recorder, service, action, args, field):
    with pytest.raises(OpError) as info:
        await service.run(xvfb.display, action, args)
    assert info.value.code is ErrorCode.INVALID_ARGS
    assert info.value.details["field"] == field
    assert recorder.drain() == []


async def test_queries(xvfb, recorder, service):
    assert await service.run(xvfb.display, "screen_size", {}) == {"width": WIDTH, "height": HEIGHT}
    await service.run(xvfb.display, "move", {"x": 321, "y": 123})
    assert await service.run(xvfb.display, "mouse_position", {}) == {"x": 321, "y": 123}
    state = await service.run(xvfb.display, "keyboard_state", {})
    await service.run(xvfb.display, "key", {"keys": "numlock"})
    toggled = await service.run(xvfb.display, "keyboard_state", {})
    assert toggled["num_lock"] is not state["num_lock"]
    await service.run(xvfb.display, "key", {"keys": "numlock"})


def _send_fake_root_resize(disp: str, width: int, height: int) -> None:
    """What a program on the desktop could try: a synthetic ConfigureNotify of the root."""
    conn = display.Display(disp)
    try:
        root = conn.screen().root
        fake = event.ConfigureNotify(
            event=root,
            window=root,
            above_sibling=X.NONE,
            x=0,
            y=0,
            width=width,
            height=height,
            border_width=0,
            override=0,
        )
        root.send_event(fake, event_mask=X.StructureNotifyMask)
        conn.sync()
    finally:
        conn.close()


async def test_a_program_on_the_desktop_cannot_fake_the_screen_size(xvfb, recorder, service):
    # The size is tracked from the root's ConfigureNotify events; a synthetic one is ignored.
    assert await service.run(xvfb.display, "screen_size", {}) == {"width": WIDTH, "height": HEIGHT}
    _send_fake_root_resize(xvfb.display, 640, 480)
    assert await service.run(xvfb.display, "screen_size", {}) == {"width": WIDTH, "height": HEIGHT}
    shot = await service.screenshot(xvfb.display, {})
    assert (shot.width, shot.height) == (WIDTH, HEIGHT)
    # A point outside the fake size but on the real screen is still clickable.
    guard = await _guard_for(service, xvfb.display, (1000, 700))
    await service.run(xvfb.display, "click", {"x": 1000, "y": 700, "guard": guard})
    assert [(p["x"], p["y"]) for p in _presses(recorder.drain())] == [(1000, 700)]


def _xlib_capture(disp: str, width: int, height: int) -> np.ndarray:
    conn = display.Display(disp)
    try:
        raw = conn.screen().root.get_image(0, 0, width, height, X.ZPixmap, 0xFFFFFFFF)
        bgrx = np.frombuffer(raw.data, np.uint8).reshape(height, width, 4)
        return bgrx[:, :, 2::-1]
    finally:
        conn.close()


async def test_screenshot_matches_independent_capture(xvfb, recorder, service):
    recorder.paint(10, 10, 300, 200, 0xFF8800)
    recorder.paint(700, 500, 64, 64, 0x00AAFF)
    result = await service.run(xvfb.display, "screenshot", {"preview_max_width": 640})
    assert (result["width"], result["height"]) == (WIDTH, HEIGHT)
    assert result["coordinates"] == "full_resolution"
    assert (result["preview"]["width"], result["preview"]["height"]) == (640, 400)
    import base64

    png = Image.open(io.BytesIO(base64.b64decode(result["image"])))
    assert png.format == "PNG"
    assert png.size == (WIDTH, HEIGHT)
    expected = _xlib_capture(xvfb.display, WIDTH, HEIGHT)
    assert np.array_equal(np.asarray(png.convert("RGB")), expected)


@pytest.mark.parametrize("fmt", ["jpeg", "webp"])
async def test_lossy_formats(xvfb, recorder, service, fmt):
    shot = await service.screenshot(xvfb.display, {"format": fmt, "quality": 70})
    assert shot.image.format == fmt
    assert len(shot.rgb) == WIDTH * HEIGHT * 3
    decoded = Image.open(io.BytesIO(shot.image.data))
    assert decoded.size == (WIDTH, HEIGHT)


async def test_two_displays_do_not_interfere(xvfb, recorder, service):
    with private_xvfb(800, 600) as other:
        other_recorder = XRecorder(other.display, scaled(10.0))
        try:
            sizes = await asyncio.gather(
                service.run(xvfb.display, "screen_size", {}),
                service.run(other.display, "screen_size", {}),
            )
            expected = [{"width": WIDTH, "height": HEIGHT}, {"width": 800, "height": 600}]
            assert list(sizes) == expected
            mine_guard = await _guard_for(service, xvfb.display, (11, 12))
            their_guard = await _guard_for(service, other.display, (21, 22))
            await asyncio.gather(
                service.run(xvfb.display, "click", {"x": 11, "y": 12, "guard": mine_guard}),
                service.run(
                    other.display,
                    "click",
                    {"x": 21, "y": 22, "button": "right", "guard": their_guard},
                ),
                service.run(other.display, "type", {"text": "ß"}),
            )
            mine = _presses(recorder.drain())
            theirs = other_recorder.drain()
            assert [(p["x"], p["y"], p["button"]) for p in mine] == [(11, 12, 1)]
            assert [(p["x"], p["y"], p["button"]) for p in _presses(theirs)] == [(21, 22, 3)]
            assert [ev["char"] for ev in theirs if ev["type"] == "KeyPress"] == ["ß"]
        finally:
            other_recorder.stop()
            await service.release_display(other.display)


async def test_display_that_went_away_is_unavailable(service):
    with private_xvfb(640, 480) as short_lived:
        assert (await service.run(short_lived.display, "screen_size", {}))["width"] == 640
    with pytest.raises(OpError) as info:
        await service.run(short_lived.display, "screen_size", {})
    assert info.value.code is ErrorCode.UNAVAILABLE


async def test_unknown_action_and_closed_service(xvfb):
    svc = ScreenService()
    with pytest.raises(OpError) as info:
        await svc.run(xvfb.display, "teleport", {})
    assert info.value.code is ErrorCode.INVALID_ARGS
    await svc.aclose()
    with pytest.raises(OpError):
        await svc.run(xvfb.display, "screen_size", {})


# -- held buttons and keys (mouse_down/mouse_up, key_down/key_up) ------------------------------


def _kinds(events: list[dict[str, object]], *kinds: str) -> list[dict[str, object]]:
    return [ev for ev in events if ev["type"] in kinds]


def _x_state(disp: str) -> tuple[int, set[int]]:
    """The X server's own view, from an independent connection: the pointer's button mask
    and the keycodes that are down."""
    conn = display.Display(disp)
    try:
        mask = int(conn.screen().root.query_pointer().mask)
        keymap = conn.query_keymap()
        down = {
            byte * 8 + bit
            for byte, bits in enumerate(keymap)
            for bit in range(8)
            if bits & (1 << bit)
        }
        return mask, down
    finally:
        conn.close()


def _keycode(disp: str, keysym: int) -> int:
    conn = display.Display(disp)
    try:
        return int(conn.keysym_to_keycode(keysym))
    finally:
        conn.close()


async def test_mouse_down_then_up_presses_once_and_releases_once(xvfb, recorder, service):
    guard = await _guard_for(service, xvfb.display, (400, 300))
    result = await service.run(xvfb.display, "mouse_down", {"x": 400, "y": 300, "guard": guard})
    assert (result["x"], result["y"], result["button"]) == (400, 300, 1)
    assert result["guard"]["checked"] is True
    down = _kinds(recorder.drain(), "ButtonPress", "ButtonRelease")
    assert [(ev["type"], ev["x"], ev["y"], ev["button"]) for ev in down] == [
        ("ButtonPress", 400, 300, 1)
    ]
    assert _x_state(xvfb.display)[0] & X.Button1Mask  # still held between actions
    result = await service.run(xvfb.display, "mouse_up", {})
    assert (result["x"], result["y"], result["button"]) == (400, 300, 1)
    up = _kinds(recorder.drain(), "ButtonPress", "ButtonRelease")
    assert [(ev["type"], ev["x"], ev["y"], ev["button"]) for ev in up] == [
        ("ButtonRelease", 400, 300, 1)
    ]
    assert up[0]["state"] & X.Button1Mask  # the state before the release: it was held
    assert not _x_state(xvfb.display)[0] & X.Button1Mask


async def test_mouse_down_move_mouse_up_drags_with_the_button_held(xvfb, recorder, service):
    guard = await _guard_for(service, xvfb.display, (100, 100))
    args = {"x": 100, "y": 100, "button": "right", "guard": guard}
    await service.run(xvfb.display, "mouse_down", args)
    for x, y in ((150, 130), (220, 170), (300, 200)):
        await service.run(xvfb.display, "move", {"x": x, "y": y})
    await service.run(xvfb.display, "mouse_up", {"x": 320, "y": 210, "button": "right"})
    events = recorder.drain()
    kinds = [ev["type"] for ev in events]
    assert kinds.count("ButtonPress") == kinds.count("ButtonRelease") == 1
    press, release = kinds.index("ButtonPress"), kinds.index("ButtonRelease")
    assert (events[press]["x"], events[press]["y"], events[press]["button"]) == (100, 100, 3)
    assert (events[release]["x"], events[release]["y"], events[release]["button"]) == (
        320,
        210,
        3,
    )
    held = [ev for ev in events[press:release] if ev["type"] == "MotionNotify"]
    assert [(ev["x"], ev["y"]) for ev in held] == [(150, 130), (220, 170), (300, 200), (320, 210)]
    assert all(ev["state"] & X.Button3Mask for ev in held)


async def test_mouse_down_without_a_point_presses_where_the_pointer_is(xvfb, recorder, service):
    await service.run(xvfb.display, "move", {"x": 250, "y": 260})
    recorder.drain()
    elsewhere = await _guard_for(service, xvfb.display, (600, 500))
    with pytest.raises(OpError) as info:  # the guard was cut around another point
        await service.run(xvfb.display, "mouse_down", {"guard": elsewhere})
    assert info.value.details["field"] == "guard.rect"
    assert recorder.drain() == []
    guard = await _guard_for(service, xvfb.display, (250, 260))
    result = await service.run(xvfb.display, "mouse_down", {"guard": guard})
    assert (result["x"], result["y"]) == (250, 260)
    await service.run(xvfb.display, "mouse_up", {})
    events = _kinds(recorder.drain(), "ButtonPress", "ButtonRelease", "MotionNotify")
    assert [(ev["type"], ev["x"], ev["y"]) for ev in events] == [
        ("ButtonPress", 250, 260),
        ("ButtonRelease", 250, 260),
    ]


async def test_a_stale_mouse_down_sends_nothing(xvfb, recorder, service):
    guard = await _guard_for(service, xvfb.display, (400, 300))
    recorder.paint(360, 270, 80, 60, 0xFFFFFF)
    with pytest.raises(OpError) as info:
        await service.run(xvfb.display, "mouse_down", {"x": 400, "y": 300, "guard": guard})
    assert info.value.code is ErrorCode.STALE_SCREEN
    assert recorder.drain() == []
    assert not _x_state(xvfb.display)[0] & X.Button1Mask


async def test_key_down_shift_holds_it_across_actions(xvfb, recorder, service):
    held = await service.run(xvfb.display, "key_down", {"keys": "shift"})
    assert held["keys"] == "shift" and held["effect"] in ("changed", "no_visible_change")
    await service.run(xvfb.display, "key", {"keys": "a"})
    await service.run(xvfb.display, "type", {"text": "b"})
    assert _keycode(xvfb.display, XK.XK_Shift_L) in _x_state(xvfb.display)[1]
    await service.run(xvfb.display, "key_up", {"keys": "shift"})
    await service.run(xvfb.display, "key", {"keys": "c"})
    events = _kinds(recorder.drain(), "KeyPress", "KeyRelease")
    shift = [(ev["type"], ev["keysym"]) for ev in events if ev["keysym"] == XK.XK_Shift_L]
    assert shift == [("KeyPress", XK.XK_Shift_L), ("KeyRelease", XK.XK_Shift_L)]
    typed = [
        (ev["char"], bool(ev["state"] & X.ShiftMask))
        for ev in events
        if ev["type"] == "KeyPress" and ev["keysym"] != XK.XK_Shift_L
    ]
    assert typed == [("A", True), ("B", True), ("c", False)]
    assert _keycode(xvfb.display, XK.XK_Shift_L) not in _x_state(xvfb.display)[1]


async def test_a_key_on_the_shifted_level_is_held_with_shift(xvfb, recorder, service):
    await service.run(xvfb.display, "key_down", {"keys": "A"})
    assert _kinds(recorder.drain(), "KeyPress")[-1]["char"] == "A"
    await service.run(xvfb.display, "key_up", {"keys": "A"})
    # (a held letter repeats like a real key's: its releases may come more than once)
    released = {ev["keysym"] for ev in _kinds(recorder.drain(), "KeyRelease")}
    assert released == {XK.XK_Shift_L, XK.XK_A}
    assert _x_state(xvfb.display)[1] == set()


async def test_releasing_what_is_not_held_is_harmless(xvfb, recorder, service):
    await service.run(xvfb.display, "key_up", {"keys": "ctrl"})
    await service.run(xvfb.display, "mouse_up", {"button": "middle"})
    assert _kinds(recorder.drain(), "KeyPress", "ButtonPress") == []
    mask, down = _x_state(xvfb.display)
    assert down == set() and not mask & (X.Button1Mask | X.Button2Mask | X.Button3Mask)


async def _hold_some(service: ScreenService, disp: str) -> None:
    """ctrl, a character no keycode types (bound to a spare keycode) and the left button."""
    guard = await _guard_for(service, disp, (500, 400))
    await service.run(disp, "key_down", {"keys": "ctrl"})
    await service.run(disp, "key_down", {"keys": "☃"})
    await service.run(disp, "mouse_down", {"x": 500, "y": 400, "guard": guard})


HELD_RELEASES = {("KeyRelease", XK.XK_Control_L), ("KeyRelease", 0x1002603), ("ButtonRelease", 1)}


def _releases(events: list[dict[str, object]]) -> list[tuple[str, object]]:
    return [
        (str(ev["type"]), ev["keysym"] if ev["type"] == "KeyRelease" else ev["button"])
        for ev in _kinds(events, "KeyRelease", "ButtonRelease")
    ]


async def test_held_keys_and_buttons_are_released_when_the_display_is_released(
    xvfb, recorder, service
):
    await _hold_some(service, xvfb.display)
    presses = _kinds(recorder.drain(), "KeyPress", "ButtonPress")
    assert [ev.get("char") for ev in presses if ev["type"] == "KeyPress"][-1] == "☃"
    mask, down = _x_state(xvfb.display)
    assert mask & X.Button1Mask and len(down) == 2
    await service.release_display(xvfb.display)  # its desktop stopped or was replaced
    # (the held character repeats like a real key's: its releases may come more than once)
    assert set(_releases(recorder.drain())) == HELD_RELEASES
    mask, down = _x_state(xvfb.display)
    assert down == set() and not mask & X.Button1Mask
    conn = display.Display(xvfb.display)
    try:  # the spare keycode was given back
        assert conn.keysym_to_keycodes(0x1002603) == []
    finally:
        conn.close()


async def test_held_keys_and_buttons_are_released_when_the_service_closes(xvfb, recorder):
    svc = ScreenService()
    await _hold_some(svc, xvfb.display)
    recorder.drain()
    await svc.aclose()  # the relay (or host helper) shuts down
    assert set(_releases(recorder.drain())) == HELD_RELEASES
    mask, down = _x_state(xvfb.display)
    assert down == set() and not mask & X.Button1Mask


async def test_release_held_lets_go_and_keeps_the_connection(xvfb, recorder, service):
    await _hold_some(service, xvfb.display)
    recorder.drain()
    await service.release_held(xvfb.display)
    assert set(_releases(recorder.drain())) == HELD_RELEASES
    assert _x_state(xvfb.display)[1] == set()
    await service.release_held(xvfb.display)  # nothing held: nothing sent
    await service.release_held(":999")  # never opened: nothing to do
    assert recorder.drain() == []
    await service.run(xvfb.display, "key", {"keys": "x"})
    assert [ev["char"] for ev in _kinds(recorder.drain(), "KeyPress")] == ["x"]


async def test_the_pyautogui_backend_holds_and_releases_alike(xvfb, recorder):
    # pyautogui drives the screen of its own child process (the host helper's other backend).
    svc = ScreenService(input_backend="pyautogui")
    try:
        guard = await _guard_for(svc, xvfb.display, (300, 200))
        await svc.run(xvfb.display, "mouse_down", {"x": 300, "y": 200, "guard": guard})
        await svc.run(xvfb.display, "mouse_up", {"x": 340, "y": 220})
        await svc.run(xvfb.display, "key_down", {"keys": "shift"})
        await svc.run(xvfb.display, "key", {"keys": "a"})
        await svc.run(xvfb.display, "key_up", {"keys": "shift"})
        events = recorder.drain()
        buttons = _kinds(events, "ButtonPress", "ButtonRelease")
        assert [(ev["type"], ev["x"], ev["y"]) for ev in buttons] == [
            ("ButtonPress", 300, 200),
            ("ButtonRelease", 340, 220),
        ]
        assert [ev["char"] for ev in _kinds(events, "KeyPress") if ev["char"]] == ["A"]
        with pytest.raises(OpError) as info:  # a key pyautogui has no name for
            await svc.run(xvfb.display, "key_down", {"keys": "XF86AudioMicMute"})
        assert info.value.details["field"] == "keys"
        guard = await _guard_for(svc, xvfb.display, (500, 400))
        await svc.run(xvfb.display, "key_down", {"keys": "ctrl"})
        await svc.run(xvfb.display, "mouse_down", {"x": 500, "y": 400, "guard": guard})
        recorder.drain()
    finally:
        await svc.aclose()
    assert set(_releases(recorder.drain())) == {
        ("KeyRelease", XK.XK_Control_L),
        ("ButtonRelease", 1),
    }
    mask, down = _x_state(xvfb.display)
    assert down == set() and not mask & X.Button1Mask


async def test_a_display_whose_server_ended_answers_unavailable_and_is_let_go_cleanly():
    """A desktop stopped while its display's connection stays open (a recording's grab, the
    screen tool): a capture says ``unavailable``, never an internal error, and binding the
    display number to the next desktop closes that connection without failing the action."""
    service = ScreenService()
    try:
        with private_xvfb(320, 200) as first:
            await service.bind(first.display, "a" * 32)
            shot = await service.run_in_display(first.display, lambda c: c.grab_bgra())
            assert shot.shape[:2] == (200, 320)
            first.stop()
            with pytest.raises(OpError) as gone:
                await service.run_in_display(first.display, lambda c: c.grab_bgra())
            assert gone.value.code is ErrorCode.UNAVAILABLE, gone.value
            await service.bind(first.display, "b" * 32)  # the next desktop on that number
            with pytest.raises(OpError) as none_yet:
                await service.run_in_display(first.display, lambda c: c.grab_bgra())
            assert none_yet.value.code is ErrorCode.UNAVAILABLE, none_yet.value
    finally:
        service.close()
