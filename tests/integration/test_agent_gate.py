"""An agent (an API token) never gets around Take control and Stop, on a real desktop.

The server, a real relay and real desktops (Xvfb, x11vnc); the agent is user ``bot`` with an
API token and the ``write`` role, the person is alice signed in to the web app. An X client on
the desktop records every key that reaches it.

- The agent's viewer capability (``desktop_attach``) is view only: its RFB key, pointer and
  clipboard messages, sent by a real RFB client through the viewer WebSocket, type nothing —
  during a held takeover, after hand back, after Stop — and never put the desktop under
  ``person`` control; a person's viewer still types.
- ``desktop_launch``, ``desktop_stop_confirm`` and ``desktop_start`` by the agent pass the
  gate: ``takeover_active`` while a person holds the desktop, ``stopped_by_user`` after Stop.
- Take control, hand back and Stop are for people: the agent's token gets ``403 forbidden``.
- Stop's cooldown is kept where the agent acts: a desktop stopped and started again in the
  same slot is still refused to the stopped agent.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import pytest_asyncio

from benchmarks.rfb import RFBClient
from server import admin
from tests.e2e.viewer_stack import Desktop, ViewerStack, viewer_stack
from tests.support.processes import scaled
from tests.support.xrecorder import XRecorder

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

COOLDOWN_S = 120.0  # RELAYDESK_AGENT_REGRANT_COOLDOWN_S: longer than this module runs
KEYSYM_Q, KEYSYM_P = 0x71, 0x70


class Caller:
    """Someone calling the typed actions: the agent's API token, or alice's web session."""

    def __init__(self, stack: ViewerStack, headers: dict[str, str]) -> None:
        self.stack = stack
        self.headers = headers

    async def call(self, name: str, **args: Any) -> tuple[int, Any]:
        body = {"conversation_id": self.stack.seed.conversation_id, **args}
        async with httpx.AsyncClient(base_url=self.stack.url, timeout=scaled(60)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=body, headers=self.headers)
        return response.status_code, response.json()

    async def ok(self, name: str, **args: Any) -> Any:
        status, body = await self.call(name, **args)
        assert status == 200, (name, body)
        return body

    async def refused(self, name: str, **args: Any) -> tuple[int, str]:
        status, body = await self.call(name, **args)
        return status, body["error"]["code"] if status != 200 else "ok"

    async def say(self, text: str) -> Any:
        url = f"/api/v1/conversations/{self.stack.seed.conversation_id}/messages"
        async with httpx.AsyncClient(base_url=self.stack.url, timeout=scaled(60)) as client:
            response = await client.post(url, json={"text": text}, headers=self.headers)
        assert response.status_code in (200, 201), response.text
        return response.json()["reply"]

    async def control(self, **target: Any) -> dict[str, Any]:
        state: dict[str, Any] = (await self.ok("desktop_control", **target))["control"]
        return state


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    settings = {"agent_regrant_cooldown_s": COOLDOWN_S}
    async with viewer_stack(tmp_path_factory.mktemp("gate"), server_settings=settings) as s:
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def agent(stack: ViewerStack) -> Caller:
    store = stack.app.state.parts.store
    user = await admin.create_user(store, "bot")
    await store.add_member(stack.seed.conversation_id, user["user_id"], "write")
    token = (await admin.create_token(store, "bot"))["token"]
    return Caller(stack, {"Authorization": f"Bearer {token}"})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def person(stack: ViewerStack) -> Caller:
    return Caller(stack, await stack.person_headers())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def desktop(stack: ViewerStack) -> Desktop:
    return await stack.start_desktop()


@pytest_asyncio.fixture(loop_scope="module")
async def recorder(desktop: Desktop) -> AsyncIterator[XRecorder]:
    recorder = await asyncio.to_thread(XRecorder, desktop.display, scaled(10))
    try:
        yield recorder
    finally:
        await asyncio.to_thread(recorder.stop)


def key(keysym: int) -> bytes:
    return struct.pack(">BBHI", 4, 1, 0, keysym) + struct.pack(">BBHI", 4, 0, 0, keysym)


def everything_an_agent_could_send() -> bytes:
    """Keys, a click and a drag, clipboard text, and a resize."""
    pointer = b"".join(
        struct.pack(">BBHH", 5, mask, x, 300)
        for x, mask in ((100, 0), (110, 1), (300, 1), (300, 0))
    )
    clipboard = struct.pack(">BxxxI", 6, 9) + b"rm -rf ~\n"
    resize = struct.pack(">BxHHBxIHHHHI", 251, 640, 480, 1, 0, 0, 0, 640, 480, 0)
    return key(KEYSYM_Q) * 3 + pointer + clipboard + resize


async def typed_then_settled(viewer: RFBClient, data: bytes, recorder: XRecorder) -> list[Any]:
    """Send ``data`` on the viewer's stream, then a picture request on the same stream: once
    its answer is back, x11vnc has handled everything sent before it. What the desktop got."""
    await viewer.t.write(data)
    await viewer.request_update(False, 0, 0, 16, 16)
    await asyncio.wait_for(viewer.read_update(), scaled(10))
    return await asyncio.to_thread(recorder.drain)


def keys_of(events: list[dict[str, Any]]) -> list[str]:
    return [e.get("char") or "?" for e in events if e.get("type") == "KeyPress"]


def socket_of(stack: ViewerStack, viewer_url: str) -> str:
    return stack.ws_base + urlsplit(viewer_url).path + "websockify"


async def test_take_hand_back_and_stop_are_for_people(
    agent: Caller, person: Caller, desktop: Desktop
) -> None:
    for name in ("desktop_take_control", "desktop_hand_back", "agent_stop"):
        assert await agent.refused(name) == (403, "forbidden"), name
    reply = await agent.say("/desktop take")
    assert reply["payload"]["error"]["code"] == "forbidden"
    await person.ok("desktop_take_control")
    assert await agent.refused("desktop_hand_back") == (403, "forbidden")
    held = await agent.control()
    assert (held["state"], held["name"], held["held"]) == ("person", "alice", True)
    await person.ok("desktop_hand_back")


async def test_launch_stop_and_start_by_an_agent_pass_the_gate(
    agent: Caller, person: Caller, desktop: Desktop
) -> None:
    here = {"relay": "relay-1", "kind": "virtual", "slot": "main"}
    stop = {**here, "desktop_session_id": desktop.desktop_session_id}
    await person.ok("desktop_take_control")
    assert await agent.refused("desktop_launch", app="xterm", wait_s=0) == (423, "takeover_active")
    assert await agent.refused("desktop_stop_confirm", **stop) == (423, "takeover_active")
    assert await agent.refused("desktop_start", **here) == (423, "takeover_active")
    await person.ok("desktop_hand_back")

    await agent.ok("screen", action="move", x=20, y=20)  # the agent acts: its grant
    assert (await person.ok("agent_stop"))["stopped"] == ["bot"]
    assert await agent.refused("desktop_launch", app="xterm", wait_s=0) == (409, "stopped_by_user")
    assert await agent.refused("desktop_stop_confirm", **stop) == (409, "stopped_by_user")
    assert await agent.refused("desktop_start", **here) == (409, "stopped_by_user")
    assert (await agent.control())["state"] == "idle"


async def test_an_agents_viewer_only_watches_and_never_counts_as_a_person(
    stack: ViewerStack, agent: Caller, person: Caller, desktop: Desktop, recorder: XRecorder
) -> None:
    attached = await agent.ok("desktop_attach")
    assert attached["viewer_url"].endswith("?view_only=1")
    viewer = await RFBClient.open_websocket(socket_of(stack, attached["viewer_url"]))
    try:
        await asyncio.to_thread(recorder.drain)
        # A person holds the desktop: the agent's viewer types nothing.
        await person.ok("desktop_take_control")
        events = await typed_then_settled(viewer, everything_an_agent_could_send(), recorder)
        assert keys_of(events) == [], "the agent typed during a person's hold"
        held = await agent.control()
        assert (held["state"], held["name"], held["held"]) == ("person", "alice", True)
        # Handed back: still nothing, and the agent's input is no person's.
        await person.ok("desktop_hand_back")
        events = await typed_then_settled(viewer, everything_an_agent_could_send(), recorder)
        assert keys_of(events) == []
        assert not [e for e in events if e.get("type") == "ButtonPress"]
        assert (await agent.control())["state"] != "person"
        # After Stop: nothing either.
        await person.ok("agent_stop")
        events = await typed_then_settled(viewer, everything_an_agent_could_send(), recorder)
        assert keys_of(events) == []
        assert (await agent.control())["state"] != "person"
        # The agent's viewer still sees the desktop.
        await viewer.request_update(False)
        assert await asyncio.wait_for(viewer.read_update(), scaled(10))
    finally:
        await viewer.close()
    # A person's viewer types, and her input is hers.
    mine = await RFBClient.open_websocket(stack.socket_url(desktop))
    try:
        events = await typed_then_settled(mine, key(KEYSYM_P), recorder)
    finally:
        await mine.close()
    assert keys_of(events) == ["p"]
    control = await agent.control()
    assert (control["state"], control["name"]) == ("person", "alice")


async def test_stop_holds_the_agent_in_its_slot_across_a_restart(
    stack: ViewerStack, agent: Caller, person: Caller
) -> None:
    slot = {"relay": "relay-1", "kind": "virtual", "slot": "again"}
    first = (await agent.ok("desktop_start", **slot))["desktop"]["desktop_session_id"]
    await agent.ok("screen", action="move", x=20, y=20, desktop_session_id=first)
    assert (await person.ok("agent_stop", **slot))["stopped"] == ["bot"]
    # The agent may neither stop the desktop it was stopped on nor start it again.
    assert await agent.refused("desktop_stop_confirm", **slot, desktop_session_id=first) == (
        409,
        "stopped_by_user",
    )
    await person.ok("desktop_stop_confirm", **slot, desktop_session_id=first)
    assert await agent.refused("desktop_start", **slot) == (409, "stopped_by_user")
    # A desktop a person starts there is no way around the cooldown either.
    second = (await person.ok("desktop_start", **slot))["desktop"]["desktop_session_id"]
    try:
        assert second != first
        assert await agent.refused(
            "screen", action="move", x=30, y=30, desktop_session_id=second
        ) == (409, "stopped_by_user")
        assert await agent.refused("desktop_launch", **slot, app="xterm", wait_s=0) == (
            409,
            "stopped_by_user",
        )
        assert (await agent.control(**slot))["state"] == "idle"
    finally:
        await person.ok("desktop_stop_confirm", **slot, desktop_session_id=second)
