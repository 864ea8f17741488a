"""A hostile relay (a real wire client with a token of its own) against a real victim desktop.

Its claims — rows, events, session ids, addresses — only ever touch its own rows: it cannot
shadow another relay's session, close that desktop's viewers, make the server connect to an
address it names, or call ops the server does not offer relays. What it says is bounded and
checked: rows per relay, field lengths, slot names, ``started_at``; its ``started_by`` is never
shown as a user.
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
from wire.desktop_rows import MAX_REASON
from wire.errors import CloseCode
from wire.ids import RelayId
from wire.messages import MAX_HELLO_DESKTOPS

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

MAX_DESKTOPS = 8  # the server's RELAYDESK_MAX_DESKTOPS_PER_RELAY here


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    settings = {"max_desktops_per_relay": MAX_DESKTOPS}
    async with viewer_stack(tmp_path_factory.mktemp("hostile"), server_settings=settings) as stack:
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
    await ws.send(json.dumps(hello_of(desktops)))
    assert json.loads(await ws.recv())["type"] == "welcome"
    hostile = HostileRelay(ws, RelayId(relay["relay_id"]), answers)
    await wait_until(lambda: stack.relays.is_connected(hostile.relay_id), 10, "the hostile relay")
    try:
        yield hostile
    finally:
        await hostile.close()


def hello_of(desktops: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "hello",
        "protocol": 1,
        "relay_version": "hostile",
        "capabilities": ["session_identity", "virtual_desktop", "direct_vnc"],
        "desktops": desktops,
    }


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


@contextlib.asynccontextmanager
async def open_viewer(url: str) -> AsyncIterator[RFBClient]:
    """A viewer after its handshake, closed (its WebSocket and session) where it is opened."""
    async with RFBClient(await WebSocketTransport.connect(url)) as client:
        await asyncio.wait_for(client.handshake(), scaled(10))
        yield client


async def victim_row_state(stack: ViewerStack, desktop: Desktop) -> str:
    row = await stack.app.state.parts.inventory.row(stack.relay_id, desktop.desktop_session_id)
    return str(row.state)


async def test_claiming_and_stopping_a_victims_session_id_touches_only_its_own_row(
    stack: ViewerStack, victim: Desktop
) -> None:
    async with (
        open_viewer(stack.socket_url(victim)) as watching,
        hostile_relay(stack, "mallory-shadow", [claim(victim)]) as hostile,
    ):
        await claimed(stack, hostile, victim)
        # A new viewer of the victim's desktop still opens (no 4403 from the shadow row).
        async with open_viewer(stack.socket_url(victim)):
            pass
        # The hostile relay reports "its" session stopped.
        data = {
            "desktop_session_id": victim.desktop_session_id,
            "state": "stopped",
            "kind": "virtual",
            "slot": "main",
            "reason": "hostile",
        }
        await hostile.event("desktop.changed", data)
        await wait_until(
            lambda: _row_state_is(
                stack.app.state.parts.inventory,
                hostile.relay_id,
                victim.desktop_session_id,
                "stopped",
            ),
            5,
            "the hostile relay's row to record its own claim",
        )
        assert await victim_row_state(stack, victim) == "running"
        # The victim's viewer was not closed (no 4410) and still gets frames.
        await watching.request_update(incremental=False)
        assert await asyncio.wait_for(watching.read_update(), scaled(10))
        async with open_viewer(stack.socket_url(victim)):
            pass


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
        assert stack.relays.is_connected(hostile.relay_id)


async def claimed(stack: ViewerStack, hostile: HostileRelay, victim: Desktop) -> None:
    """Wait until the hostile relay's claim is recorded — as a row of its own."""

    async def recorded() -> bool:
        row = await stack.app.state.parts.inventory.row(hostile.relay_id, victim.desktop_session_id)
        return row is not None

    await wait_until(recorded, 5, "the hostile relay's own row")


async def _row_state_is(inventory: Any, relay_id: RelayId, session_id: str, state: str) -> bool:
    row = await inventory.row(relay_id, session_id)
    return row is not None and row.state == state


# -- what a relay says is bounded and checked ------------------------------------------------


def row(session_id: str, slot: str = "main", **extra: Any) -> dict[str, Any]:
    started_at = "2026-12-01T10:00:00.000Z"
    return {
        "desktop_session_id": session_id,
        "kind": "virtual",
        "slot": slot,
        "state": "running",
        "started_at": started_at,
        **extra,
    }


async def rows_of(stack: ViewerStack, relay_id: RelayId) -> dict[str, Any]:
    rows = await stack.app.state.parts.store.desktops_for_relay(relay_id)
    return {r.desktop_session_id: r for r in rows}


