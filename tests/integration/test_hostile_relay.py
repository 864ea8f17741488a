"""A hostile relay (a real wire client with a token of its own) against a real victim desktop.

Its claims — rows, events, session ids, addresses — only ever touch its own rows: it cannot
shadow another relay's session, close that desktop's viewers, make the server connect to an
address it names, or call ops the server does not offer relays.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import websockets
from websockets.asyncio.client import ClientConnection, connect

from benchmarks.rfb import RFBClient, WebSocketTransport
from tests.e2e.viewer_stack import Desktop, ViewerStack, viewer_stack
from tests.integration.test_viewer_tunnel import close_of, vnc_connections
from tests.support.processes import scaled
from tests.support.stack import add_relay, wait_until
from wire.errors import CloseCode
from wire.ids import RelayId

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("hostile")) as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def victim(stack: ViewerStack) -> Desktop:
    return await stack.start_desktop(paint=True)


class HostileRelay:
    """A relay speaking wire protocol v1 by hand, saying whatever the test wants."""

    def __init__(
        self, ws: ClientConnection, relay_id: RelayId, answers: dict[str, Any] | None = None
    ) -> None:
        self.ws = ws
        self.relay_id = relay_id
        self.scripted = answers or {}  # op → the result this relay answers with
        self.requests: list[dict[str, Any]] = []
        self.answers: dict[str, dict[str, Any]] = {}
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in self.ws:
                if isinstance(message, bytes):
                    continue
                frame = json.loads(message)
                if frame.get("type") == "req":
                    self.requests.append(frame)
                    await self._answer(frame)
                elif frame.get("type") == "res":
                    self.answers[frame["id"]] = frame

    async def _answer(self, request: dict[str, Any]) -> None:
        if (result := self.scripted.get(request["op"])) is not None:
            await self.send({"type": "res", "id": request["id"], "ok": True, "result": result})
            return
        error = {"code": "unavailable", "message": "hostile relay"}
        await self.send({"type": "res", "id": request["id"], "ok": False, "error": error})

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(frame))

    async def event(self, name: str, data: dict[str, Any]) -> None:
        await self.send({"type": "event", "name": name, "data": data})

    async def close(self) -> None:
        await self.ws.close()
        await self._reader


@contextlib.asynccontextmanager
async def hostile_relay(
    stack: ViewerStack,
    name: str,
    desktops: list[dict[str, Any]],
    *,
    co_located: bool = False,
    answers: dict[str, Any] | None = None,
) -> AsyncIterator[HostileRelay]:
    # Owned by the same user and shared in the chat: she may view "its" desktops.
    relay = await add_relay(stack.seed, name, co_located=co_located)
    ws = await connect(
        stack.ws_base + "/relay/v1/connect",
        additional_headers={"Authorization": f"Bearer {relay['token']}"},
        subprotocols=[websockets.Subprotocol("relaydesk.v1")],
        open_timeout=scaled(10),
    )
    hello = {
        "type": "hello",
        "protocol": 1,
        "relay_version": "hostile",
        "capabilities": ["session_identity", "virtual_desktop", "direct_vnc"],
        "desktops": desktops,
    }
    await ws.send(json.dumps(hello))
    assert json.loads(await ws.recv())["type"] == "welcome"
    hostile = HostileRelay(ws, RelayId(relay["relay_id"]), answers)
    await wait_until(lambda: stack.hub.is_connected(hostile.relay_id), 10, "the hostile relay")
    try:
        yield hostile
    finally:
        await hostile.close()


def claim(desktop: Desktop, **extra: Any) -> dict[str, Any]:
    """A status row naming the victim's session, display and ports as if they were ours."""
    return {
        "desktop_session_id": desktop.desktop_session_id,
        "kind": "virtual",
        "slot": "main",
        "display": desktop.display,
        "vnc_port": desktop.vnc_port,
        "direct": {"host": "127.0.0.1", "port": desktop.vnc_port},
        **extra,
    }


async def open_viewer(url: str) -> RFBClient:
    client = RFBClient(await WebSocketTransport.connect(url))
    await asyncio.wait_for(client.handshake(), scaled(10))
    return client


async def victim_row_state(stack: ViewerStack, desktop: Desktop) -> str:
    row = await stack.app.state.services.inventory.row(stack.relay_id, desktop.desktop_session_id)
    return str(row.state)


