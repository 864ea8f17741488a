"""A loaded machine never kills a healthy desktop: a desktop whose essential processes are
alive fails only after its chain probe failed in ``probe_failures`` watchdog rounds in a row.

Real Xvfb, x11vnc and websockify; websockify is stopped (SIGSTOP) to make the chain silent
while every process is alive (docs/desktops.md, "Watchdog")."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
from collections.abc import AsyncIterator

import aiohttp
import psutil
import pytest

from benchmarks.rfb import RFBClient, TCPTransport
from relay.desktops import DesktopSettings, ProcessDesktops, process_desktops
from relay.desktops.config import DesktopSettings as Config
from tests.relay.conftest import Recorder, pid_of, record_for
from tests.support.processes import scaled
from tests.support.stack import wait_until
from wire.errors import InvalidArgs

pytestmark = pytest.mark.integration

ROUNDS = 3


@pytest.fixture
async def strict(light_config: DesktopSettings, events: Recorder) -> AsyncIterator[ProcessDesktops]:
    config = dataclasses.replace(light_config, probe_timeout_s=scaled(0.5), probe_failures=ROUNDS)
    manager = process_desktops(config, on_change=events)
    try:
        yield manager
    finally:
        await manager.close(stop_desktops=True)


async def _viewer(http: aiohttp.ClientSession, port: int) -> aiohttp.ClientWebSocketResponse:
    """A viewer through websockify that has read the RFB banner."""
    ws = await http.ws_connect(f"http://127.0.0.1:{port}/websockify", protocols=("binary",))
    msg = await ws.receive(timeout=scaled(5))
    assert msg.type == aiohttp.WSMsgType.BINARY and msg.data.startswith(b"RFB 003.")
    return ws


async def _still_answers(ws: aiohttp.ClientWebSocketResponse) -> None:
    """The viewer's stream still works: x11vnc answers its version with security types."""
    await ws.send_bytes(b"RFB 003.008\n")
    msg = await ws.receive(timeout=scaled(5))
    assert msg.type == aiohttp.WSMsgType.BINARY, f"the viewer was closed: {msg}"
    assert len(msg.data) >= 2


async def test_one_silent_round_keeps_the_desktop_and_its_viewers(
    strict: ProcessDesktops, events: Recorder
) -> None:
    row = await strict.start()
    websockify = pid_of(record_for(strict.config, row["desktop_session_id"]), "websockify")
    async with aiohttp.ClientSession() as http:
        ws = await _viewer(http, row["websockify_port"])
        os.kill(websockify, signal.SIGSTOP)
        try:
            assert (await strict.probe("main"))["ok"] is False
            await strict.check_all()  # one round: the chain does not answer
            await strict.check_all()  # and a second one
        finally:
            os.kill(websockify, signal.SIGCONT)
        await strict.check_all()  # it answers again: the count starts over
        os.kill(websockify, signal.SIGSTOP)
        try:
            await strict.check_all()
            await strict.check_all()
        finally:
            os.kill(websockify, signal.SIGCONT)
        assert events.events == [], "a desktop whose processes are alive was failed"
        [running] = await strict.status()
        assert running["desktop_session_id"] == row["desktop_session_id"]
        await _still_answers(ws)
        await ws.close()


async def test_a_chain_silent_for_n_rounds_fails_with_the_probes_reason(
    strict: ProcessDesktops, events: Recorder
) -> None:
    row = await strict.start()
    websockify = pid_of(record_for(strict.config, row["desktop_session_id"]), "websockify")
    os.kill(websockify, signal.SIGSTOP)
    try:
        for _ in range(ROUNDS - 1):
            await strict.check_all()
        assert events.events == []
        await strict.check_all()
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed with its desktop
            os.kill(websockify, signal.SIGCONT)
    [event] = events.events
    assert (event["state"], event["desktop_session_id"]) == ("failed", row["desktop_session_id"])
    assert event["reason"] == f"http_vnc_html: timed out ({ROUNDS} watchdog rounds in a row)"
    assert await strict.status() == []


