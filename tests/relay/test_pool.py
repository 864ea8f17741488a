"""The warm pool with real desktops: a matching start takes a ready desktop (it runs and a
viewer gets a frame; it waited frozen, using no CPU), the pool refills, an empty pool or
another geometry is a cold start, a stopped desktop is never handed out again, a pooled
desktop is invisible until taken, and a relay killed or closed leaves none of its pooled
desktops behind."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.rfb import RFBClient
from relay.config import RelayConfigError, RelaySettings
from relay.desktops import DesktopSettings, ProcessDesktops, cgroups, process_desktops
from relay.desktops.pool import WarmPool
from tests.relay.conftest import live_groups, pgids_of, state_records
from tests.support.processes import scaled
from tests.support.stack import wait_until
from wire.errors import InvalidArgs
from wire.ops import RelayRow

pytestmark = pytest.mark.integration


def pooled(mgr: ProcessDesktops, size: int = 1) -> WarmPool:
    pool = WarmPool(mgr, {"minimal": size})
    mgr.pool = pool
    mgr.start_pool()
    return pool


def ready(pool: WarmPool) -> int:
    return pool.report()["profiles"][0]["ready"]


async def filled(pool: WarmPool, size: int = 1) -> None:
    await wait_until(lambda: ready(pool) == size, scaled(30), "the pool to fill")


def starting_records(config: DesktopSettings) -> list[dict[str, Any]]:
    data = json.loads(config.state_file.read_text())
    return list(data["starting"])


async def first_frame(mgr: ProcessDesktops, row: RelayRow) -> tuple[int, int]:
    """What a viewer of ``row`` sees first: the RFB handshake, then a whole frame."""
    secret = mgr.launcher.vnc_secret(row["desktop_session_id"])
    assert secret is not None, "the taken desktop has no VNC secret for its viewers"
    client = await RFBClient.open_tcp(row["vnc_port"], secret=secret)
    try:
        await client.request_update(incremental=False)
        async with asyncio.timeout(scaled(10)):
            await client.read_update()
        return client.width, client.height
    finally:
        await client.close()


@pytest.fixture
async def pool_manager(light_config: DesktopSettings) -> AsyncIterator[ProcessDesktops]:
    mgr = process_desktops(light_config)
    try:
        yield mgr
    finally:
        records = state_records(light_config)
        if light_config.state_file.exists():
            records += starting_records(light_config)
        await mgr.close(stop_desktops=True)
        leftover = live_groups([g for r in records for g in pgids_of(r)])
        assert not leftover, f"process groups left behind: {leftover}"


async def test_a_matching_start_takes_a_ready_desktop_and_the_pool_refills(
    pool_manager: ProcessDesktops,
) -> None:
    pool = pooled(pool_manager)
    await filled(pool)
    row = await pool_manager.start(slot="agent-1", started_by="alice")
    assert row["from_pool"] is True and row["state"] == "running"
    assert (row["slot"], row["started_by"]) == ("agent-1", "alice")
    assert await first_frame(pool_manager, row) == (1280, 800)
    [listed] = await pool_manager.status()
    assert listed["desktop_session_id"] == row["desktop_session_id"]
    assert (await pool_manager.probe("agent-1"))["ok"] is True
    await filled(pool)  # a new one replaces the one taken
    again = await pool_manager.start(slot="agent-2")
    assert again["from_pool"] is True
    assert again["desktop_session_id"] != row["desktop_session_id"]
    assert again["display"] != row["display"]
    assert pool.report()["hits"] == 2 and pool.report()["misses"] == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="desktop cgroups need a root relay")
async def test_a_ready_desktop_waits_frozen_and_runs_once_taken(
    pool_manager: ProcessDesktops,
) -> None:
    pool = pooled(pool_manager)
    await filled(pool)
    [waiting] = starting_records(pool_manager.launcher.config)
    cgroup = pool_manager.launcher.cgroup(waiting["desktop_session_id"])
    assert cgroup is not None and cgroups.is_frozen(cgroup)
    used = cgroups.cpu_usec(cgroup)
    await asyncio.sleep(1.0)
    assert cgroups.cpu_usec(cgroup) == used, "a waiting desktop used CPU"
    row = await pool_manager.start(slot="agent")
    assert row["from_pool"] and row["desktop_session_id"] == waiting["desktop_session_id"]
    assert not cgroups.is_frozen(cgroup)
    assert await first_frame(pool_manager, row) == (1280, 800)
    assert (cgroups.cpu_usec(cgroup) or 0) > (used or 0)


async def test_an_empty_pool_or_another_shape_is_a_cold_start(
    pool_manager: ProcessDesktops,
) -> None:
    pool = pooled(pool_manager)
    await filled(pool)
    other = await pool_manager.start(slot="wide", geometry="1600x900")
    assert other["from_pool"] is False and other["geometry"] == "1600x900"
    kept = await pool_manager.start(slot="kept", persist_home=True)
    assert kept["from_pool"] is False
    assert ready(pool) == 1 and pool.report()["misses"] == 0  # none of those asked the pool
    taken = await pool_manager.start(slot="first")
    # The pool refills one at a time in the background: the next start finds it empty.
    cold = await pool_manager.start(slot="second")
    assert (taken["from_pool"], cold["from_pool"]) == (True, False)
    assert cold["state"] == "running"
    await first_frame(pool_manager, cold)
    assert pool.report()["hits"] == 1 and pool.report()["misses"] == 1


async def test_a_stopped_pooled_desktop_is_never_handed_out_again(
    pool_manager: ProcessDesktops,
) -> None:
    pool = pooled(pool_manager)
    seen: set[str] = set()
    for _ in range(3):
        await filled(pool)
        row = await pool_manager.start(slot="main")
        assert row["from_pool"] is True
        assert row["desktop_session_id"] not in seen
        seen.add(row["desktop_session_id"])
        stopped = await pool_manager.stop(slot="main", desktop_session_id=row["desktop_session_id"])
        assert stopped["stopped"] is True
        assert pool_manager.launcher.vnc_secret(row["desktop_session_id"]) is None


async def test_a_pooled_desktop_is_invisible_until_taken(
    pool_manager: ProcessDesktops, light_config: DesktopSettings
) -> None:
    pool = pooled(pool_manager)
    await filled(pool)
    [record] = starting_records(light_config)
    session_id = record["desktop_session_id"]
    assert await pool_manager.status() == []
    assert state_records(light_config) == []
    assert not pool_manager.holds(session_id)
    assert await pool_manager.running(session_id, "main") is None
    assert pool_manager.launcher.vnc_secret(session_id) is None
    with pytest.raises(InvalidArgs):  # its slot name is no slot anyone can name
        await pool_manager.probe(record["slot"])
    taken = await pool_manager.start(slot="main")
    assert taken["desktop_session_id"] == session_id
    assert [r["desktop_session_id"] for r in await pool_manager.status()] == [session_id]


def _made(path: Path) -> tuple[int, int] | None:
    """Which file is at ``path`` (its inode and change time: the filesystem gives a freed inode
    to the next file at once), or None."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_ctime_ns