async def test_claiming_and_stopping_a_victims_session_id_touches_only_its_own_row(
    stack: ViewerStack, victim: Desktop
) -> None:
    watching = await open_viewer(stack.socket_url(victim))
    try:
        async with hostile_relay(stack, "mallory-shadow", [claim(victim)]) as hostile:
            await claimed(stack, hostile, victim)
            # A new viewer of the victim's desktop still opens (no 4403 from the shadow row).
            fresh = await open_viewer(stack.socket_url(victim))
            await fresh.close()
            # The hostile relay reports "its" session stopped.
            data = {"desktop_session_id": victim.desktop_session_id, "state": "stopped",
                    "kind": "virtual", "slot": "main", "reason": "hostile"}  # fmt: skip
            await hostile.event("desktop.changed", data)
            await wait_until(
                lambda: _row_state_is(stack.app.state.services.inventory, hostile.relay_id,
                                      victim.desktop_session_id, "stopped"),
                5,
                "the hostile relay's row to record its own claim",
            )  # fmt: skip
            assert await victim_row_state(stack, victim) == "running"
            # The victim's viewer was not closed (no 4410) and still gets frames.
            await watching.request_update(incremental=False)
            assert await asyncio.wait_for(watching.read_update(), scaled(10))
            again = await open_viewer(stack.socket_url(victim))
            await again.close()
    finally:
        await watching.close()


async def test_the_server_never_connects_where_a_relay_says(
    stack: ViewerStack, victim: Desktop
) -> None:
    async with hostile_relay(stack, "mallory-direct", [claim(victim)]) as hostile:
        await claimed(stack, hostile, victim)
        # A member of the chat opens "the hostile relay's desktop", whose row names the
        # victim's x11vnc as a direct address: the server asks the relay, never that port.
        token = stack.token(victim.desktop_session_id, relay_id=hostile.relay_id)
        code, _ = await close_of(stack.socket_url(victim, token))
        assert code != CloseCode.NORMAL
        assert vnc_connections(os.getpid(), victim) == 0
        assert [r["op"] for r in hostile.requests if r["op"] == "channel.open"]


async def test_even_a_co_located_relay_cannot_splice_a_viewer_to_another_desktop(
    stack: ViewerStack, victim: Desktop
) -> None:
    # Registered as co-located, it names the victim's x11vnc port with a secret of its own.
    lie = {"port": victim.vnc_port, "secret": base64.b64encode(b"guessed!").decode()}
    async with hostile_relay(
        stack, "mallory-colocated", [claim(victim)], co_located=True, answers={"vnc.direct": lie}
    ) as hostile:
        await claimed(stack, hostile, victim)
        token = stack.token(victim.desktop_session_id, relay_id=hostile.relay_id)
        code, _ = await close_of(stack.socket_url(victim, token))
        assert code != CloseCode.NORMAL
        assert [r for r in hostile.requests if r["op"] == "vnc.direct"], "direct path not tried"
        # The handshake with the wrong secret failed: nothing spliced, nothing left open, and
        # the viewer was offered only the hostile relay's own channel (which it refused).
        assert [r for r in hostile.requests if r["op"] == "channel.open"]
        await wait_until(lambda: vnc_connections(os.getpid(), victim) == 0, 5, "no connection")


async def test_ops_the_server_does_not_offer_relays_are_refused(stack: ViewerStack) -> None:
    async with hostile_relay(stack, "mallory-ops", []) as hostile:
        for op in ("desktop.start", "desktop_stop_confirm", "admin.add_relay", "screen.click"):
            await hostile.send({"type": "req", "id": op, "op": op, "args": {}, "timeout_ms": 1000})
        await wait_until(lambda: len(hostile.answers) == 4, 5, "four answers")
        assert {a["error"]["code"] for a in hostile.answers.values()} == {"unknown_op"}
        assert stack.hub.is_connected(hostile.relay_id)


async def claimed(stack: ViewerStack, hostile: HostileRelay, victim: Desktop) -> None:
    """Wait until the hostile relay's claim is recorded — as a row of its own."""

    async def recorded() -> bool:
        row = await stack.app.state.services.inventory.row(
            hostile.relay_id, victim.desktop_session_id
        )
        return row is not None

    await wait_until(recorded, 5, "the hostile relay's own row")


async def _row_state_is(inventory: Any, relay_id: RelayId, session_id: str, state: str) -> bool:
    row = await inventory.row(relay_id, session_id)
    return row is not None and row.state == state
