"""Reads do not queue behind a start: ``status`` and ``running`` answer for the desktops that run
while another slot's start (seconds) holds the lifecycle lock; one asking for the slot being
started waits for it (docs/desktops.md, "Lifecycle lock and compare-and-stop").

Real Xvfb, x11vnc and websockify."""

from __future__ import annotations

import asyncio
import json

import pytest

from relay.desktops import ProcessDesktops
from tests.support.stack import wait_until

pytestmark = pytest.mark.integration

MAIN = "main"


def _recorded_starts(manager: ProcessDesktops) -> list[object]:
    try:
        return list(json.loads(manager.config.state_file.read_text()).get("starting") or [])
    except (OSError, ValueError):
        return []


async def test_reads_answer_during_a_start_of_another_slot(manager: ProcessDesktops) -> None:
    main = await manager.start()
    starting = asyncio.create_task(manager.start(slot="second"))
    try:
        await wait_until(
            lambda: _recorded_starts(manager), 10, "the second start to begin", interval=0.001
        )
        # Neither read awaits the lock: both answer before the start can have ended.
        assert [r["desktop_session_id"] for r in await manager.status()] == [
            main["desktop_session_id"]
        ]
        found = await manager.running(None, MAIN)
        assert found is not None and found["desktop_session_id"] == main["desktop_session_id"]
        assert not starting.done()

        # The slot being started: its start is waited for, and its desktop found.
        second = await manager.running(None, "second")
        assert starting.done()
        assert second is not None
        assert second["desktop_session_id"] == starting.result()["desktop_session_id"]
    finally:
        await starting
