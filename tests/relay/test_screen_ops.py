"""Screen ops against real desktops of processes: connections follow desktops."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest

from relay.desktops import ProcessDesktops
from relay.desktops.backend import VirtualBackend
from relay.handlers import Handlers
from relay.screen.service import ScreenService
from wire.ops import DesktopStartResult, ImageResult, PointResult, RelayRow

pytestmark = pytest.mark.integration


@pytest.fixture
def screen(manager: ProcessDesktops, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScreenService]:
    monkeypatch.setenv("XAUTHORITY", str(manager.authority.path))
    service = ScreenService()
    try:
        yield service
    finally:
        service.close()


async def _restart(manager: ProcessDesktops, row: RelayRow) -> DesktopStartResult:
    stop = {"kind": "virtual", "slot": "main", "desktop_session_id": str(row["desktop_session_id"])}
    assert (await manager.stop(**stop))["stopped"] is True
    return await manager.start(kind="virtual", slot="main", geometry="800x600")


async def _restart_on_the_same_display(
    manager: ProcessDesktops, ops: Handlers, row: RelayRow, tries: int = 5
) -> DesktopStartResult:
    """A restart that lands on the display of the desktop the screen service last used.

    Xvfb takes the lowest free display, which another program on the machine (a test beside
    this one) may take between the stop and the start: then the new desktop is used once (a
    screenshot) and restarted again, until a restart reuses the display."""
    for _ in range(tries):
        again = await _restart(manager, row)
        if again["display"] == row["display"]:
            return again
        shot = await ops.screen("screenshot", {})
        assert shot["desktop_session_id"] == again["desktop_session_id"]
        row = again
    raise AssertionError(f"no restart reused its display in {tries} tries")


async def test_first_actions_after_a_restart_on_the_same_display_succeed(
    manager: ProcessDesktops, screen: ScreenService
) -> None:
    ops = Handlers([VirtualBackend(manager, screen)])
    first = await manager.start(kind="virtual", slot="main", geometry="800x600")
    shot = await ops.screen("screenshot", {})
    assert shot["desktop_session_id"] == first["desktop_session_id"]

    second = await _restart_on_the_same_display(manager, ops, first)
    shot = cast(ImageResult, await ops.screen("screenshot", {}))
    assert (shot["width"], shot["desktop_session_id"]) == (800, second["desktop_session_id"])

    third = await _restart(manager, second)
    moved = cast(PointResult, await ops.screen("move", {"x": 10, "y": 20}))
    assert (moved["x"], moved["desktop_session_id"]) == (10, third["desktop_session_id"])


async def test_keyboard_state_after_a_restart_on_the_same_display_succeeds(
    manager: ProcessDesktops, screen: ScreenService
) -> None:
    handlers = Handlers([VirtualBackend(manager, screen)])
    first = await manager.start(kind="virtual", slot="main", geometry="800x600")
    args = {"desktop_session_id": first["desktop_session_id"]}
    assert "num_lock" in await handlers._keyboard_state(None, args)  # type: ignore[arg-type]
    second = await _restart(manager, first)
    args = {"desktop_session_id": second["desktop_session_id"]}
    assert "num_lock" in await handlers._keyboard_state(None, args)  # type: ignore[arg-type]
