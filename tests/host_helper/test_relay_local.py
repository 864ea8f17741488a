"""Local desktops end to end: a real relay and a real ``relaydesk host-helper`` process, the
server in-process; a private Xvfb stands in for the relay host's real screen."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.host_helper.conftest import TOKEN, x11vnc_on
from tests.support.processes import ManagedProcess, ProcessFactory, free_port, scaled
from tests.support.stack import (
    inprocess_server,
    relaydesk_argv,
    seed_database,
    start_relay,
    wait_until,
)
from tests.support.xvfb import XvfbServer
from wire.errors import ChannelClosedError, ErrorCode, OpError
from wire.ids import RelayId

pytestmark = pytest.mark.integration


def start_helper(factory: ProcessFactory, display: str, port: int) -> ManagedProcess:
    argv = relaydesk_argv("host-helper", "--port", str(port), "--allow-remote-desktop")
    env = {"RELAYDESK_HOST_HELPER_TOKEN": TOKEN, "DISPLAY": display}
    return factory(argv, name="host-helper", env=env)


async def request(app: Any, relay_id: RelayId, op: str, args: dict[str, Any]) -> Any:
    return await app.state.parts.relays.request(relay_id, op, args, scaled(30))


async def banner_through_server(app: Any, relay_id: RelayId, session_id: str) -> bytes:
    link = app.state.parts.relays.get(relay_id)
    channel = await link.open_channel({"type": "vnc", "desktop_session_id": session_id})
    try:
        data = b""
        while len(data) < 12:
            data += await asyncio.wait_for(channel.read(), scaled(10))
        return data[:12]
    finally:
        await channel.close()


async def local_rows(app: Any, relay_id: RelayId) -> list[dict[str, Any]]:
    result = await request(app, relay_id, "desktop.status", {})
    return [row for row in result["desktops"] if row["kind"] == "local"]


async def screen(client: httpx.AsyncClient, seed: Any, **body: Any) -> tuple[int, Any]:
    payload = {"conversation_id": seed.conversation_id, "local": True, **body}
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    response = await client.post("/api/v1/actions/screen", json=payload, headers=headers)
    return response.status_code, response.json()


async def drive_host_screen(client: httpx.AsyncClient, seed: Any, session: str) -> None:
    """The screen tool with ``local: true`` reaches the host display, behind the guard."""
    status, shot = await screen(client, seed, action="screenshot")
    assert status == 200, shot
    assert (shot["width"], shot["height"]) == (800, 600)
    status, clicked = await screen(
        client, seed, action="click", x=40, y=30, expected_screen_revision=shot["screen_revision"]
    )
    assert status == 200, clicked
    status, refused = await screen(client, seed, action="click", x=40, y=30)
    assert status == 400, refused
    assert refused["error"]["code"] == "missing_screen_revision"


async def test_local_desktop_through_relay_and_server(
    tmp_path: Path, process_factory: ProcessFactory, host_screen: XvfbServer
) -> None:
    seed = await seed_database(tmp_path / "data")
    relay_id = RelayId(seed.relay["relay_id"])
    helper_port = free_port()
    helper = start_helper(process_factory, host_screen.display, helper_port)
    await helper.wait_for_port_async(helper_port, 20)
    async with inprocess_server(seed) as (app, url):
        helper_env = {
            "RELAYDESK_HOST_HELPER": f"http://127.0.0.1:{helper_port}",
            "RELAYDESK_HOST_HELPER_TOKEN": TOKEN,
        }
        start_relay(process_factory, seed, url, env=helper_env)
        await wait_until(lambda: app.state.parts.relays.is_connected(relay_id), 20, "the relay")
        assert "local_desktop" in app.state.parts.relays.capabilities(relay_id)

        # start → a row of kind local; a second start returns it
        row = await request(app, relay_id, "desktop.start", {"kind": "local"})
        assert (row["kind"], row["slot"], row["already_running"]) == ("local", "main", False)
        session = row["desktop_session_id"]
        again = await request(app, relay_id, "desktop.start", {"kind": "local"})
        assert (again["desktop_session_id"], again["already_running"]) == (session, True)
        assert len(await asyncio.to_thread(x11vnc_on, host_screen.display)) == 1

        # channel.open on it: the RFB banner through the server; closing it keeps the desktop
        assert (await banner_through_server(app, relay_id, session)).startswith(b"RFB 003.")
        assert [r["desktop_session_id"] for r in await local_rows(app, relay_id)] == [session]
        # keyboard.state of the local session: the host display's LEDs, through the helper
        state = await request(app, relay_id, "keyboard.state", {"desktop_session_id": session})
        assert state == {
            "num_lock": False,
            "caps_lock": False,
            "scroll_lock": False,
            "source": "led_mask",
        }
        await app.state.parts.inventory.probe(relay_id)
        stored = await app.state.parts.inventory.row(relay_id, session)
        assert (stored.kind, stored.state) == ("local", "running")

        # compare-and-stop through the relay
        stale = "0" * 32
        result = await request(
            app, relay_id, "desktop.stop", {"kind": "local", "desktop_session_id": stale}
        )
        assert result == {"stopped": False, "conflict": True, "current_session_id": session}
        assert len(await asyncio.to_thread(x11vnc_on, host_screen.display)) == 1

        # the helper stops (SIGTERM: it stops what it started) → unknown, unavailable
        assert await asyncio.to_thread(helper.terminate, 10) == 0
        assert not await asyncio.to_thread(x11vnc_on, host_screen.display)
        rows = await local_rows(app, relay_id)
        assert [(r["desktop_session_id"], r["state"]) for r in rows] == [(session, "unknown")]
        await app.state.parts.inventory.probe(relay_id)
        stored = await app.state.parts.inventory.row(relay_id, session)
        assert (stored.state, stored.reason) == ("unknown", "host_helper_unreachable")
        with pytest.raises(OpError) as refused:
            await request(app, relay_id, "desktop.start", {"kind": "local"})
        assert refused.value.code is ErrorCode.UNAVAILABLE
        assert "does not answer" in refused.value.message
        with pytest.raises((OpError, ChannelClosedError)):
            await banner_through_server(app, relay_id, session)
        with pytest.raises(OpError) as no_state:
            await request(app, relay_id, "keyboard.state", {"desktop_session_id": session})
        assert no_state.value.code is ErrorCode.UNAVAILABLE

        # the helper comes back → reconciled: its old session is gone
        helper = start_helper(process_factory, host_screen.display, helper_port)
        await helper.wait_for_port_async(helper_port, 20)
        assert await local_rows(app, relay_id) == []

        async def ended() -> bool:
            stored = await app.state.parts.inventory.row(relay_id, session)
            return bool(stored.state == "stopped")

        await app.state.parts.inventory.probe(relay_id)
        await wait_until(ended, 10, "the old local row to be stopped")

        # the typed action starts a local desktop too
        async with httpx.AsyncClient(base_url=url, timeout=scaled(30)) as client:
            response = await client.post(
                "/api/v1/actions/desktop_start",
                json={"conversation_id": seed.conversation_id, "kind": "local"},
                headers={"Authorization": f"Bearer {seed.api_token}"},
            )
            assert response.status_code == 200, response.text
            desktop = response.json()["desktop"]
            assert desktop["kind"] == "local"
            assert desktop["state"] == "running"
            fresh = desktop["desktop_session_id"]
            assert fresh != session
            await drive_host_screen(client, seed, fresh)
        stopped = await request(
            app, relay_id, "desktop.stop", {"kind": "local", "desktop_session_id": fresh}
        )
        assert stopped == {"stopped": True, "stopped_session_id": fresh}
        helper.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(helper.wait, 10) == 0
    assert not x11vnc_on(host_screen.display)
