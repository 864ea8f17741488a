"""Virtual desktops with real processes: start, probes, watchdog, compare-and-stop, adoption."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
from aiohttp import web

from relay.desktops import DesktopSettings, ProcessDesktops, process_desktops
from relay.desktops.probe import rfb_banner_ws, vnc_html_status
from tests.relay.conftest import (
    Recorder,
    leaked_shm,
    live_groups,
    pgids_of,
    pid_of,
    record_for,
    state_records,
)
from tests.support.processes import scaled
from tests.support.stack import wait_until
from wire.errors import ErrorCode, OpError

pytestmark = pytest.mark.integration

VIRTUAL = {"kind": "virtual"}


async def assert_serves_rfb(http: aiohttp.ClientSession, row: Mapping[str, object]) -> None:
    port = int(str(row["websockify_port"]))
    await vnc_html_status(http, port, scaled(3))
    assert (await rfb_banner_ws(http, port, scaled(3))).startswith(b"RFB 003.")


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def proc_environ(pid: int) -> dict[str, str]:
    return psutil.Process(pid).environ()


async def test_full_desktop_serves_novnc_and_rfb(
    tmp_path: Path, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAYDESK_RELAY_TOKEN", "rdk_secret_that_must_not_leak")
    monkeypatch.chdir(tmp_path)  # the relay runs somewhere other than its home directory
    config = DesktopSettings(
        state_dir=tmp_path, start_timeout_s=scaled(15), default_profile="minimal"
    )
    mgr = process_desktops(config)
    try:
        row = await mgr.start(started_by="alice")
        assert re.fullmatch(r"[0-9a-f]{32,}", row["desktop_session_id"])
        assert row["state"] == "running"
        assert row["already_running"] is False
        assert re.fullmatch(r":[0-9]+", row["display"] or "")
        assert (row["started_at"] or "").endswith("Z")
        assert row["started_by"] == "alice"
        await assert_serves_rfb(http, row)
        [status] = await mgr.status()
        assert status["desktop_session_id"] == row["desktop_session_id"]
        again = await mgr.start()
        assert again["desktop_session_id"] == row["desktop_session_id"]
        assert again["already_running"] is True
        xterm = pid_of(record_for(config, row["desktop_session_id"]), "app:xterm")
        env = proc_environ(xterm)
        # A terminal opens in the desktop's own home, not wherever the relay was started.
        assert psutil.Process(xterm).cwd() == os.path.realpath(env["HOME"])
        assert env["HOME"] != os.environ["HOME"] and os.getcwd() != env["HOME"]
        assert env["DISPLAY"] == row["display"]
        assert env["DBUS_SESSION_BUS_ADDRESS"].startswith("unix:")
        assert env["GTK_MODULES"] == "gail:atk-bridge"
        assert env["QT_ACCESSIBILITY"] == "1"
        assert "RELAYDESK_RELAY_TOKEN" not in env
    finally:
        await mgr.close(stop_desktops=True)


@pytest.mark.parametrize("victim", ["x11vnc", "websockify", "Xvfb"])
async def test_watchdog_fails_desktop_when_a_process_dies(
    manager: ProcessDesktops, events: Recorder, victim: str
) -> None:
    row = await manager.start()
    record = record_for(manager.config, row["desktop_session_id"])
    manager.start_watchdog()
    os.kill(pid_of(record, victim), signal.SIGKILL)
    await wait_until(lambda: bool(events.events), 5, "the failed event")
    [event] = events.events
    assert event["state"] == "failed"
    assert victim in event["reason"]
    assert event["desktop_session_id"] == row["desktop_session_id"]
    assert (event["kind"], event["slot"]) == ("virtual", "main")
    await wait_until(lambda: not live_groups(pgids_of(record)), 2, "the group to be gone")
    assert leaked_shm(record) == []
    assert await manager.status() == []
    assert state_records(manager.config) == []


async def test_websockify_replaced_by_plain_http_is_unhealthy(
    manager: ProcessDesktops, events: Recorder
) -> None:
    row = await manager.start()
    record = record_for(manager.config, row["desktop_session_id"])
    os.killpg(pid_of(record, "websockify"), signal.SIGKILL)
    await wait_until(lambda: not live_groups([pid_of(record, "websockify")]), 2, "websockify gone")
    runner = web.AppRunner(web.Application())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", row["websockify_port"])
    await site.start()
    try:
        probe = await manager.probe("main")
        assert probe["ok"] is False
        assert probe["running"] is True
        await manager.check_all()
        [event] = events.events
        assert event["state"] == "failed"
        assert "websockify" in event["reason"]
        assert not live_groups(pgids_of(record))
    finally:
        await runner.cleanup()


async def test_watchdog_probe_fails_when_vnc_html_is_no_longer_served(
    light_config: DesktopSettings, events: Recorder, tmp_path: Path
) -> None:
    novnc = tmp_path / "novnc"
    novnc.mkdir()
    (novnc / "vnc.html").write_text("<html></html>")
    config = DesktopSettings(**{**light_config.__dict__, "novnc_dir": novnc})
    mgr = process_desktops(config, on_change=events)
    try:
        row = await mgr.start()
        record = record_for(light_config, row["desktop_session_id"])
        assert (await mgr.probe("main"))["ok"] is True
        (novnc / "vnc.html").unlink()
        mgr.start_watchdog()
        await wait_until(lambda: bool(events.events), 5, "the failed event")
        assert "vnc.html answered HTTP 404" in events.events[0]["reason"]
        assert not live_groups(pgids_of(record))
    finally:
        await mgr.close(stop_desktops=True)


async def test_stop_with_stale_id_conflicts_and_newer_desktop_keeps_running(
    manager: ProcessDesktops, http: aiohttp.ClientSession
) -> None:
    old = (await manager.start())["desktop_session_id"]
    stopped = await manager.stop(kind="virtual", slot="main", desktop_session_id=old)
    assert stopped == {"stopped": True, "stopped_session_id": old}
    new_row = await manager.start()
    result = await manager.stop(kind="virtual", slot="main", desktop_session_id=old)
    assert result == {
        "stopped": False,
        "conflict": True,
        "current_session_id": new_row["desktop_session_id"],
    }
    await assert_serves_rfb(http, new_row)
    empty = await manager.stop(kind="virtual", slot="other", desktop_session_id=old)
    assert empty == {"stopped": False, "was_running": False}


async def test_a_stop_tells_its_viewers_before_it_ends_the_desktops_processes(
    manager: ProcessDesktops, light_config: DesktopSettings
) -> None:
    row = await manager.start()
    session_id = row["desktop_session_id"]
    groups = pgids_of(record_for(light_config, session_id))
    told: list[tuple[str, list[int]]] = []

    async def leaving(desktop_session_id: str) -> None:
        told.append((desktop_session_id, live_groups(groups)))

    manager.on_leaving = leaving
    await manager.stop(kind="virtual", slot="main", desktop_session_id=session_id)
    assert [(sid, sorted(live)) for sid, live in told] == [(session_id, sorted(groups))]
    assert not live_groups(groups)


async def test_racing_stale_stop_never_stops_a_newer_session(manager: ProcessDesktops) -> None:
    # Every pairing of how many times each side yields before it starts: each interleaving of
    # the stale stop with the restart, once (RELAYDESK_TEST_RACE_ROUNDS runs them again).
    rounds = int(os.environ.get("RELAYDESK_TEST_RACE_ROUNDS", "1"))
    schedule = list(itertools.product(range(4), range(4))) * rounds
    old = (await manager.start())["desktop_session_id"]
    started = time.monotonic()

    async def after_yields(n: int, coro: Awaitable[Mapping[str, Any]]) -> Mapping[str, Any]:
        for _ in range(n):
            await asyncio.sleep(0)
        return await coro

    async def restart(old_id: str) -> Mapping[str, Any]:
        await manager.stop(kind="virtual", slot="main", desktop_session_id=old_id)
        return await manager.start()

    for stop_yields, restart_yields in schedule:
        stale, new_row = await asyncio.gather(
            after_yields(stop_yields, manager.stop(**VIRTUAL, slot="main", desktop_session_id=old)),
            after_yields(restart_yields, restart(old)),
        )
        new = str(new_row["desktop_session_id"])
        assert stale in (
            {"stopped": True, "stopped_session_id": old},
            {"stopped": False, "was_running": False},
            {"stopped": False, "conflict": True, "current_session_id": new},
        )
        assert [r["desktop_session_id"] for r in await manager.status()] == [new]
        old = new
    assert (await manager.probe("main"))["ok"] is True
    print(f"{len(schedule)} race iterations in {time.monotonic() - started:.1f} s")


async def test_new_manager_readopts_after_relay_is_killed(
    light_config: DesktopSettings, http: aiohttp.ClientSession
) -> None:
    first = process_desktops(light_config)
    row = await first.start(slot="agent-1")
    record = record_for(light_config, row["desktop_session_id"])
    dying = await first.start(slot="agent-2")
    dying_record = record_for(light_config, dying["desktop_session_id"])
    os.kill(pid_of(dying_record, "x11vnc"), signal.SIGKILL)
    del first  # like SIGKILL of the relay: no close, no stop
    second = process_desktops(light_config)
    try:
        adopted = await second.adopt()
        assert [r["desktop_session_id"] for r in adopted] == [row["desktop_session_id"]]
        assert adopted[0]["display"] == row["display"]
        await assert_serves_rfb(http, adopted[0])
        assert not live_groups(pgids_of(dying_record))
        [status] = await second.status()
        assert status["desktop_session_id"] == row["desktop_session_id"]
    finally:
        await second.close(stop_desktops=True)
    assert not live_groups(pgids_of(record))


async def test_close_without_stop_leaves_desktops_for_the_next_relay(
    light_config: DesktopSettings, http: aiohttp.ClientSession
) -> None:
    first = process_desktops(light_config)
    row = await first.start()
    record = record_for(light_config, row["desktop_session_id"])
    await first.close(stop_desktops=False)
    assert live_groups(pgids_of(record)) == pgids_of(record)
    second = process_desktops(light_config)
    try:
        [adopted] = await second.adopt()
        assert adopted["desktop_session_id"] == row["desktop_session_id"]
        await assert_serves_rfb(http, adopted)
    finally:
        await second.close(stop_desktops=True)
    assert not live_groups(pgids_of(record))
    assert state_records(light_config) == []


async def test_four_desktops_are_independent(
    manager: ProcessDesktops, http: aiohttp.ClientSession
) -> None:
    rows = [await manager.start(slot=f"s{i}") for i in range(4)]
    assert len({r["display"] for r in rows}) == 4
    assert len({p for r in rows for p in (r["websockify_port"], r["vnc_port"])}) == 8
    with pytest.raises(OpError) as err:
        await manager.start(slot="s4")
    assert err.value.code is ErrorCode.LIMIT_REACHED
    victim = record_for(manager.config, rows[1]["desktop_session_id"])
    await manager.stop(**VIRTUAL, slot="s1", desktop_session_id=rows[1]["desktop_session_id"])
    assert not live_groups(pgids_of(victim))
    for row in (rows[0], rows[2], rows[3]):
        await assert_serves_rfb(http, row)
    assert [r["slot"] for r in await manager.status()] == ["s0", "s2", "s3"]


async def test_running_finds_one_desktop_and_fails_it_when_its_processes_died(
    manager: ProcessDesktops, events: Recorder
) -> None:
    main = await manager.start()
    other = await manager.start(slot="s1")
    default = "main"
    found = await manager.running(None, default)
    assert found is not None and found["desktop_session_id"] == main["desktop_session_id"]
    found = await manager.running(other["desktop_session_id"], default)
    assert found is not None and found["display"] == other["display"]
    assert await manager.running("no-such-session", default) is None
    assert manager.displays() == {main["display"], other["display"]}

    xvfb = pid_of(record_for(manager.config, other["desktop_session_id"]), "Xvfb")
    os.kill(xvfb, signal.SIGKILL)
    await wait_until(lambda: _exited(xvfb), 5, "Xvfb to exit")
    assert await manager.running(other["desktop_session_id"], default) is None
    [event] = events.events
    assert (event["state"], event["desktop_session_id"]) == ("failed", other["desktop_session_id"])
    assert manager.displays() == {main["display"]}
    found = await manager.running(None, default)
    assert found is not None and found["desktop_session_id"] == main["desktop_session_id"]


def _exited(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def new_children(before: set[int]) -> list[psutil.Process]:
    now = psutil.Process().children(recursive=True)
    return [p for p in now if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize(
    ("override", "code"),
    [
        ({"xvfb_binary": "/nonexistent/Xvfb"}, ErrorCode.UNAVAILABLE),
        ({"x11vnc_binary": "false"}, ErrorCode.START_FAILED),
    ],
)
async def test_failing_start_leaves_no_orphans(
    light_config: DesktopSettings, override: dict[str, str], code: ErrorCode
) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    config = DesktopSettings(**{**light_config.__dict__, **override})
    mgr = process_desktops(config)
    try:
        with pytest.raises(OpError) as err:
            await mgr.start()
        assert err.value.code is code
        if code is ErrorCode.UNAVAILABLE:
            assert "missing: /nonexistent/Xvfb" in err.value.message
        assert new_children(before) == []
        assert await mgr.status() == []
    finally:
        await mgr.close(stop_desktops=True)
