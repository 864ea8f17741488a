"""A relay killed while it records a desktop loses at most the segment it was writing; the
restarted relay re-adopts the desktop and goes on recording it under the same recording
(docs/recording.md)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.viewer_stack import Desktop, ViewerStack, viewer_stack
from tests.support.recording_session import (
    BLUE,
    GREY,
    RELAY_ENV,
    ClickWindow,
    base,
    get,
    spool,
)
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

SEGMENT_MS = int(float(RELAY_ENV["RELAYDESK_RECORDING_SEGMENT_S"]) * 1000)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("rec-kill"), relay_env=RELAY_ENV) as s:
        yield s


async def test_a_killed_relay_loses_at_most_one_segment_and_goes_on_recording(stack):
    started = await stack.action("desktop_start", slot="main", geometry="1280x800", record=True)
    sid = started["desktop"]["desktop_session_id"]
    rows = await stack.relays.request(stack.relay_id, "desktop.status", {}, 10.0)
    display = next(d for d in rows["desktops"] if d["desktop_session_id"] == sid)["display"]
    stack.desktops.append(Desktop(sid, "main", display, 0, 0, started["viewer_url"]))
    one = f"{base(stack)}/{started['recording_id']}"

    async def segments() -> int:
        return int((await get(stack, one)).json()["recording"]["segments"])

    # A screen that changes all the time, so every segment has frames.
    window = await asyncio.to_thread(ClickWindow, display)

    async def keep_changing() -> None:
        for step in itertools.count():
            await asyncio.to_thread(window.paint, (GREY, BLUE)[step % 2])
            await asyncio.sleep(0.2)

    mover = asyncio.create_task(keep_changing())
    try:
        await wait_until(lambda: _count(segments, 1), 30, "a first segment on the server")
        killed_ms = time.time_ns() // 1_000_000
        stack.relay.kill()
        await wait_until(lambda: not stack.relays.is_connected(stack.relay_id), 20, "the relay")
        stack.start_relay()
        await wait_until(lambda: stack.relays.is_connected(stack.relay_id), 30, "the relay back")
        back_ms = time.time_ns() // 1_000_000
        before = await segments()
        await wait_until(lambda: _count(segments, before + 2), 60, "segments after it")
    finally:
        mover.cancel()
        await asyncio.gather(mover, return_exceptions=True)
        await asyncio.to_thread(window.close)
    await stack.action("desktop_record", on=False, desktop_session_id=sid)
    await wait_until(lambda: not spool(stack, sid).exists(), 60, "every segment handed over")
    recording = (await get(stack, one)).json()["recording"]
    assert recording["recording"] is False
    shown = _spans(stack, started["recording_id"])
    finished_before_kill = [s for s in shown if s[1] <= killed_ms]
    after_restart = [s for s in shown if s[0] >= back_ms - 1000]
    assert finished_before_kill and after_restart, (shown, killed_ms, back_ms)
    lost_before_kill = killed_ms - finished_before_kill[-1][1]
    assert lost_before_kill <= SEGMENT_MS + 1000, (shown, killed_ms)


async def _count(segments: Any, at_least: int) -> bool:
    return bool(await segments() >= at_least)


def _spans(stack: ViewerStack, recording_id: str) -> list[tuple[int, int]]:
    """(start_ms, end_ms) of each segment the server keeps, in order (its manifest)."""
    recording = stack.app.state.parts.recordings.files.load(recording_id)
    return [(s.start_ms, s.end_ms) for s in recording.segments]
