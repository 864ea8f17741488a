"""Anthropic's and OpenAI's computer-use tools end to end: tool calls as the models emit them
against a real server, a real relay and real desktops at odd screen sizes.

What reached the desktop is read from the X server (the event recorder of
``tests/support/xrecorder.py``), not from the door under test.
"""

from __future__ import annotations

import base64
import contextlib
import io
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio
from PIL import Image

from server import admin
from server.computer_use.display import Display, default_size
from tests.integration.test_screen_tool import _xlib_capture
from tests.support import effect_app
from tests.support.processes import scaled
from tests.support.recorded import Desktop, recorded_desktops
from tests.support.sse import open_sse
from tests.support.stack import Seed, person_headers, wait_until
from wire.ids import RelayId

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

SIZES = {"main": (1366, 768), "wide": (1920, 1200), "big": (2560, 1440)}
SHIFT_KEYSYM = 0xFFE1


class Doors:
    def __init__(self, app: Any, url: str, seed: Seed, desktops: dict[str, Desktop]) -> None:
        self.app, self.url, self.seed, self.desktops = app, url, seed, desktops
        self.root = f"{url}/api/v1/conversations/{seed.conversation_id}/computer-use"

    def base(self, door: str, slot: str = "main") -> str:
        return f"{self.root}/{door}/relay-1/virtual/{slot}"

    async def request(
        self, method: str, url: str, token: str | None = None, **kwargs: Any
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or self.seed.api_token}"}
        async with httpx.AsyncClient(timeout=scaled(60)) as http:
            return await http.request(method, url, headers=headers, **kwargs)

    async def claude(
        self, slot: str = "main", display: str | None = None, **tool_input: Any
    ) -> dict[str, Any]:
        params = {"display": display} if display else {}
        response = await self.request(
            "POST", self.base("anthropic", slot), json=tool_input, params=params
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def gpt(self, slot: str = "main", **item: Any) -> dict[str, Any]:
        response = await self.request("POST", self.base("openai", slot), json=item)
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def doors(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Doors]:
    async with recorded_desktops(tmp_path_factory.mktemp("cu"), SIZES) as parts:
        app, url, seed, relay_id, desktops = parts
        for slot, desktop in desktops.items():
            row = {"desktop_session_id": desktop.session_id, "kind": "virtual", "slot": slot}
            await app.state.parts.inventory.record_started(RelayId(relay_id), row)
        yield Doors(app, url, seed, desktops)


def _recorder(doors: Doors, slot: str = "main") -> Any:
    recorder = doors.desktops[slot].recorder
    recorder.drain()
    return recorder


def _presses(events: list[dict[str, Any]], kind: str = "ButtonPress") -> list[tuple[int, ...]]:
    return [(ev["button"], ev["x"], ev["y"]) for ev in events if ev["type"] == kind]


def _image(result: dict[str, Any]) -> np.ndarray:
    blocks = [b for b in result["content"] if b["type"] == "image"]
    assert len(blocks) == 1, result
    source = blocks[0]["source"]
    assert (source["type"], source["media_type"]) == ("base64", "image/png")
    png = base64.b64decode(source["data"])
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def _text(result: dict[str, Any]) -> str:
    return " ".join(b["text"] for b in result["content"] if b["type"] == "text")


# -- Anthropic: the tool definition ------------------------------------------------------------


async def test_the_tool_definition_declares_the_scaled_display(doors):
    for slot, size in SIZES.items():
        response = await doors.request("GET", f"{doors.base('anthropic', slot)}/tool")
        assert response.status_code == 200, response.text
        width, height = default_size(size)
        assert response.json() == {
            "type": "computer_20251124",
            "name": "computer",
            "display_width_px": width,
            "display_height_px": height,
            "enable_zoom": True,
        }
        assert response.headers["x-anthropic-beta"] == "computer-use-2025-11-24"
        assert width * height <= 1_150_000 and max(width, height) <= 1568
        assert abs(width / height - size[0] / size[1]) < 0.01
    older = await doors.request(
        "GET",
        f"{doors.base('anthropic')}/tool",
        params={"version": "computer_20250124", "display": "1024x576"},
    )
    assert older.json() == {
        "type": "computer_20250124",
        "name": "computer",
        "display_width_px": 1024,
        "display_height_px": 576,
    }


# -- Anthropic: screenshots and the guard ------------------------------------------------------


async def test_a_screenshot_is_the_screen_at_the_declared_size(doors):
    result = await doors.claude(action="screenshot")
    assert result["is_error"] is False
    pixels = _image(result)
    desktop = doors.desktops["main"]
    assert np.array_equal(pixels, _xlib_capture(desktop.display, *SIZES["main"]))
    for slot in ("wide", "big"):
        shown = default_size(SIZES[slot])
        assert _image(await doors.claude(slot, action="screenshot")).shape == (*shown[::-1], 3)
    declared = await doors.claude("wide", display="1280x600", action="screenshot")
    assert _image(declared).shape == (600, 1280, 3)


async def test_a_click_before_any_screenshot_is_a_tool_error_and_clicks_nothing(doors):
    other = await _other_token(doors)
    recorder = _recorder(doors)
    response = await doors.request(
        "POST",
        doors.base("anthropic"),
        token=other,
        json={"action": "left_click", "coordinate": [10, 10]},
    )
    assert response.status_code == 200
    assert response.json()["is_error"] is True
    assert "take a screenshot" in _text(response.json())
    assert _presses(recorder.drain()) == []


async def _other_token(doors: Doors) -> str:
    """A second API token of the same user: a session of its own."""
    store = doors.app.state.parts.store
    return str((await admin.create_token(store, doors.seed.user["username"], "second"))["token"])


async def test_a_click_after_the_screen_changed_there_is_refused(doors):
    recorder = _recorder(doors)
    await doors.claude(action="screenshot")
    recorder.paint(600, 300, 40, 40, 0x00FF00)
    result = await doors.claude(action="left_click", coordinate=[620, 320])
    assert result["is_error"] is True
    assert "screen changed since your last screenshot" in _text(result)
    assert _presses(recorder.drain()) == []
    await doors.claude(action="screenshot")
    assert (await doors.claude(action="left_click", coordinate=[620, 320]))["is_error"] is False
    assert _presses(recorder.drain()) == [(1, 620, 320)]


# -- Anthropic: coordinates at odd ratios ---------------------------------------------------------


@pytest.mark.parametrize("slot", list(SIZES))
async def test_points_map_to_exact_screen_pixels(doors, slot):
    size = SIZES[slot]
    display = Display(size, default_size(size))
    recorder = _recorder(doors, slot)
    width, height = display.shown
    points = [
        (0, 0),
        (width - 1, height - 1),
        (width // 2, height // 2),
        (1, height - 2),
        (width - 2, 1),
        (333, 211),
        (width // 3, (2 * height) // 3),
    ]
    for x, y in points:
        await doors.claude(slot, action="screenshot")
        result = await doors.claude(slot, action="left_click", coordinate=[x, y])
        assert result["is_error"] is False, result
        assert _presses(recorder.drain()) == [(1, *display.to_screen(x, y))]
        position = await doors.claude(slot, action="cursor_position")
        assert _text(position) == f"X={x},Y={y}"
    if not display.scaled:
        assert display.to_screen(333, 211) == (333, 211)


# -- Anthropic: every action ---------------------------------------------------------------------


async def test_clicks_press_the_documented_buttons(doors):
    recorder = _recorder(doors)
    for action, expected in (
        ("right_click", [3]),
        ("middle_click", [2]),
        ("double_click", [1, 1]),
        ("triple_click", [1, 1, 1]),
    ):
        await doors.claude(action="screenshot")
        result = await doors.claude(action=action, coordinate=[200, 150])
        assert result["is_error"] is False, result
        assert _presses(recorder.drain()) == [(b, 200, 150) for b in expected]


async def test_a_click_with_text_holds_the_modifier(doors):
    recorder = _recorder(doors)
    await doors.claude(action="screenshot")
    await doors.claude(action="left_click", coordinate=[210, 160], text="shift")
    events = recorder.drain()
    kinds = [
        (ev["type"], ev.get("keysym") or ev.get("button"))
        for ev in events
        if ev["type"] in ("KeyPress", "KeyRelease", "ButtonPress")
    ]
    assert kinds == [("KeyPress", SHIFT_KEYSYM), ("ButtonPress", 1), ("KeyRelease", SHIFT_KEYSYM)]
    press = next(ev for ev in events if ev["type"] == "ButtonPress")
    assert press["state"] & 1  # ShiftMask


async def test_down_up_and_drag_press_and_release_where_asked(doors):
    recorder = _recorder(doors)
    await doors.claude(action="screenshot")
    await doors.claude(action="mouse_move", coordinate=[100, 100])
    await doors.claude(action="left_mouse_down")
    await doors.claude(action="mouse_move", coordinate=[140, 120])
    await doors.claude(action="left_mouse_up")
    events = recorder.drain()
    assert _presses(events) == [(1, 100, 100)]
    assert _presses(events, "ButtonRelease") == [(1, 140, 120)]
    await doors.claude(action="screenshot")
    result = await doors.claude(
        action="left_click_drag", start_coordinate=[50, 60], coordinate=[250, 260]
    )
    assert result["is_error"] is False, result
    events = recorder.drain()
    assert _presses(events) == [(1, 50, 60)]
    assert _presses(events, "ButtonRelease") == [(1, 250, 260)]


async def test_scroll_turns_the_wheel_at_the_point(doors):
    recorder = _recorder(doors)
    await doors.claude(
        action="scroll", coordinate=[300, 300], scroll_direction="down", scroll_amount=3
    )
    await doors.claude(action="scroll", scroll_direction="left", scroll_amount=1)
    assert _presses(recorder.drain()) == [(5, 300, 300)] * 3 + [(6, 300, 300)]


async def test_keys_and_text_reach_the_desktop(doors):
    recorder = _recorder(doors)
    await doors.claude(action="type", text="Grüße 東京")
    typed = "".join(ev.get("char") or "" for ev in recorder.drain() if ev["type"] == "KeyPress")
    assert typed == "Grüße 東京"
    await doors.claude(action="key", text="ctrl+a Return")
    presses = [ev["keysym"] for ev in recorder.drain() if ev["type"] == "KeyPress"]
    assert presses == [0xFFE3, ord("a"), 0xFF0D]
    await doors.claude(action="hold_key", text="shift", duration=0.3)
    events = [
        (ev["type"], ev["keysym"])
        for ev in recorder.drain()
        if ev["type"] in ("KeyPress", "KeyRelease")
    ]
    assert events[0] == ("KeyPress", SHIFT_KEYSYM) and events[-1] == ("KeyRelease", SHIFT_KEYSYM)


async def test_wait_and_zoom_answer_images(doors):
    waited = await doors.claude(action="wait", duration=0.2)
    assert _image(waited).shape == (768, 1366, 3)
    recorder = _recorder(doors)
    recorder.paint(700, 400, 10, 10, 0xFF0000)
    zoomed = _image(await doors.claude(action="zoom", region=[690, 390, 730, 420]))
    assert zoomed.shape[1] > 40 and zoomed.shape[1] % 40 == 0  # enlarged by a whole factor
    factor = zoomed.shape[1] // 40
    assert tuple(zoomed[10 * factor + 1, 10 * factor + 1]) == (255, 0, 0)


# -- Anthropic: input that does not fit the tool --------------------------------------------------


@pytest.mark.parametrize(
    ("tool_input", "field", "words"),
    [
        ({"action": "left_clik", "coordinate": [1, 1]}, "action", "Did you mean: left_click"),
        ({"coordinate": [1, 1]}, "action", "required"),
        ({"action": "left_click", "coordinate": [1366, 0]}, "coordinate", "outside the display"),
        ({"action": "mouse_move", "coordinate": ["1", 2]}, "coordinate", "two integers"),
        ({"action": "type", "text": "x" * 10_001}, "text", "at most"),
        ({"action": "scroll", "scroll_direction": "sideways"}, "scroll_direction", "up, down"),
        ({"action": "zoom", "region": [5, 5, 1, 1]}, "region", "greater"),
        ({"action": "left_click", "text": "banana"}, "text", "not a modifier"),
    ],
)
async def test_bad_tool_input_is_400_naming_the_field_in_both_shapes(
    doors, tool_input, field, words
):
    await doors.claude(action="screenshot")
    response = await doors.request("POST", doors.base("anthropic"), json=tool_input)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"]["code"] == "invalid_args" and body["error"]["field"] == field
    assert body["is_error"] is True and words in _text(body)


# -- OpenAI ------------------------------------------------------------------------------------


async def test_openai_tool_definition_and_a_screenshot_item(doors):
    tool = (await doors.request("GET", f"{doors.base('openai', 'wide')}/tool")).json()
    shown = default_size(SIZES["wide"])
    assert tool == {
        "type": "computer_use_preview",
        "display_width": shown[0],
        "display_height": shown[1],
        "environment": "linux",
    }
    item = await doors.gpt(
        "wide",
        type="computer_call",
        call_id="call_1",
        action={"type": "screenshot"},
        pending_safety_checks=[],
    )
    assert item["type"] == "computer_call_output" and item["call_id"] == "call_1"
    assert item["output"]["type"] == "computer_screenshot"
    assert "current_url" not in item["output"]  # no browser is the active window
    url = item["output"]["image_url"]
    assert url.startswith("data:image/png;base64,")
    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert image.size == shown


async def test_openai_actions_reach_the_desktop_mapped_from_the_display(doors):
    size = SIZES["big"]
    display = Display(size, default_size(size))
    recorder = _recorder(doors, "big")
    await doors.gpt("big", action={"type": "screenshot"})
    await doors.gpt("big", action={"type": "click", "button": "right", "x": 101, "y": 77})
    await doors.gpt("big", action={"type": "double_click", "x": 300, "y": 200})
    events = recorder.drain()
    here, there = display.to_screen(101, 77), display.to_screen(300, 200)
    assert _presses(events) == [(3, *here), (1, *there), (1, *there)]
    path = [{"x": 10, "y": 10}, {"x": 60, "y": 40}, {"x": 120, "y": 90}]
    await doors.gpt("big", actions=[{"type": "screenshot"}])
    result = await doors.gpt("big", action={"type": "drag", "path": path})
    assert "output" in result, result
    events = recorder.drain()
    assert _presses(events) == [(1, *display.to_screen(10, 10))]
    assert _presses(events, "ButtonRelease") == [(1, *display.to_screen(120, 90))]
    await doors.gpt(
        "big",
        actions=[
            {"type": "scroll", "x": 400, "y": 300, "scroll_x": 0, "scroll_y": 200},
            {"type": "keypress", "keys": ["CTRL", "A"]},
            {"type": "type", "text": "héllo"},
        ],
    )
    events = recorder.drain()
    assert _presses(events) == [(5, *display.to_screen(400, 300))] * 2
    keys = [ev["keysym"] for ev in events if ev["type"] == "KeyPress"]
    assert keys[:2] == [0xFFE3, ord("a")]
    assert "".join(ev.get("char") or "" for ev in events if ev["type"] == "KeyPress")[1:] == "héllo"


async def test_openai_pending_safety_checks_run_nothing(doors):
    recorder = _recorder(doors)
    await doors.gpt(action={"type": "screenshot"})
    check = {"id": "sc_1", "code": "malicious_instructions", "message": "careful"}
    item = await doors.gpt(
        type="computer_call",
        call_id="c2",
        pending_safety_checks=[check],
        action={"type": "click", "button": "left", "x": 5, "y": 5},
    )
    assert item["is_error"] is True and item["message"].startswith("approval_required: ")
    assert "sc_1 (malicious_instructions)" in item["message"]
    assert "a person must approve" in item["message"]
    assert item["approval_id"].startswith("apv_")
    assert _presses(recorder.drain()) == []


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"action": {"type": "clik", "x": 1, "y": 1}}, "action.type"),
        ({"action": {"type": "click", "x": 1}}, "action.y"),
        ({"action": {"type": "click", "x": 5000, "y": 1}}, "action"),
        ({"actions": []}, "actions"),
        ({"action": {"type": "keypress", "keys": "ctrl"}}, "action.keys"),
        ({"action": {"type": "type", "text": "x" * 10_001}}, "action.text"),
    ],
)
async def test_openai_bad_input_is_400_naming_the_field(doors, item, field):
    await doors.gpt(action={"type": "screenshot"})
    response = await doors.request("POST", doors.base("openai"), json=item)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["field"] == field