async def test_a_hello_with_rows_beyond_the_protocol_bound_is_refused(stack: ViewerStack) -> None:
    relay = await add_relay(stack.seed, "mallory-flood")
    flood = [row(f"s{n}", f"slot{n}") for n in range(MAX_HELLO_DESKTOPS + 1)]
    ws = await connect(
        stack.ws_base + "/relay/v1/connect",
        additional_headers={"Authorization": f"Bearer {relay['token']}"},
        subprotocols=[websockets.Subprotocol("relaydesk.v1")],
        open_timeout=scaled(10),
    )
    await ws.send(json.dumps(hello_of(flood)))
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(ws.recv(), scaled(10))
    assert ws.close_code == CloseCode.PROTOCOL_ERROR and "desktops" in (ws.close_reason or "")
    assert await rows_of(stack, RelayId(relay["relay_id"])) == {}


async def test_rows_beyond_the_configured_bound_are_dropped(stack: ViewerStack) -> None:
    many = [row(f"m{n}", f"slot{n}") for n in range(MAX_DESKTOPS * 4)]
    async with hostile_relay(stack, "mallory-many", many) as hostile:
        await wait_until(lambda: _count(stack, hostile.relay_id, MAX_DESKTOPS), 5, "its rows")
        # Desktops it then says started beyond the bound are not recorded either.
        for n in range(MAX_DESKTOPS):
            await hostile.event("desktop.changed", row(f"late{n}", f"late{n}"))
        await hostile.send({"type": "req", "id": "p", "op": "ping", "args": {}})
        await wait_until(lambda: "p" in hostile.answers, 5, "the ping's answer")
        stored = await rows_of(stack, hostile.relay_id)
        assert set(stored) == {f"m{n}" for n in range(MAX_DESKTOPS)}
        listed = await stack.action("desktop_list_active")
        assert (
            len([d for d in listed["desktops"] if d["relay_id"] == hostile.relay_id])
            == MAX_DESKTOPS
        )


async def _count(stack: ViewerStack, relay_id: RelayId, expected: int) -> bool:
    return len(await rows_of(stack, relay_id)) == expected


BAD_ROWS: dict[str, dict[str, Any]] = {
    "started_at": row("bad-time", "t1", started_at="yesterday at noon"),
    "slot": row("bad-slot", "../../Etc Passwd"),
    "display": row("bad-display", "t2", display=":" + "9" * 10_000),
    "geometry": row("bad-geometry", "t3", geometry="x" * 1000),
    "desktop_session_id": row("bad id/../", "t4"),
}


async def test_bad_rows_are_refused_and_the_handshake_goes_on(stack: ViewerStack) -> None:
    rows = [*BAD_ROWS.values(), row("good", "ok", reason="r" * 10_000)]
    async with hostile_relay(stack, "mallory-rows", rows) as hostile:
        await wait_until(lambda: _count(stack, hostile.relay_id, 1), 5, "its one good row")
        good = (await rows_of(stack, hostile.relay_id))["good"]
        assert good.slot == "ok" and str(good.started_at).startswith("2026-12-01T10:00:00")
        # A bad row in an event is refused the same way; the relay stays connected.
        await hostile.event("desktop.changed", BAD_ROWS["started_at"])
        await hostile.send({"type": "req", "id": "p", "op": "ping", "args": {}})
        await wait_until(lambda: "p" in hostile.answers, 5, "the ping's answer")
        assert set(await rows_of(stack, hostile.relay_id)) == {"good"}
        assert stack.relays.is_connected(hostile.relay_id)
    failed = {**row("gone", "ok"), "state": "failed", "reason": "f" * 10_000}
    async with hostile_relay(stack, "mallory-reason", []) as hostile:
        await hostile.event("desktop.changed", failed)
        await wait_until(lambda: _count(stack, hostile.relay_id, 1), 5, "the failure's row")
        reason = (await rows_of(stack, hostile.relay_id))["gone"].reason
        assert reason is not None and len(reason) <= MAX_REASON


async def test_a_relays_started_by_is_never_shown_as_a_user(stack: ViewerStack) -> None:
    forged = row("forged", "f1", started_by="alice")
    async with hostile_relay(stack, "mallory-forger", [forged]) as hostile:
        await wait_until(lambda: _count(stack, hostile.relay_id, 1), 5, "its row")
        await hostile.event("desktop.changed", row("forged2", "f2", started_by="alice"))
        await wait_until(lambda: _count(stack, hostile.relay_id, 2), 5, "its second row")
        listed = await stack.action("desktop_list_active")
        mine = [d for d in listed["desktops"] if d["relay_id"] == hostile.relay_id]
        assert [d["started_by"] for d in mine] == [None, None]
    # A desktop started through the API is recorded as started by its caller, whatever the
    # relay answers.
    started = {**row("asked", "a1"), "started_by": "mallory", "already_running": False}
    async with hostile_relay(stack, "mallory-echo", [], answers={"desktop.start": started}) as h:
        answer = await stack.action("desktop_start", relay="mallory-echo", slot="a1")
        assert answer["desktop"]["started_by"] == "alice"
        assert (await rows_of(stack, h.relay_id))["asked"].started_by == "alice"
