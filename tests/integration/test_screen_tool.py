"""The screen tool end to end: in-process server, a real relay process, real desktops.

An X client on each desktop (``tests/support/xrecorder.py``) records every input event, so
"no input at all" is checked exactly (and without sleeping: it echoes a sentinel).
"""

from __future__ import annotations

import asyncio
import base64
import io
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from PIL import Image
from Xlib import XK, X, display

from tests.e2e.viewer_stack import viewer_stack
from tests.support.processes import scaled
from tests.support.recorded import Desktop, recorded_desktops
from tests.support.stack import Seed, person_headers
from wire.ids import RelayId

SHIFT_L = 0xFFE1

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

MAIN = (1280, 800)
SECOND = (800, 600)
TYPED = "Hello, wörld! ☃"


@dataclass
class Stack:
    app: Any
    url: str
    seed: Seed
    relay_id: str
    main: Desktop
    second: Desktop

    async def screen(self, **body: Any) -> tuple[int, dict[str, Any]]:
        """``POST /api/v1/actions/screen`` as the seeded user (an agent's bearer token)."""
        return await call_screen(self, body)


async def call_screen(stack: Stack, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    import httpx

    payload = {"conversation_id": stack.seed.conversation_id, **body}
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        response = await client.post("/api/v1/actions/screen", json=payload, headers=headers)
    return response.status_code, response.json()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    sizes = {"main": MAIN, "second": SECOND}
    async with recorded_desktops(tmp_path_factory.mktemp("screen"), sizes) as parts:
        app, url, seed, relay_id, desktops = parts
        yield Stack(app, url, seed, relay_id, desktops["main"], desktops["second"])


@pytest.fixture
def main(stack: Stack) -> Desktop:
    stack.main.recorder.drain()  # start every test from a quiet recorder
    return stack.main


def _presses(events: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    return [(ev["x"], ev["y"], ev["button"]) for ev in events if ev["type"] == "ButtonPress"]


def _xlib_capture(disp: str, width: int, height: int) -> np.ndarray:
    conn = display.Display(disp)
    try:
        raw = conn.screen().root.get_image(0, 0, width, height, X.ZPixmap, 0xFFFFFFFF)
        bgrx = np.frombuffer(raw.data, np.uint8).reshape(height, width, 4)
        return bgrx[:, :, 2::-1]
    finally:
        conn.close()


async def _shot(stack: Stack, **body: Any) -> dict[str, Any]:
    status, result = await stack.screen(action="screenshot", **body)
    assert status == 200, result
    return result


def _error(status: int, body: dict[str, Any], code: str, http: int) -> dict[str, Any]:
    assert (status, body["ok"], body["error"]["code"]) == (http, False, code), body
    error: dict[str, Any] = body["error"]
    return error


def _stale_figures(message: str) -> tuple[float, float]:
    """``(difference, threshold)`` as the stale_screen message states them."""
    match = re.search(r"difference ([0-9.]+) > threshold ([0-9.]+)", message)
    assert match, message
    return float(match[1]), float(match[2])


# -- screenshots -------------------------------------------------------------------------------


async def test_screenshot_is_full_resolution_png_matching_an_independent_capture(stack, main):
    main.recorder.paint(10, 10, 300, 200, 0xFF8800)
    shot = await _shot(stack)
    assert (shot["width"], shot["height"], shot["format"]) == (*MAIN, "png")
    assert shot["coordinates"] == "full_resolution"
    assert shot["desktop_session_id"] == main.session_id
    assert shot["screen_revision"].startswith("sr1.")
    assert "capture" not in shot and "display" not in shot
    png = Image.open(io.BytesIO(base64.b64decode(shot["image"])))
    assert (png.format, png.size) == ("PNG", MAIN)
    expected = _xlib_capture(main.display, *MAIN)
    assert np.array_equal(np.asarray(png.convert("RGB")), expected)


async def test_each_desktop_reports_its_own_geometry(stack):
    second = await _shot(stack, desktop_session_id=stack.second.session_id, format="jpeg")
    assert (second["width"], second["height"], second["format"]) == (*SECOND, "jpeg")
    assert second["desktop_session_id"] == stack.second.session_id
    status, size = await stack.screen(action="screen_size")
    assert (status, size["width"], size["height"]) == (200, *MAIN)


# -- the guard ---------------------------------------------------------------------------------


async def test_an_unchanged_region_click_presses_once_at_the_point(stack, main):
    shot = await _shot(stack)
    status, result = await stack.screen(
        action="click", x=400, y=300, expected_screen_revision=shot["screen_revision"]
    )
    assert status == 200, result
    assert (result["guard"]["checked"], result["guard"]["difference"]) == (True, 0.0)
    assert _presses(main.recorder.drain()) == [(400, 300, 1)]


async def test_a_caret_sized_change_near_the_target_still_clicks(stack, main):
    shot = await _shot(stack)
    main.recorder.paint(420, 290, 2, 16, 0x00FF00)  # a text caret appeared beside the target
    status, result = await stack.screen(
        action="click", x=400, y=300, expected_screen_revision=shot["screen_revision"]
    )
    assert status == 200, result
    # judged against the reference pixels: a difference, under the threshold
    assert 0 < result["guard"]["difference"] <= result["guard"]["threshold"]
    assert _presses(main.recorder.drain()) == [(400, 300, 1)]


async def test_a_change_under_the_target_is_stale_and_sends_nothing(stack, main):
    shot = await _shot(stack)
    main.recorder.paint(360, 270, 80, 60, 0xFFFFFF)  # a dialog appeared under the target
    status, body = await stack.screen(
        action="click", x=400, y=300, expected_screen_revision=shot["screen_revision"]
    )
    error = _error(status, body, "stale_screen", 409)
    difference, threshold = _stale_figures(error["message"])
    assert difference > threshold
    assert (error["difference"], error["threshold"]) == (difference, threshold)
    assert error["screen_revision"] == shot["screen_revision"]
    assert "take a new screenshot" in error["message"]
    assert main.recorder.drain() == []
    # a double click and a drag from there are refused the same way
    for extra in (
        {"action": "double_click", "x": 400, "y": 300},
        {"action": "drag", "from": {"x": 400, "y": 300}, "to": {"x": 600, "y": 500}},
    ):
        status, body = await stack.screen(**extra, expected_screen_revision=shot["screen_revision"])
        _error(status, body, "stale_screen", 409)
    assert main.recorder.drain() == []


async def test_a_change_elsewhere_does_not_block(stack, main):
    shot = await _shot(stack)
    main.recorder.paint(900, 600, 200, 150, 0xFF0000)
    status, result = await stack.screen(
        action="double_click", x=400, y=300, expected_screen_revision=shot["screen_revision"]
    )
    assert status == 200, result
    assert _presses(main.recorder.drain()) == [(400, 300, 1), (400, 300, 1)]


async def test_target_bbox_guards_the_box_and_must_contain_the_point(stack, main):
    shot = await _shot(stack)
    revision = shot["screen_revision"]
    bbox = {"x": 500, "y": 500, "width": 200, "height": 40}
    status, body = await stack.screen(
        action="click", x=450, y=510, target_bbox=bbox, expected_screen_revision=revision
    )
    assert _error(status, body, "invalid_args", 400)["field"] == "target_bbox"
    # the right half of the box changes: outside the default 128x96 crop around the point
    main.recorder.paint(600, 500, 100, 40, 0x000000)
    status, body = await stack.screen(
        action="click", x=520, y=520, target_bbox=bbox, expected_screen_revision=revision
    )
    _error(status, body, "stale_screen", 409)
    assert main.recorder.drain() == []
    status, body = await stack.screen(
        action="click", x=520, y=520, expected_screen_revision=revision
    )
    assert status == 200, body
    assert _presses(main.recorder.drain()) == [(520, 520, 1)]


async def test_a_click_chosen_on_a_half_size_preview_lands_where_intended(stack, main):
    main.recorder.paint(0, 0, *MAIN, 0x336699)
    main.recorder.paint(1000, 620, 40, 40, 0x00FF00)  # the "button" the agent wants
    shot = await _shot(stack, preview_max_width=MAIN[0] // 2)
    preview = shot["preview"]
    assert (preview["width"], preview["height"]) == (MAIN[0] // 2, MAIN[1] // 2)
    small = np.asarray(Image.open(io.BytesIO(base64.b64decode(preview["image"]))).convert("RGB"))
    ys, xs = np.nonzero((small[:, :, 1] > 200) & (small[:, :, 0] < 60))
    px, py = int(xs.mean()), int(ys.mean())  # the centre of the button on the preview
    # documented: coordinates are full resolution, so scale preview pixels by width ratio
    scale = shot["width"] / preview["width"]
    x, y = round(px * scale), round(py * scale)
    status, result = await stack.screen(
        action="click", x=x, y=y, expected_screen_revision=shot["screen_revision"]
    )
    assert status == 200, result
    [(cx, cy, _)] = _presses(main.recorder.drain())
    assert 1000 <= cx < 1040 and 620 <= cy < 660
    assert abs(cx - 1020) <= 2 and abs(cy - 640) <= 2


# -- refused revisions -------------------------------------------------------------------------


async def test_a_missing_revision_is_refused(stack, main):
    for body in (
        {"action": "click", "x": 5, "y": 5},
        {"action": "drag", "from": {"x": 5, "y": 5}, "to": {"x": 50, "y": 50}},
    ):
        status, result = await stack.screen(**body)
        _error(status, result, "missing_screen_revision", 400)
    assert main.recorder.drain() == []


async def test_a_revision_from_another_desktop_is_refused(stack, main):
    other = await _shot(stack, desktop_session_id=stack.second.session_id)
    stack.second.recorder.drain()
    revision = other["screen_revision"]
    # explicitly naming the main desktop with the second desktop's revision
    status, body = await stack.screen(
        action="click",
        x=100,
        y=100,
        desktop_session_id=main.session_id,
        expected_screen_revision=revision,
    )
    _error(status, body, "revision_mismatch", 409)
    # the default desktop (main) with the second desktop's revision: refused by the relay
    status, body = await stack.screen(
        action="click", x=100, y=100, expected_screen_revision=revision
    )
    _error(status, body, "revision_mismatch", 409)
    assert main.recorder.drain() == []
    assert stack.second.recorder.drain() == []


async def test_forged_and_expired_revisions_are_refused(stack, main):
    shot = await _shot(stack)
    prefix, payload, signature = shot["screen_revision"].split(".")
    forged = f"{prefix}.{payload}.{'A' * len(signature)}"
    status, body = await stack.screen(action="click", x=10, y=10, expected_screen_revision=forged)
    _error(status, body, "revision_mismatch", 409)
    status, body = await stack.screen(
        action="click", x=10, y=10, expected_screen_revision="made-up"
    )
    _error(status, body, "invalid_args", 400)
    revisions = stack.app.state.parts.screen.revisions
    real_clock = revisions.clock
    revisions.clock = lambda: real_clock() + revisions.ttl_s + 1
    try:
        status, body = await stack.screen(
            action="click", x=10, y=10, expected_screen_revision=shot["screen_revision"]
        )
    finally:
        revisions.clock = real_clock
    _error(status, body, "revision_expired", 409)
    assert main.recorder.drain() == []


async def test_coordinates_outside_the_screen_are_refused_not_clamped(stack, main):
    shot = await _shot(stack)
    revision = shot["screen_revision"]
    for body, field in (
        ({"action": "click", "x": MAIN[0], "y": 10}, "x"),
        ({"action": "click", "x": 10, "y": -1}, "y"),
        ({"action": "drag", "from": {"x": 5, "y": 5}, "to": {"x": 5, "y": 9999}}, "to.y"),
    ):
        status, result = await stack.screen(**body, expected_screen_revision=revision)
        assert _error(status, result, "invalid_args", 400)["field"] == field
    status, result = await stack.screen(action="move", x=10, y=MAIN[1])
    assert _error(status, result, "invalid_args", 400)["field"] == "y"
    assert main.recorder.drain() == []


# -- keyboard ----------------------------------------------------------------------------------


async def test_type_arrives_exactly(stack, main):
    status, result = await stack.screen(action="type", text=TYPED)
    assert (status, result["typed"]) == (200, len(TYPED))
    presses = [ev for ev in main.recorder.drain() if ev["type"] == "KeyPress"]
    assert "".join(ev["char"] for ev in presses if ev["char"]) == TYPED


async def test_a_chord_arrives_as_one_chord(stack, main):
    status, _ = await stack.screen(action="key", key="ctrl+shift+t")
    assert status == 200
    presses = [ev for ev in main.recorder.drain() if ev["type"] == "KeyPress"]
    assert [ev["keysym"] for ev in presses[:2]] == [XK.XK_Control_L, XK.XK_Shift_L]
    assert len(presses) == 3
    assert presses[2]["state"] & X.ControlMask and presses[2]["state"] & X.ShiftMask
    assert presses[2]["keysym"] in (XK.XK_t, XK.XK_T)


# -- held buttons and keys ----------------------------------------------------------------------


def _of(events: list[dict[str, Any]], kind: str) -> list[tuple[int, int, int]]:
    return [(ev["x"], ev["y"], ev["button"]) for ev in events if ev["type"] == kind]


async def test_mouse_down_then_mouse_up_press_and_release_once(stack, main):
    shot = await _shot(stack)
    status, result = await stack.screen(
        action="mouse_down", x=400, y=300, expected_screen_revision=shot["screen_revision"]
    )
    assert status == 200, result
    assert result["guard"]["checked"] is True
    events = main.recorder.drain()
    assert (_presses(events), _of(events, "ButtonRelease")) == ([(400, 300, 1)], [])
    status, result = await stack.screen(action="mouse_up")
    assert (status, result["x"], result["y"]) == (200, 400, 300), result
    events = main.recorder.drain()
    assert (_presses(events), _of(events, "ButtonRelease")) == ([], [(400, 300, 1)])


async def test_mouse_down_move_and_mouse_up_drag_with_the_button_held(stack, main):
    shot = await _shot(stack)
    status, _ = await stack.screen(
        action="mouse_down", x=200, y=200, expected_screen_revision=shot["screen_revision"]
    )
    assert status == 200
    for x, y in ((240, 220), (300, 250), (360, 280)):
        assert (await stack.screen(action="move", x=x, y=y))[0] == 200
    assert (await stack.screen(action="mouse_up", x=400, y=300))[0] == 200
    events = main.recorder.drain()
    kinds = [ev["type"] for ev in events]
    assert (_presses(events), _of(events, "ButtonRelease")) == ([(200, 200, 1)], [(400, 300, 1)])
    held = events[kinds.index("ButtonPress") : kinds.index("ButtonRelease")]
    moves = [
        (ev["x"], ev["y"], ev["state"] & X.Button1Mask)
        for ev in held
        if ev["type"] == "MotionNotify"
    ]
    assert [(x, y) for x, y, _ in moves] == [(240, 220), (300, 250), (360, 280), (400, 300)]
    assert all(mask for _, _, mask in moves)


async def test_mouse_down_without_a_point_presses_where_the_pointer_is(stack, main):
    assert (await stack.screen(action="move", x=321, y=234))[0] == 200
    shot = await _shot(stack)
    main.recorder.drain()
    status, result = await stack.screen(
        action="mouse_down", expected_screen_revision=shot["screen_revision"]
    )
    assert (status, result["x"], result["y"]) == (200, 321, 234), result
    assert (await stack.screen(action="mouse_up"))[0] == 200
    events = main.recorder.drain()
    assert (_presses(events), _of(events, "ButtonRelease")) == ([(321, 234, 1)], [(321, 234, 1)])


async def test_a_stale_mouse_down_sends_nothing(stack, main):
    assert (await stack.screen(action="move", x=400, y=300))[0] == 200
    shot = await _shot(stack)
    main.recorder.paint(360, 270, 80, 60, 0xFFFFFF)  # a dialog appeared under the target
    main.recorder.drain()
    revision = shot["screen_revision"]
    status, body = await stack.screen(
        action="mouse_down", x=400, y=300, expected_screen_revision=revision
    )
    _error(status, body, "stale_screen", 409)
    status, body = await stack.screen(action="mouse_down", expected_screen_revision=revision)
    _error(status, body, "stale_screen", 409)  # the pointer is there too
    status, body = await stack.screen(action="mouse_down", x=400, y=300)
    _error(status, body, "missing_screen_revision", 400)
    assert main.recorder.drain() == []


async def test_key_down_shift_holds_it_for_the_keys_in_between(stack, main):
    for body in (
        {"action": "key_down", "key": "shift"},
        {"action": "key", "key": "a"},
        {"action": "type", "text": "b"},
        {"action": "key_up", "key": "shift"},
        {"action": "key", "key": "a"},
    ):
        status, result = await stack.screen(**body)
        assert status == 200, result
    events = main.recorder.drain()
    shift = [ev["type"] for ev in events if ev["keysym"] == XK.XK_Shift_L]
    assert shift == ["KeyPress", "KeyRelease"]
    typed = [ev["char"] for ev in events if ev["type"] == "KeyPress" and ev["char"]]
    assert typed == ["A", "B", "a"]
    rows = await stack.app.state.parts.store.list_audit(relay_id=stack.relay_id)
    held = [row for row in rows if row.op in ("screen.key_down", "screen.key_up")]
    assert [row.details["key_count"] for row in held[-2:]] == [1, 1]
    assert "shift" not in repr([row.details for row in held])  # counted, never named


async def test_held_input_waits_while_a_person_is_in_control(stack, main):
    import httpx

    headers = await person_headers(stack.url, stack.seed)  # control is a person's
    body = {"conversation_id": stack.seed.conversation_id, "desktop_session_id": main.session_id}

    async def control(name: str) -> None:
        async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
        assert response.status_code == 200, response.text

    # The gate knows the desktops the inventory knows (this module started them directly).
    row = {"desktop_session_id": main.session_id, "kind": "virtual", "slot": "main"}
    await stack.app.state.parts.inventory.record_started(RelayId(stack.relay_id), row)
    shot = await _shot(stack)
    await control("desktop_take_control")
    try:
        for action in (
            {
                "action": "mouse_down",
                "x": 10,
                "y": 10,
                "expected_screen_revision": shot["screen_revision"],
            },
            {"action": "mouse_up"},
            {"action": "key_down", "key": "ctrl"},
            {"action": "key_up", "key": "ctrl"},
        ):
            status, result = await stack.screen(**action)
            _error(status, result, "takeover_active", 423)
    finally:
        await control("desktop_hand_back")
    assert main.recorder.drain() == []


async def test_stop_and_a_takeover_let_go_of_what_the_agent_held(stack, main, monkeypatch):
    import dataclasses

    import httpx

    # A short cooldown after Stop (a setting; 30 s by default), so the tests after this act.
    control_service = stack.app.state.parts.control
    policies = control_service.policies
    short = dataclasses.replace(policies.default, regrant_cooldown_s=0.5)
    monkeypatch.setattr(control_service, "policies", dataclasses.replace(policies, default=short))

    headers = await person_headers(stack.url, stack.seed)  # control is a person's
    body = {"conversation_id": stack.seed.conversation_id, "desktop_session_id": main.session_id}

    async def control(name: str) -> None:
        async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
        assert response.status_code == 200, response.text

    def released(events: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
        buttons = [ev["button"] for ev in events if ev["type"] == "ButtonRelease"]
        keys = [ev["keysym"] for ev in events if ev["type"] == "KeyRelease"]
        return buttons, keys

    row = {"desktop_session_id": main.session_id, "kind": "virtual", "slot": "main"}
    await stack.app.state.parts.inventory.record_started(RelayId(stack.relay_id), row)
    for press_on, let_go in (("desktop_take_control", "desktop_hand_back"), ("agent_stop", None)):
        shot = await _shot(stack)
        revision = shot["screen_revision"]
        status, result = await stack.screen(
            action="mouse_down", x=40, y=40, expected_screen_revision=revision
        )
        assert status == 200, result
        status, result = await stack.screen(action="key_down", key="shift")
        assert status == 200, result
        main.recorder.drain()
        await control(press_on)
        try:
            events: list[dict[str, Any]] = []
            for _ in range(50):  # the release is sent beside the answer, not before it
                events += main.recorder.drain()
                if released(events) == ([1], [SHIFT_L]):
                    break
                await asyncio.sleep(0.1)
            assert released(events) == ([1], [SHIFT_L]), (press_on, events)
        finally:
            if let_go:
                await control(let_go)
    await asyncio.sleep(1)  # the Stop's cooldown ends before the next test acts


async def test_the_audit_trail_has_shapes_but_never_typed_text(stack, main):
    await stack.screen(action="type", text="hunter2-secret")
    main.recorder.drain()
    rows = await stack.app.state.parts.store.list_audit(relay_id=stack.relay_id)
    screen_rows = [row for row in rows if row.op.startswith("screen.")]
    assert {"screen.screenshot", "screen.click", "screen.type", "screen.key"} <= {
        row.op for row in screen_rows
    }
    dumped = repr([(row.details, row.reason) for row in rows])
    assert "hunter2-secret" not in dumped and TYPED not in dumped
    assert "ctrl" not in dumped  # keys are counted, never named
    typed = [row for row in screen_rows if row.op == "screen.type"][-1]
    assert typed.details == {"action": "type", "local": False, "text_length": 14, "guarded": False}
    stale = [row for row in screen_rows if row.reason == "stale_screen"]
    assert stale and all("image" not in (row.details or {}) for row in screen_rows)


async def test_a_relay_without_a_host_helper_refuses_the_local_screen(stack):
    status, body = await stack.screen(action="screenshot", local=True)
    error = _error(status, body, "unavailable", 503)
    assert "host helper" in error["message"]


# -- a desktop that stopped (last: it stops the second desktop) ---------------------------------


async def test_a_desktop_that_stopped_after_the_screenshot_gets_no_input(stack):
    second = stack.second
    shot = await _shot(stack, desktop_session_id=second.session_id)
    second.recorder.stop()
    second.stopped = True
    stop = {"kind": "virtual", "slot": "second", "desktop_session_id": second.session_id}
    await stack.app.state.parts.relays.request(
        RelayId(stack.relay_id), "desktop.stop", stop, scaled(20)
    )
    status, body = await stack.screen(
        action="click",
        x=10,
        y=10,
        desktop_session_id=second.session_id,
        expected_screen_revision=shot["screen_revision"],
    )
    _error(status, body, "not_running", 409)


async def test_a_screenshot_over_the_servers_text_limit_is_refused_and_the_relay_stays(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    import httpx

    limit = {"max_text_frame": 8 * 1024}  # a painted 1280x800 PNG is larger
    async with viewer_stack(tmp_path_factory.mktemp("text-limit"), server_settings=limit) as small:
        await small.start_desktop(paint=True)
        link = small.relays.get(small.relay_id)
        headers = {"Authorization": f"Bearer {small.seed.api_token}"}
        body = {"conversation_id": small.seed.conversation_id, "action": "screenshot"}
        async with httpx.AsyncClient(base_url=small.url, timeout=scaled(30)) as client:
            response = await client.post("/api/v1/actions/screen", json=body, headers=headers)
            size = {**body, "action": "screen_size"}
            after = await client.post("/api/v1/actions/screen", json=size, headers=headers)
        assert response.status_code == 409, response.text[:300]
        error = response.json()["error"]
        assert error["code"] == "limit_reached"
        assert "over the 8,192-byte message limit" in error["message"]
        assert "RELAYDESK_MAX_TEXT_FRAME" in error["message"]
        # The relay's connection (and whatever else it carries) was never dropped.
        assert small.relays.get(small.relay_id) is link
        assert after.status_code == 200, after.text[:300]
        assert (after.json()["width"], after.json()["height"]) == (1280, 800)