async def test_a_restarted_relay_keeps_a_desktop_whose_chain_is_slow_to_answer(
    light_config: DesktopSettings, events: Recorder
) -> None:
    """Adoption follows the watchdog's rule: a silent chain at the relay's start is the first
    strike, not the end of a person's desktop; it still fails after the rounds in a row."""
    config = dataclasses.replace(light_config, probe_timeout_s=scaled(0.5), probe_failures=ROUNDS)
    first = process_desktops(config)
    row = await first.start()
    await first.close(stop_desktops=False)
    websockify = pid_of(record_for(config, row["desktop_session_id"]), "websockify")
    successor = process_desktops(config, on_change=events)
    os.kill(websockify, signal.SIGSTOP)
    try:
        try:
            [adopted] = await successor.adopt()
            assert adopted["desktop_session_id"] == row["desktop_session_id"]
        finally:
            os.kill(websockify, signal.SIGCONT)
        await successor.check_all()  # it answers again
        os.kill(websockify, signal.SIGSTOP)
        try:
            for _ in range(ROUNDS):
                await successor.check_all()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(websockify, signal.SIGCONT)
        [event] = events.events
        assert (event["state"], event["desktop_session_id"]) == (
            "failed",
            row["desktop_session_id"],
        )
    finally:
        await successor.close(stop_desktops=True)


async def test_a_dead_process_still_fails_in_the_first_round(
    strict: ProcessDesktops, events: Recorder
) -> None:
    row = await strict.start()
    x11vnc = pid_of(record_for(strict.config, row["desktop_session_id"]), "x11vnc")
    os.kill(x11vnc, signal.SIGKILL)
    await wait_until(lambda: _ended(x11vnc), 5, "x11vnc to end")
    await strict.check_all()
    [event] = events.events
    assert event["state"] == "failed" and "x11vnc" in event["reason"]


async def test_a_viewer_that_stopped_reading_never_fails_the_desktop(
    light_config: DesktopSettings, events: Recorder
) -> None:
    """x11vnc serves nobody for up to 20 s while a viewer's socket is full (docs/desktops.md,
    "Watchdog"): with the default rounds and timings the desktop outlives that."""
    config = dataclasses.replace(
        light_config,
        watchdog_interval_s=Config.watchdog_interval_s,
        probe_timeout_s=Config.probe_timeout_s,
    )
    manager = process_desktops(config, on_change=events)
    try:
        row = await manager.start(geometry="1280x800")
        port = row["vnc_port"]
        secret = manager.launcher.vnc_secret(row["desktop_session_id"])
        manager.start_watchdog()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=sock)
        stalled = RFBClient(TCPTransport(reader, writer))
        await stalled.handshake(secret)
        transport = writer.transport
        assert isinstance(transport, asyncio.ReadTransport)
        transport.pause_reading()  # it stops reading: x11vnc's socket to it fills
        for _ in range(40):
            await stalled.request_update(incremental=False)
        await asyncio.sleep(30)  # past x11vnc's 20 s wait: the stall is over, the desktop kept
        assert events.events == [], "a viewer that stopped reading failed a healthy desktop"
        viewer = await RFBClient.open_tcp(port, secret=secret)
        await viewer.request_update(False, 0, 0, 1, 1)
        await asyncio.wait_for(viewer.read_update(), scaled(10))
        await viewer.close()
        writer.close()
    finally:
        await manager.close(stop_desktops=True)


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_number_of_rounds_is_a_setting() -> None:
    assert Config().probe_failures == 4
    config = Config.from_env({"RELAYDESK_DESKTOP_PROBE_FAILURES": "5"})
    assert config.probe_failures == 5
    with pytest.raises(InvalidArgs, match="RELAYDESK_DESKTOP_PROBE_FAILURES"):
        Config.from_env({"RELAYDESK_DESKTOP_PROBE_FAILURES": "0"})