async def test_a_whole_tool_use_block_and_a_toolset_block_are_taken_as_they_come(doors):
    recorder = _recorder(doors)
    await doors.claude(type="tool_use", id="t1", name="computer", input={"action": "screenshot"})
    block = {
        "type": "tool_use",
        "id": "t2",
        "name": "right_click",
        "toolset_name": "computer",
        "input": {"coordinate": [222, 111]},
    }
    result = await doors.claude(**block)
    assert result["is_error"] is False, result
    assert _presses(recorder.drain()) == [(3, 222, 111)]


async def test_the_effect_verdict_reaches_the_model(doors):
    await doors.claude(action="screenshot")
    click = {"action": "left_click", "coordinate": [30, 30]}
    response = await doors.request("POST", doors.base("anthropic"), json=click)
    # The recorder's window covers the screen and never redraws: nothing changes there.
    assert response.headers["x-relaydesk-effect"] == "no_visible_change"
    assert _text(response.json()).startswith("effect: no_visible_change")


async def test_openai_click_holds_its_keys_and_the_computer_tool_is_offered(doors):
    recorder = _recorder(doors)
    await doors.gpt(action={"type": "screenshot"})
    await doors.gpt(action={"type": "click", "button": "left", "x": 90, "y": 90, "keys": ["SHIFT"]})
    events = [
        (e["type"], e.get("keysym") or e.get("button"))
        for e in recorder.drain()
        if e["type"] in ("KeyPress", "KeyRelease", "ButtonPress")
    ]
    assert events == [("KeyPress", SHIFT_KEYSYM), ("ButtonPress", 1), ("KeyRelease", SHIFT_KEYSYM)]
    tool = await doors.request("GET", f"{doors.base('openai')}/tool", params={"type": "computer"})
    assert tool.json() == {"type": "computer"}


