"""The connection a pause holds to the desktop's x11vnc (relay/desktops/wake.py): one while
the desktop is paused, none once the hold after the resume is over, and a pause that goes on
without it when x11vnc does not answer. Real desktops, real x11vnc, a real viewer's handshake
and frame; root, so each desktop has a cgroup to freeze."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from benchmarks.rfb import RFBClient
from relay.desktops import ProcessDesktops, wake
from tests.relay.conftest import pid_of, record_for
from tests.support.stack import wait_until
from wire.ops import RelayRow

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="desktop cgroups need a root relay"),
]


@pytest.fixture(autouse=True)
def _short_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wake, "HOLD_AFTER_RESUME_S", 1.0)


def _held(row: RelayRow) -> set[int]:
    """This process's (the relay's) established connections to the desktop's x11vnc, by
    local port (the tests' own viewers run in this process too)."""
    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == row["vnc_port"] and c.status == psutil.CONN_ESTABLISHED
    }


async def _first_frame(manager: ProcessDesktops, row: RelayRow) -> None:
    secret = manager.launcher.vnc_secret(row["desktop_session_id"])
    client = await RFBClient.open_tcp(row["vnc_port"], secret=secret, version_first=True)
    try:
        await client.request_update(incremental=False)
        await client.read_update()
    finally:
        await client.close()


async def test_a_paused_desktop_is_held_until_after_its_resume(manager: ProcessDesktops) -> None:
    row = await manager.start(slot="main")
    session = row["desktop_session_id"]
    assert not _held(row)
    await manager.pause(slot="main", desktop_session_id=session)
    [held] = _held(row)
    resumed = await manager.resume(slot="main", desktop_session_id=session)
    assert resumed["state"] == "running"
    await _first_frame(manager, resumed)  # a new viewer beside the held connection
    assert held in _held(row)
    await wait_until(lambda: held not in _held(row), 10, "the held connection to be let go")
    # Paused again: held again, and a pause soon after a resume keeps the one it has.
    await manager.pause(slot="main", desktop_session_id=session)
    [again] = _held(row)
    await manager.resume(slot="main", desktop_session_id=session)
    await manager.pause(slot="main", desktop_session_id=session)
    assert _held(row) == {again}
    await manager.resume(slot="main", desktop_session_id=session)
    await _first_frame(manager, row)


async def test_a_pause_goes_on_when_x11vnc_does_not_answer(manager: ProcessDesktops) -> None:
    row = await manager.start(slot="main")
    session = row["desktop_session_id"]
    x11vnc = pid_of(record_for(manager.launcher.config, session), "x11vnc")
    os.kill(x11vnc, signal.SIGSTOP)  # the connection is made, the handshake never answered
    try:
        paused = await manager.pause(slot="main", desktop_session_id=session)
        assert paused["state"] == "paused"
        assert not _held(row)
    finally:
        os.kill(x11vnc, signal.SIGCONT)
    resumed = await manager.resume(slot="main", desktop_session_id=session)
    assert resumed["state"] == "running"
    await _first_frame(manager, resumed)
