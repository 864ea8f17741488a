"""Fixtures for relay tests that run real desktop processes (Xvfb, x11vnc, websockify)."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from relay.desktops import DesktopSettings, ProcessDesktops, process_desktops
from relay.desktops.process import group_exists
from tests.support.processes import scaled
from wire.ops import RelayRow

NEEDS_X = shutil.which("Xvfb") is None or shutil.which("x11vnc") is None


def state_records(config: DesktopSettings) -> list[dict[str, Any]]:
    if not config.state_file.exists():
        return []
    data = json.loads(config.state_file.read_text())
    return list(data["desktops"])


def record_for(config: DesktopSettings, session_id: str) -> dict[str, Any]:
    return next(r for r in state_records(config) if r["desktop_session_id"] == session_id)


def pgids_of(record: dict[str, Any]) -> list[int]:
    return [int(p["pgid"]) for p in record["processes"]]


def pid_of(record: dict[str, Any], name: str) -> int:
    return next(int(p["pid"]) for p in record["processes"] if p["name"] == name)


def live_groups(pgids: list[int]) -> list[int]:
    return [g for g in pgids if group_exists(g)]


def leaked_shm(record: dict[str, Any]) -> list[str]:
    """SysV shared memory segments still held for processes of this desktop record."""
    pids = {str(p["pid"]) for p in record["processes"]}
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return []
    return [r.split()[1] for r in rows if r.split()[4] in pids and r.split()[6] == "0"]


@pytest.fixture(autouse=True)
def _no_developer_display(monkeypatch: pytest.MonkeyPatch) -> None:
    # Desktops must never fall back to the developer's own screen.
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)


@pytest.fixture
def light_config(tmp_path: Path) -> DesktopSettings:
    """Real Xvfb, x11vnc, websockify and D-Bus; no WM and no apps, to keep starts fast."""
    assert not NEEDS_X, "Xvfb and x11vnc are installed by scripts/install"
    return DesktopSettings(
        state_dir=tmp_path / "state",
        apps=(),
        window_manager=(),
        default_profile="minimal",
        watchdog_interval_s=0.25,
        start_timeout_s=scaled(15),
        probe_timeout_s=scaled(3),
    )


class Recorder:
    """Collects ``on_change`` events."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def __call__(self, event: RelayRow) -> None:
        self.events.append(dict(event))


@pytest.fixture
def events() -> Recorder:
    return Recorder()


@pytest.fixture
async def manager(
    light_config: DesktopSettings, events: Recorder
) -> AsyncIterator[ProcessDesktops]:
    mgr = process_desktops(light_config, on_change=events)
    try:
        yield mgr
    finally:
        records = state_records(light_config)
        await mgr.close(stop_desktops=True)
        leftover = live_groups([g for r in records for g in pgids_of(r)])
        assert not leftover, f"process groups left behind: {leftover}"
        assert not [s for r in records for s in leaked_shm(r)], "shared memory leaked"