async def test_a_killed_relay_leaves_its_pool_to_the_next_which_stops_it(
    light_config: DesktopSettings,
) -> None:
    first = process_desktops(light_config)
    pool = pooled(first, size=2)
    taken = await first.start(slot="main")  # a miss: the pool is still filling
    await filled(pool, 2)
    pooled_records = starting_records(light_config)
    assert len(pooled_records) == 2
    pooled_groups = [g for r in pooled_records for g in pgids_of(r)]
    sockets = [Path(f"/tmp/.X11-unix/X{r['display']}") for r in pooled_records]
    made = [_made(socket) for socket in sockets]
    del first, pool  # like SIGKILL of the relay: no close, no stop
    second = process_desktops(light_config)
    try:
        [adopted] = await second.adopt()
        assert adopted["desktop_session_id"] == taken["desktop_session_id"]
        assert not live_groups(pooled_groups)
        assert starting_records(light_config) == []
        run_dirs = {p.name for p in light_config.run_dir.iterdir() if p.is_dir()}
        assert run_dirs == {taken["desktop_session_id"]}
        for socket, was in zip(sockets, made, strict=True):
            # Gone, or another desktop's X server (the suite runs on several workers) took the
            # display number since.
            assert _made(socket) != was, socket
    finally:
        await second.close(stop_desktops=True)


