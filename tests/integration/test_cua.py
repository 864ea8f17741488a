"""Cua's computer-server protocol end to end: Cua's own client (``cua-computer`` from .venv-cua)
against a real server, a real relay and a real desktop; Cua's real server as the oracle.

What reached the desktop is read from the X server, not from the protocol under test: an event
recorder covering the screen (``tests/support/xrecorder.py``) and an independent capture.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio
from PIL import Image

from server import admin
from server.db.records import parse_role
from server.db.store import Store
from tests.integration.test_screen_tool import _xlib_capture
from tests.support import effect_app
from tests.support.cua import CuaClient, CuaServer, parse_data_line, shape
from tests.support.processes import scaled
from tests.support.recorded import Desktop, recorded_desktops
from tests.support.stack import Seed
from wire.ids import RelayId

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

SIZE = (1280, 800)
SECOND = (800, 600)
RETURN_KEYSYM = 0xFF0D
POINT = (300, 200)


class CuaStack:
    def __init__(self, app: Any, url: str, seed: Seed, desktop: Desktop) -> None:
        self.app, self.url, self.seed, self.desktop = app, url, seed, desktop
        self.second = desktop
        self.base = f"{url}/api/v1/conversations/{seed.conversation_id}/cua/relay-1/virtual/main"

    async def post(
        self, name: str, token: str | None = None, base: str | None = None, **params: Any
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or self.seed.api_token}"}
        body = {"command": name, "params": params}
        async with httpx.AsyncClient(timeout=scaled(30)) as http:
            return await http.post(f"{base or self.base}/cmd", json=body, headers=headers)

    async def get(self, path: str, **headers: str) -> httpx.Response:
        async with httpx.AsyncClient(timeout=scaled(30)) as http:
            return await http.get(f"{self.base}{path}", headers=headers)

    async def raw(self, content: bytes, headers: dict[str, str]) -> httpx.Response:
        async with httpx.AsyncClient(timeout=scaled(30)) as http:
            return await http.post(f"{self.base}/cmd", content=content, headers=headers)

    async def cmd(self, name: str, **params: Any) -> dict[str, Any]:
        response = await self.post(name, **params)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/plain")
        return parse_data_line(response.text)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CuaStack]:
    sizes = {"main": SIZE, "second": SECOND}
    async with recorded_desktops(tmp_path_factory.mktemp("cua"), sizes) as parts:
        app, url, seed, relay_id, desktops = parts
        for slot, desktop in desktops.items():  # the inventory knows what the relay started
            row = {"desktop_session_id": desktop.session_id, "kind": "virtual", "slot": slot}
            await app.state.parts.inventory.record_started(RelayId(relay_id), row)
        stack = CuaStack(app, url, seed, desktops["main"])
        stack.second = desktops["second"]
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(stack: CuaStack) -> AsyncIterator[CuaClient]:
    cua = await CuaClient.start(stack.base, stack.seed.api_token)
    yield cua
    cua.close()


@pytest.fixture
def recorder(stack: CuaStack) -> Any:
    stack.desktop.recorder.drain()
    return stack.desktop.recorder


def _presses(events: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    return [(ev["button"], ev["x"], ev["y"]) for ev in events if ev["type"] == "ButtonPress"]


def _typed(events: list[dict[str, Any]]) -> str:
    return "".join(ev.get("char") or "" for ev in events if ev["type"] == "KeyPress")


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


# -- Cua's client, over REST ----------------------------------------------------------------


async def test_cuas_client_gets_ready_and_reads_size_and_cursor(stack, client):
    assert await client.call("get_screen_size") == {"width": SIZE[0], "height": SIZE[1]}
    await client.call("move_cursor", 123, 77)
    assert await client.call("get_cursor_position") == {"x": 123, "y": 77}


async def test_a_screenshot_equals_an_independent_capture(stack, client):
    png = await client.image()
    assert png.startswith(b"\x89PNG")
    ours = _pixels(png)
    theirs = _xlib_capture(stack.desktop.display, *SIZE)
    assert ours.shape == (SIZE[1], SIZE[0], 3)
    assert np.array_equal(ours, theirs)


async def test_a_click_presses_once_at_the_point(stack, client, recorder):
    await client.image()
    await client.call("left_click", *POINT)
    assert _presses(recorder.drain()) == [(1, *POINT)]
    await client.call("right_click", 310, 210)
    assert _presses(recorder.drain()) == [(3, 310, 210)]
    await client.call("double_click", 320, 220)
    assert _presses(recorder.drain()) == [(1, 320, 220), (1, 320, 220)]


async def test_unicode_text_is_typed_exactly(stack, client, recorder):
    text = "Grüße, 東京 — ok"
    await client.call("type_text", text)
    assert _typed(recorder.drain()) == text


async def test_keys_and_hotkeys_in_cuas_names(stack, client, recorder):
    await client.call("press", "enter")
    await client.call("hotkey", "ctrl", "a")
    events = [ev for ev in recorder.drain() if ev["type"] == "KeyPress"]
    assert events[0]["keysym"] == RETURN_KEYSYM, events
    ctrl_a = events[-1]
    assert ctrl_a["keysym"] == ord("a") and ctrl_a["state"] & 0x4, events  # ControlMask


async def test_scrolling_turns_the_wheel(stack, client, recorder):
    await client.call("scroll_down", 2)
    await client.call("scroll_up", 1)
    assert [p[0] for p in _presses(recorder.drain())] == [5, 5, 4]


async def test_a_drag_holds_the_button_along_the_path(stack, client, recorder):
    await client.image()
    await client.call("move_cursor", 100, 100)
    await client.call("drag_to", 200, 150)
    events = recorder.drain()
    assert _presses(events) == [(1, 100, 100)]
    releases = [(ev["x"], ev["y"]) for ev in events if ev["type"] == "ButtonRelease"]
    assert releases == [(200, 150)]
    await client.image()
    await client.call("mouse_down", 400, 300)
    await client.call("move_cursor", 450, 320)
    await client.call("mouse_up", 450, 320)
    events = recorder.drain()
    assert _presses(events) == [(1, 400, 300)]
    moved = [ev for ev in events if ev["type"] == "MotionNotify"]
    assert moved and moved[-1]["state"] & 0x100  # Button1 held while moving


async def test_a_stale_click_is_refused_and_sends_nothing(stack, client, recorder):
    await client.image()
    stack.desktop.recorder.paint(POINT[0] - 20, POINT[1] - 20, 40, 40, 0xFF00FF)
    reply = await stack.cmd("left_click", x=POINT[0], y=POINT[1])
    assert reply["success"] is False
    assert reply["error"].startswith("stale_screen:"), reply
    assert "screenshot" in reply["error"]
    assert _presses(recorder.drain()) == []
    # Cua's client, told nothing by its left_click, gets the same refusal: still no input.
    await client.call("left_click", *POINT)
    assert _presses(recorder.drain()) == []
    await client.image()
    await client.call("left_click", *POINT)
    assert _presses(recorder.drain()) == [(1, *POINT)]


async def test_guard_off_on_the_base_url_clicks_without_a_screenshot(stack, recorder):
    cua = await CuaClient.start(stack.base + "?guard=off", stack.seed.api_token)
    try:
        stack.desktop.recorder.paint(0, 0, 64, 64, 0x00FF00)
        await cua.call("left_click", 500, 400)
        assert _presses(recorder.drain()) == [(1, 500, 400)]
    finally:
        cua.close()


async def test_a_base_url_names_its_slot(stack):
    second = stack.second
    second.recorder.drain()
    base = stack.base.replace("/virtual/main", "/virtual/second")
    cua = await CuaClient.start(base, stack.seed.api_token)
    try:
        assert await cua.call("get_screen_size") == {"width": SECOND[0], "height": SECOND[1]}
        assert (await cua.image()).startswith(b"\x89PNG")
        await cua.call("left_click", 50, 60)
        assert _presses(second.recorder.drain()) == [(1, 50, 60)]
        assert _presses(stack.desktop.recorder.drain()) == []
    finally:
        cua.close()


# -- the WebSocket fallback and Cua's header -----------------------------------------------


async def test_with_rest_failing_the_client_falls_back_to_the_websocket(stack, recorder):
    cua = await CuaClient.start(stack.base, stack.seed.api_token, mode="ws")
    try:
        assert await cua.call("get_screen_size") == {"width": SIZE[0], "height": SIZE[1]}
        capture = _xlib_capture(stack.desktop.display, *SIZE)
        assert np.array_equal(_pixels(await cua.image()), capture)
        await cua.call("left_click", 640, 400)
        await cua.call("type_text", "ws ✓")
        events = recorder.drain()
        assert _presses(events) == [(1, 640, 400)]
        assert _typed(events) == "ws ✓"
        await cua.call("hotkey", "ctrl", "a")
        await cua.call("scroll_down", 1)
        events = recorder.drain()
        keys = [ev for ev in events if ev["type"] == "KeyPress"]
        assert keys[-1]["keysym"] == ord("a") and keys[-1]["state"] & 0x4, keys
        assert [p[0] for p in _presses(events)] == [5]
        assert await cua.call("get_cursor_position") == {"x": 640, "y": 400}
        assert "WebSocket" in cua.log or "websocket" in cua.log.lower()
    finally:
        cua.close()


async def test_cuas_x_api_key_header_carries_the_token(stack):
    cua = await CuaClient.start(stack.base, stack.seed.api_token, mode="x-api-key")
    try:
        assert await cua.call("get_screen_size") == {"width": SIZE[0], "height": SIZE[1]}
    finally:
        cua.close()


# -- refusals and framing ----------------------------------------------------------------


async def test_tokens_conversations_and_roles_are_checked(stack, tmp_path):
    assert (await stack.post("get_screen_size", token="rdk_not_a_token")).status_code == 401
    response = await stack.raw(b'{"command": "version"}', {"Content-Type": "application/json"})
    assert response.status_code == 401 and "X-API-Key" in response.json()["error"]["message"]
    other = stack.base.replace(stack.seed.conversation_id, "c_" + "0" * 20)
    assert (await stack.post("version", base=other)).status_code == 404
    store = await Store.open(stack.seed.database_url)
    try:
        reader = await admin.create_user(store, "cua-reader")
        await store.add_member(stack.seed.conversation_id, reader["user_id"], parse_role("read"))
        token: str = (await admin.create_token(store, "cua-reader"))["token"]
    finally:
        await store.close()
    # A read-only member reaches the endpoint, but the screen (a write action) is not theirs.
    version = parse_data_line((await stack.post("version", token=token)).text)
    assert version["success"] is True, version
    for command, params in (("screenshot", {}), ("left_click", {"x": 5, "y": 5})):
        refused = parse_data_line((await stack.post(command, token=token, **params)).text)
        assert refused["success"] is False and refused["error"].startswith("forbidden:"), refused


async def test_unknown_commands_and_bad_input(stack):
    response = await stack.post("left_clik")
    assert response.status_code == 400
    assert "Did you mean" in response.json()["detail"] and "left_click" in response.json()["detail"]
    bad = await stack.cmd("left_click", x="here", y=3)
    assert bad["success"] is False and "x" in bad["error"]
    missing = await stack.cmd("type_text")
    assert missing == {"success": False, "error": "invalid_args: text: required"} or (
        missing["success"] is False and "text" in missing["error"]
    )
    headers = {
        "Authorization": f"Bearer {stack.seed.api_token}",
        "Content-Type": "application/json",
    }
    broken = await stack.raw(b'{"command": ', headers)
    assert broken.status_code == 400 and broken.json()["ok"] is False
    no_command = await stack.raw(b'{"params": {}}', headers)
    assert no_command.status_code == 400 and no_command.json()["error"]["field"] == "command"
    wrong_kind = stack.base.replace("/virtual/", "/physical/")
    assert (await stack.post("version", base=wrong_kind)).status_code == 400


async def test_status_and_commands_describe_the_desktop(stack):
    key = {"X-API-Key": stack.seed.api_token}
    status = (await stack.get("/status", **key)).json()
    assert status["status"] == "ok" and status["os_type"] == "linux"
    assert "screen" in status["features"] and "shell" not in status["features"]
    assert status["relaydesk"]["relay_connected"] is True
    listed = (await stack.get("/commands", **key)).json()
    for name in ("screenshot", "left_click", "get_accessibility_tree", "set_clipboard"):
        assert name in listed["commands"]
    assert "run_command" not in listed["commands"]
    assert listed["aliases"]["click"] == "left_click"


# -- the oracle: Cua's own server on the same desktop ----------------------------------------

ORACLE_COMMANDS: list[tuple[str, dict[str, Any]]] = [
    ("version", {}),
    ("get_screen_size", {}),
    ("get_cursor_position", {}),
    ("screenshot", {}),
    ("move_cursor", {"x": 30, "y": 40}),
    ("left_click", {"x": 30, "y": 40}),
    ("right_click", {"x": 30, "y": 40}),
    ("double_click", {"x": 30, "y": 40}),
    ("mouse_down", {"x": 30, "y": 40}),
    ("mouse_up", {"x": 30, "y": 40}),
    ("drag_to", {"x": 60, "y": 60}),
    ("type_text", {"text": "oracle"}),
    ("press_key", {"key": "esc"}),
    ("key_down", {"key": "shift"}),
    ("key_up", {"key": "shift"}),
    ("hotkey", {"keys": ["ctrl", "c"]}),
    ("scroll", {"x": 0, "y": -1}),
    ("scroll_up", {"clicks": 1}),
    ("scroll_down", {"clicks": 1}),
    ("scroll_direction", {"direction": "down", "clicks": 1}),
]

INPUT_COMMANDS = {name for name, _ in ORACLE_COMMANDS[4:]}


async def test_replies_have_the_keys_and_types_of_cuas_own_server(stack):
    oracle = await asyncio.to_thread(
        CuaServer, stack.desktop.display, str(stack.seed.relay_authority)
    )
    try:
        for command, params in ORACLE_COMMANDS:
            if command in ("left_click", "right_click", "double_click", "mouse_down", "drag_to"):
                await stack.cmd("screenshot")
            theirs = await asyncio.to_thread(oracle.cmd, command, **params)
            ours = await stack.cmd(command, **params)
            assert theirs["success"] is True, (command, theirs)
            assert ours["success"] is True, (command, ours)
            # Ours also says whether an input command took effect: a key Cua's client ignores.
            verdict = {k: ours.pop(k) for k in ("effect", "effect_ms") if k in ours}
            assert ("effect" in verdict) is (command in INPUT_COMMANDS), (command, verdict)
            assert shape(ours) == shape(theirs) or _same_version_shape(command, ours, theirs), (
                command,
                shape(ours),
                shape(theirs),
            )
    finally:
        oracle.stop()
        await stack.cmd("mouse_up")


def _same_version_shape(command: str, ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    return command == "version" and set(ours) == set(theirs)


def _decoded(reply: dict[str, Any]) -> bytes:
    return base64.b64decode(reply["image_data"])


async def test_the_screenshot_reply_decodes_like_cuas(stack):
    reply = await stack.cmd("screenshot")
    assert reply["format"] == "png"
    assert Image.open(io.BytesIO(_decoded(reply))).size == SIZE
    json.dumps(reply)  # plain JSON, as Cua's client expects


async def test_input_commands_say_whether_they_took_effect(stack):
    """A button that changes when clicked, the bare window, typing into a field, a move."""
    desktop = stack.desktop
    with effect_app.shown(desktop.display, scaled(10), desktop.recorder.window_id) as origin:

        def at(point: tuple[int, int]) -> dict[str, int]:
            return {"x": origin[0] + point[0], "y": origin[1] + point[1]}

        await stack.cmd("screenshot")
        pressed = await stack.cmd("left_click", **at(effect_app.BUTTON))
        assert pressed["success"] is True and pressed["effect"] == "changed", pressed
        assert pressed["effect_ms"] >= 0
        await stack.cmd("screenshot")
        bare = await stack.cmd("left_click", **at(effect_app.EMPTY))
        assert (bare["success"], bare["effect"]) == (True, "no_visible_change"), bare
        await stack.cmd("screenshot")
        await stack.cmd("left_click", **at(effect_app.FIELD))
        typed = await stack.cmd("type_text", text="abc")
        assert typed["effect"] == "changed", typed
        shift = await stack.cmd("press_key", key="shift")
        assert shift["effect"] == "no_visible_change", shift
        moved = await stack.cmd("move_cursor", **at(effect_app.LABEL))
        assert moved == {"success": True, "effect": "unverifiable"}
    # Commands that are not input answer Cua's keys only.
    assert "effect" not in await stack.cmd("get_cursor_position")