async def test_a_takeover_is_a_tool_error_the_model_understands(doors):
    headers = await person_headers(doors.url, doors.seed)  # control is a person's
    session = doors.desktops["main"].session_id
    body = {"conversation_id": doors.seed.conversation_id, "desktop_session_id": session}

    async def control(name: str) -> None:
        async with httpx.AsyncClient(base_url=doors.url, timeout=scaled(30)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
        assert response.status_code == 200, response.text

    recorder = _recorder(doors)
    await doors.claude(action="screenshot")
    await doors.gpt(action={"type": "screenshot"})
    await control("desktop_take_control")
    try:
        claude = await doors.claude(action="left_click", coordinate=[50, 50])
        assert claude["is_error"] is True
        assert _text(claude).startswith("takeover_active: a person has taken over this desktop")
        gpt = await doors.gpt(action={"type": "click", "button": "left", "x": 50, "y": 50})
        assert gpt["is_error"] is True and gpt["message"].startswith("takeover_active")
    finally:
        await control("desktop_hand_back")
    assert _presses(recorder.drain()) == []


async def test_a_call_over_the_stream_cap_is_429_in_the_doors_shape(doors):
    """A tool call holds one stream slot while it runs: a user at the cap gets 429 naming it,
    in relaydesk's error and in each door's own shape, and nothing reaches the desktop."""
    store = doors.app.state.parts.store
    user = await admin.create_user(store, "capped")
    await store.add_member(doors.seed.conversation_id, user["user_id"], "write")
    token, _ = await store.create_api_token(user["user_id"], "capped")
    cap = doors.app.state.parts.streams.limits.per_principal
    events = f"/api/v1/events?conversation_id={doors.seed.conversation_id}"
    recorder = _recorder(doors)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with (
        httpx.AsyncClient(base_url=doors.url, limits=limits, timeout=scaled(30)) as client,
        contextlib.AsyncExitStack() as held,
    ):
        for _ in range(cap):
            stream = await held.enter_async_context(
                open_sse(client, events, {"Authorization": f"Bearer {token}"})
            )
            assert stream.response.status_code == 200
        claude = await doors.request(
            "POST", doors.base("anthropic"), token=token, json={"action": "screenshot"}
        )
        gpt = await doors.request(
            "POST", doors.base("openai"), token=token, json={"action": {"type": "screenshot"}}
        )
    for response in (claude, gpt):
        assert response.status_code == 429, response.text
        body = response.json()
        assert body["error"]["code"] == "limit_reached"
        assert "RELAYDESK_MAX_STREAMS_PER_PRINCIPAL" in body["error"]["message"]
        assert body["is_error"] is True
    assert _text(claude.json()).startswith("limit_reached: too many open streams")
    assert gpt.json()["message"].startswith("limit_reached: too many open streams")
    assert _presses(recorder.drain()) == []

    async def served() -> bool:  # once the closed streams gave their slots back
        body = {"action": {"type": "screenshot"}}
        again = await doors.request("POST", doors.base("openai"), token=token, json=body)
        return again.status_code == 200 and "output" in again.json()

    await wait_until(served, 10, "the same token served again")


async def test_both_doors_tell_whether_a_click_took_effect(doors):
    """A button that changes when clicked is ``changed``; the bare window is not; a pointer
    move is not judged."""
    desktop = doors.desktops["main"]  # shown as it is: display points are screen pixels
    with effect_app.shown(desktop.display, scaled(10), desktop.recorder.window_id) as origin:

        def at(point: tuple[int, int]) -> list[int]:
            return [origin[0] + point[0], origin[1] + point[1]]

        await doors.claude(action="screenshot")
        pressed = await doors.claude(action="left_click", coordinate=at(effect_app.BUTTON))
        assert _text(pressed).startswith("effect: changed (the screen changed where you acted")
        await doors.claude(action="screenshot")
        bare = await doors.claude(action="left_click", coordinate=at(effect_app.EMPTY))
        assert _text(bare).startswith("effect: no_visible_change")
        moved = await doors.claude(action="mouse_move", coordinate=at(effect_app.LABEL))
        assert _text(moved) == "done"

        await doors.gpt(action={"type": "screenshot"})
        x, y = at(effect_app.BUTTON)
        click = {"action": {"type": "click", "button": "left", "x": x, "y": y}}
        response = await doors.request("POST", doors.base("openai"), json=click)
        assert response.status_code == 200 and "output" in response.json(), response.text
        assert response.headers["x-relaydesk-effect"] == "changed"
        x, y = at(effect_app.EMPTY)
        move = {"action": {"type": "move", "x": x, "y": y}}
        response = await doors.request("POST", doors.base("openai"), json=move)
        assert response.headers["x-relaydesk-effect"] == "unverifiable"


async def _as_person(doors: Doors, name: str, **body: Any) -> httpx.Response:
    headers = await person_headers(doors.url, doors.seed)
    payload = {"conversation_id": doors.seed.conversation_id, **body}
    async with httpx.AsyncClient(base_url=doors.url, timeout=scaled(30)) as client:
        return await client.post(f"/api/v1/actions/{name}", json=payload, headers=headers)


async def _as_agent(doors: Doors, name: str, token: str, **body: Any) -> httpx.Response:
    payload = {"conversation_id": doors.seed.conversation_id, **body}
    return await doors.request("POST", f"{doors.url}/api/v1/actions/{name}", token, json=payload)


async def _event(stream: Any, name: str) -> dict[str, Any]:
    while True:
        event = await stream.next(timeout=10)
        if event.event == name:
            data: dict[str, Any] = event.data
            return data


async def test_safety_checks_run_once_a_person_approved_them(doors):
    """The checks become a request people see (an event, the listing); an agent cannot decide
    it; once a person approved it the same call runs and its output acknowledges them; a
    denied one stays refused; Stop revokes an approval."""
    store = doors.app.state.parts.store
    agent = await admin.create_user(store, "checked-agent")
    await store.add_member(doors.seed.conversation_id, agent["user_id"], "write")
    token, _ = await store.create_api_token(agent["user_id"], "checked")
    recorder = _recorder(doors)
    checks = [{"id": "sc_a1", "code": "irrelevant_domain", "message": "Look twice."}]
    call = {
        "type": "computer_call",
        "call_id": "call_a",
        "pending_safety_checks": checks,
        "action": {"type": "click", "button": "left", "x": 40, "y": 50},
    }

    async def send(item: dict[str, Any]) -> dict[str, Any]:
        response = await doors.request("POST", doors.base("openai"), token, json=item)
        assert response.status_code == 200, response.text
        return dict(response.json())

    events = f"/api/v1/events?conversation_id={doors.seed.conversation_id}"
    async with (
        httpx.AsyncClient(base_url=doors.url, timeout=scaled(30)) as client,
        open_sse(client, events, {"Authorization": f"Bearer {doors.seed.api_token}"}) as stream,
    ):
        await send({"action": {"type": "screenshot"}})
        refused = await send(call)
        assert refused["is_error"] is True and refused["message"].startswith("approval_required")
        approval_id = refused["approval_id"]
        asked = await _event(stream, "safety_checks_pending")
        assert asked["approval_id"] == approval_id and asked["agent"] == "checked-agent"
        # The event leaves out what the model saw (read members follow it too).
        assert asked["checks"] == [{"id": "sc_a1", "code": "irrelevant_domain"}]
        assert asked["state"] == "pending"
        assert (asked["relay"], asked["kind"], asked["slot"]) == ("relay-1", "virtual", "main")
        # Asked again before anyone decided: the same request, nothing runs.
        assert (await send(call))["approval_id"] == approval_id
        assert _presses(recorder.drain()) == []
        listed = await _as_agent(doors, "safety_checks_list", token)
        assert listed.status_code == 200, listed.text
        assert listed.json()["requests"][0]["approval_id"] == approval_id
        assert listed.json()["requests"][0]["checks"] == checks
        # An API token is an agent: it cannot approve, even its owner's person could.
        for who in (token, doors.seed.api_token):
            forbidden = await _as_agent(
                doors, "safety_checks_decide", who, approval_id=approval_id, decision="approve"
            )
            assert forbidden.status_code == 403, forbidden.text
            assert forbidden.json()["error"]["reason"] == "agent_principal"
        assert (await send(call))["is_error"] is True
        approved = await _as_person(
            doors, "safety_checks_decide", approval_id=approval_id, decision="approve"
        )
        assert approved.status_code == 200, approved.text
        assert approved.json()["request"]["state"] == "approved"
        decided = await _event(stream, "safety_checks_decided")
        assert decided["approval_id"] == approval_id and decided["state"] == "approved"
        assert decided["decided_by"] == doors.seed.user["username"]
    ran = await send(call)
    assert "is_error" not in ran and ran["acknowledged_safety_checks"] == checks
    assert ran["output"]["type"] == "computer_screenshot"
    # The builder sends them on as acknowledged: that runs too.
    await send({"action": {"type": "screenshot"}})
    onward = {**call, "pending_safety_checks": [], "acknowledged_safety_checks": checks}
    assert (await send(onward))["acknowledged_safety_checks"] == checks
    assert _presses(recorder.drain()) == [(1, 40, 50), (1, 40, 50)]
    twice = await _as_person(
        doors, "safety_checks_decide", approval_id=approval_id, decision="deny"
    )
    assert twice.status_code == 409, twice.text

    # Denied: stays refused, nothing runs.
    other = {**call, "pending_safety_checks": [{"id": "sc_b1", "code": "sensitive_domain"}]}
    pending = await send(other)
    denied = await _as_person(
        doors, "safety_checks_decide", approval_id=pending["approval_id"], decision="deny"
    )
    assert denied.json()["request"]["state"] == "denied"
    for _ in range(2):
        again = await send(other)
        assert again["is_error"] is True and again["message"].startswith("policy_denied: ")
        assert "denied the safety checks sc_b1" in again["message"]
    assert _presses(recorder.drain()) == []

    # Stop revokes an approval: the call is refused again, and a person is asked anew.
    third = {**call, "pending_safety_checks": [{"id": "sc_c1", "code": "sensitive_domain"}]}
    asked_third = await send(third)
    await _as_person(
        doors, "safety_checks_decide", approval_id=asked_third["approval_id"], decision="approve"
    )
    session = doors.desktops["main"].session_id
    stop = await _as_person(doors, "agent_stop", desktop_session_id=session, agent="checked-agent")
    assert stop.status_code == 200, stop.text
    assert stop.json()["safety_checks_revoked"] == 2  # this approval and the first one
    after = await send(third)
    assert after["is_error"] is True, after
    assert after["message"].startswith(("approval_required", "stopped_by_user"))
    assert _presses(recorder.drain()) == []
    states = {
        r["approval_id"]: r["state"]
        for r in (await _as_person(doors, "safety_checks_list")).json()["requests"]
    }
    assert states[pending["approval_id"]] == "denied"
    assert states[approval_id] == states[asked_third["approval_id"]] == "revoked"
