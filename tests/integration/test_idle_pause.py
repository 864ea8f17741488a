"""The idle pause end to end: a real relay process (root, so each desktop has a cgroup) with
``RELAYDESK_IDLE_PAUSE_S``, an in-process server, real desktops driven through the HTTP actions
and a viewer through the server.

What a user would notice is read independently of the code under test: the desktop's state
in the listing, and its cgroup's freeze state from ``cgroup.events``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import pytest_asyncio

from benchmarks.rfb import RFBClient, WebSocketTransport
from relay.desktops.cgroups import cgroup2_mount
from tests.support.processes import (
    ManagedProcess,
    ProcessFactory,
    ProcessTracker,
    scaled,
)
from tests.support.stack import (
    Seed,
    inprocess_server,
    relaydesk_argv,
    seed_database,
    start_relay,
    wait_until,
)
from wire.ids import RelayId

pytestmark = [
    pytest.mark.integration,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(os.geteuid() != 0, reason="desktop cgroups need a root relay"),
]

IDLE_S = 3


@dataclass
class Stack:
    url: str
    seed: Seed
    tracker: ProcessTracker
    app: Any
    relay: ManagedProcess | None = None

    async def act(self, name: str, **body: Any) -> tuple[int, dict[str, Any]]:
        payload = {"conversation_id": self.seed.conversation_id, **body}
        if name != "desktop_list_active":
            payload["relay"] = "relay-1"
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        async with httpx.AsyncClient(base_url=self.url, timeout=scaled(60)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=payload, headers=headers)
        return response.status_code, response.json()

    async def ok(self, name: str, **body: Any) -> dict[str, Any]:
        status, result = await self.act(name, **body)
        assert status == 200, result
        return result

    async def state(self, session_id: str) -> str | None:
        listed = await self.ok("desktop_list_active")
        rows = [r for r in listed["desktops"] if r["desktop_session_id"] == session_id]
        return rows[0]["state"] if rows else None

    def connected(self) -> bool:
        return bool(self.app.state.parts.relays.is_connected(RelayId(self.seed.relay["relay_id"])))

    async def start(self, slot: str) -> dict[str, Any]:
        started = await self.ok("desktop_start", slot=slot, profile="minimal")
        assert started["desktop"]["state"] == "running"
        return started

    async def stop(self, started: dict[str, Any]) -> None:
        row = started["desktop"]
        await self.ok(
            "desktop_stop_confirm", slot=row["slot"], desktop_session_id=row["desktop_session_id"]
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("idle")
    seed = await seed_database(root / "data")
    tracker = ProcessTracker(root / "processes")
    env = {"RELAYDESK_IDLE_PAUSE_S": str(IDLE_S), "DISPLAY": ""}
    async with inprocess_server(seed) as (app, url):
        stack = Stack(url, seed, tracker, app)
        stack.relay = start_relay(tracker.start, seed, url, name="relay1", env=env)
        try:
            await wait_until(stack.connected, scaled(20), "the relay to connect")
            yield stack
        except BaseException:
            print(stack.relay.log_tail())
            raise
        finally:
            tracker.cleanup()


def _frozen(session_id: str) -> bool:
    """Whether the desktop's cgroup says every process in it is frozen."""
    mount = cgroup2_mount()
    assert mount is not None
    (cgroup,) = list((mount / "relaydesk").glob(f"*/{session_id}"))
    return "frozen 1" in (cgroup / "cgroup.events").read_text()


