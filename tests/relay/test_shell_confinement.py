"""What an agent's shell command starts stays inside its desktop: a ``setsid`` program started
through the shell tool (a relay with ``RELAYDESK_CUA_SHELL=1``) starts in the desktop's cgroup
and dies with the desktop's stop, while another desktop of the same relay, and what its own
shell started, keep running.

Real Xvfb, x11vnc, websockify and ``/bin/sh``, as root like CI (docs/desktop-tools.md)."""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from relay.desktop_tools.service import DesktopTools
from relay.desktop_tools.settings import DesktopToolSettings
from relay.desktops import DesktopSettings, ProcessDesktops, process_desktops
from relay.desktops.backend import VirtualBackend
from relay.desktops.cgroups import cgroup2_mount
from tests.support.stack import wait_until
from wire.ops import RelayRow

pytestmark = pytest.mark.integration

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="desktop cgroups need a root relay")


def _marker() -> str:
    return f"{600 + secrets.randbelow(10**6) / 10**6:.6f}"


def _sleepers(marker: str) -> list[psutil.Process]:
    return [
        proc
        for proc in psutil.process_iter(["cmdline", "status"])
        if proc.info["cmdline"] == ["sleep", marker] and proc.info["status"] != "zombie"
    ]


def _cgroup_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cgroup").read_text(encoding="ascii").strip().split("::", 1)[-1]


@pytest.fixture
async def manager(light_config: DesktopSettings) -> AsyncIterator[ProcessDesktops]:
    mgr = process_desktops(dataclasses.replace(light_config, max_desktops=2))
    try:
        yield mgr
    finally:
        await mgr.close(stop_desktops=True)


async def _shell_setsid(tools: DesktopTools, backend: VirtualBackend, row: RelayRow) -> int:
    """Start ``setsid sleep <marker>`` through the shell tool; its pid, once it runs."""
    marker = _marker()
    done = await tools.shell(
        backend,
        row,
        {
            "desktop_session_id": row["desktop_session_id"],
            "command": f"setsid sleep {marker} </dev/null >/dev/null 2>&1 & echo started",
        },
    )
    assert done["stdout"] == "started\n", done
    await wait_until(lambda: _sleepers(marker), 10, "the setsid program to run")
    [proc] = _sleepers(marker)
    assert os.getsid(proc.pid) == proc.pid, "it left the shell's session"
    return proc.pid


@ROOT_ONLY
async def test_a_setsid_program_from_the_shell_tool_dies_with_its_desktop_only(
    manager: ProcessDesktops,
) -> None:
    assert cgroup2_mount() is not None, "CI hosts have cgroup2"
    tools = DesktopTools(DesktopToolSettings(cua_shell=True))
    backend = VirtualBackend(manager)
    doomed: RelayRow = await manager.start(slot="doomed")
    kept: RelayRow = await manager.start(slot="kept")
    escaped = await _shell_setsid(tools, backend, doomed)
    survivor = await _shell_setsid(tools, backend, kept)
    try:
        assert _cgroup_of(escaped).endswith("/" + doomed["desktop_session_id"])
        assert _cgroup_of(survivor).endswith("/" + kept["desktop_session_id"])
        await manager.stop(
            kind="virtual", slot="doomed", desktop_session_id=doomed["desktop_session_id"]
        )
        assert not psutil.pid_exists(escaped) or psutil.Process(escaped).status() == "zombie", (
            "a setsid program started by the shell tool outlived its desktop's stop"
        )
        [row] = await manager.status()
        assert row["desktop_session_id"] == kept["desktop_session_id"]
        assert psutil.Process(survivor).is_running(), "another desktop's program was killed"
        assert (await manager.probe("kept"))["ok"] is True
    finally:
        for pid in (escaped, survivor):
            if psutil.pid_exists(pid):
                psutil.Process(pid).kill()