async def test_a_pooled_start_that_fails_leaves_no_record_and_nothing_running(
    light_config: DesktopSettings, caplog: pytest.LogCaptureFixture
) -> None:
    # An x11vnc that exits at once: every pooled start fails after spawning the display, as a
    # start can (a start timeout short enough to fail still let one start in ten through).
    config = dataclasses.replace(light_config, x11vnc_binary="/bin/false")
    mgr = process_desktops(config)
    pool = pooled(mgr)
    spawned: set[int] = set()

    def failed() -> bool:
        if config.state_file.exists():
            spawned.update(g for r in starting_records(config) for g in pgids_of(r))
        return "did not start" in caplog.text

    try:
        await wait_until(failed, scaled(30), "the pooled start to fail")
        assert spawned, "the start spawned nothing before it failed"
        # Until the pool tries again, nothing of the failed start is left: no record that
        # the next relay would take for a start in progress, no process.
        assert pool.report()["profiles"][0] == {
            "profile": "minimal",
            "size": 1,
            "ready": 0,
            "starting": 0,
        }
        assert starting_records(config) == []
        assert not live_groups(sorted(spawned))
    finally:
        await mgr.close(stop_desktops=True)


async def test_a_closing_relay_stops_its_pool_and_keeps_its_desktops(
    light_config: DesktopSettings,
) -> None:
    first = process_desktops(light_config)
    pool = pooled(first)
    await filled(pool)
    row = await first.start(slot="main")
    await filled(pool)
    [pooled_record] = starting_records(light_config)
    await first.close(stop_desktops=False)
    assert not live_groups(pgids_of(pooled_record))
    assert starting_records(light_config) == []
    second = process_desktops(light_config)
    try:
        [adopted] = await second.adopt()
        assert adopted["desktop_session_id"] == row["desktop_session_id"]
    finally:
        await second.close(stop_desktops=True)


async def test_a_relay_handing_over_leaves_its_pool_to_the_next_which_stops_it(
    light_config: DesktopSettings,
) -> None:
    first = process_desktops(light_config)
    pool = pooled(first)
    await filled(pool)
    row = await first.start(slot="main")
    await filled(pool)
    [pooled_record] = starting_records(light_config)
    await first.close(stop_desktops=False, stop_pool=False)
    assert live_groups(pgids_of(pooled_record)) == pgids_of(pooled_record)
    second = process_desktops(light_config)
    try:
        [adopted] = await second.adopt()
        assert adopted["desktop_session_id"] == row["desktop_session_id"]
        assert not live_groups(pgids_of(pooled_record))
        assert starting_records(light_config) == []
    finally:
        await second.close(stop_desktops=True)


async def test_a_relay_stopping_its_desktops_stops_its_pool(
    light_config: DesktopSettings,
) -> None:
    mgr = process_desktops(light_config)
    pool = pooled(mgr, size=2)
    await filled(pool, 2)
    records = starting_records(light_config)
    await mgr.close(stop_desktops=True)
    assert not live_groups([g for r in records for g in pgids_of(r)])
    assert starting_records(light_config) == []
    assert not [p for p in light_config.run_dir.iterdir() if p.is_dir()]


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("nosuch=1", "unknown profile 'nosuch'"),
        ("minimal=-1", "whole number"),
        ("minimal", "PROFILE=COUNT"),
        ("minimal=two", "whole number"),
        ("minimal=1,minimal=2", "named twice"),
    ],
)
def test_a_bad_pool_setting_is_refused_naming_it(raw: str, said: str, tmp_path: Path) -> None:
    environ = {"RELAYDESK_POOL": raw, "RELAYDESK_STATE_DIR": str(tmp_path)}
    with pytest.raises(RelayConfigError) as refused:
        RelaySettings.from_env(
            "http://127.0.0.1:9", None, environ={**environ, "RELAYDESK_RELAY_TOKEN": "t"}
        )
    assert "RELAYDESK_POOL" in refused.value.message and said in refused.value.message


@pytest.mark.parametrize("raw", ["", "0", "minimal=0"])
def test_no_pool_is_the_default(raw: str, tmp_path: Path) -> None:
    environ = {"RELAYDESK_POOL": raw, "RELAYDESK_STATE_DIR": str(tmp_path)}
    settings = RelaySettings.from_env(
        "http://127.0.0.1:9", None, environ={**environ, "RELAYDESK_RELAY_TOKEN": "t"}
    )
    assert settings.desktops.pool == ()