async def _stays_running(stack: Stack, session_id: str, seconds: float) -> None:
    """The desktop is running at every look for ``seconds`` (several idle windows)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        assert await stack.state(session_id) == "running"
        assert not _frozen(session_id)
        await asyncio.sleep(0.5)


async def _watch(viewer: RFBClient) -> None:
    """What a viewer page does while it is open: ask for changes and read them (which also
    answers the server's pings)."""
    while True:
        await viewer.request_update(incremental=True)
        await viewer.read_update()


async def _is_paused(stack: Stack, session_id: str) -> bool:
    return await stack.state(session_id) == "paused"


async def test_a_desktop_nobody_uses_is_paused_and_resumes(stack: Stack) -> None:
    started = await stack.start("quiet")
    session_id = started["desktop"]["desktop_session_id"]
    await wait_until(lambda: _is_paused(stack, session_id), scaled(30), "the idle pause")
    assert _frozen(session_id)
    assert stack.relay is not None
    assert "slot=quiet paused: idle for 3 s" in stack.relay.log_text()
    # Paused as by desktop_pause: actions answer paused until a resume.
    status, answer = await stack.act("screen", action="screenshot", desktop_session_id=session_id)
    assert (status, answer["error"]["code"]) == (409, "paused"), answer
    resumed = await stack.ok("desktop_resume", desktop_session_id=session_id)
    assert resumed["desktop"]["state"] == "running"
    assert not _frozen(session_id)
    await stack.ok("screen", action="screenshot", desktop_session_id=session_id)
    # Left alone again, it is paused again.
    await wait_until(lambda: _is_paused(stack, session_id), scaled(30), "the second idle pause")
    await stack.stop(started)


async def test_a_watched_desktop_is_not_paused(stack: Stack) -> None:
    started = await stack.start("watched")
    session_id = started["desktop"]["desktop_session_id"]
    parts = urlsplit(started["viewer_url"])
    path = parts.path.rstrip("/") + "/websockify"
    url = urlunsplit(("ws", parts.netloc, path, parts.query, ""))
    async with RFBClient(await WebSocketTransport.connect(url)) as viewer:
        await asyncio.wait_for(viewer.handshake(), scaled(10))
        await viewer.request_update(incremental=False)
        await asyncio.wait_for(viewer.read_update(), scaled(10))
        watching = asyncio.create_task(_watch(viewer))
        try:
            await _stays_running(stack, session_id, 3 * IDLE_S)
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
    # Once the viewer has gone, the window starts again.
    await wait_until(lambda: _is_paused(stack, session_id), scaled(30), "the idle pause")
    await stack.stop(started)


async def test_an_agent_acting_keeps_it_running(stack: Stack) -> None:
    started = await stack.start("acting")
    session_id = started["desktop"]["desktop_session_id"]
    until = time.monotonic() + 3 * IDLE_S
    while time.monotonic() < until:
        await stack.ok("screen", action="screenshot", desktop_session_id=session_id)
        assert await stack.state(session_id) == "running"
        await asyncio.sleep(0.5)
    await wait_until(lambda: _is_paused(stack, session_id), scaled(30), "the idle pause")
    await stack.stop(started)


async def test_a_recorded_desktop_is_not_paused(stack: Stack) -> None:
    started = await stack.ok("desktop_start", slot="recorded", profile="minimal", record=True)
    session_id = started["desktop"]["desktop_session_id"]
    assert started["desktop"]["recording"] is True, started
    await _stays_running(stack, session_id, 3 * IDLE_S)
    await stack.ok("desktop_record", on=False, desktop_session_id=session_id)
    await wait_until(lambda: _is_paused(stack, session_id), scaled(30), "the idle pause")
    await stack.stop(started)


async def test_a_bad_idle_setting_stops_the_relay_naming_it(
    process_factory: ProcessFactory, tmp_path: Path
) -> None:
    seed = await seed_database(tmp_path / "data")
    token = seed.data_dir / "relay.token"
    token.write_text(seed.relay_token)
    for raw in ("soon", "-5", "inf"):
        env = {**seed.env(), "RELAYDESK_RELAY_TOKEN": "", "RELAYDESK_IDLE_PAUSE_S": raw}
        argv = relaydesk_argv("relay", "--server", "http://127.0.0.1:9", "--token-file", str(token))
        relay = process_factory(argv, name=f"relay-{raw}", env=env)
        assert relay.wait(scaled(20)) == 2, relay.log_text()
        text = relay.log_text()
        assert "Traceback" not in text, text
        assert f"relaydesk relay: RELAYDESK_IDLE_PAUSE_S: cannot parse {raw!r}" in text, text
