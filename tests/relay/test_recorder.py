"""The relay's recorder on a screen that stays still: segments, and a video that lasts until
the recording ends (docs/recording.md), encoded for real."""

from __future__ import annotations

import asyncio
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
import pytest

from relay.recording.recorder import Recorder, RecordingSettings, RecordingState, wall_ms
from tests.support.stack import wait_until
from wire.recording import SegmentInfo

pytestmark = pytest.mark.unit

WIDTH, HEIGHT = 320, 240


def _duration_ms(path: Path) -> float:
    container = av.open(str(path))
    try:
        stream = container.streams.video[0]
        assert stream.time_base is not None
        last = max(packet.pts for packet in container.demux(stream) if packet.pts is not None)
        return float(last * stream.time_base) * 1000
    finally:
        container.close()


async def test_a_still_screen_ends_its_video_at_the_recordings_end(tmp_path: Path) -> None:
    picture: npt.NDArray[np.uint8] = np.full((HEIGHT, WIDTH, 4), 90, dtype=np.uint8)
    segments: list[SegmentInfo] = []

    async def grab() -> npt.NDArray[np.uint8]:
        return picture

    async def announce(info: SegmentInfo) -> None:
        segments.append(info)

    start = wall_ms()
    state = RecordingState("s1", "rec_still", start, 0)
    settings = RecordingSettings(fps=20, keyframe_s=1, segment_s=0.3)
    recorder = Recorder(tmp_path, state, grab, announce, settings)
    recorder.start()
    await wait_until(lambda: len(segments) == 1, 10, "the first segment")
    await asyncio.sleep(0.5)  # still: no segment opens meanwhile
    assert len(segments) == 1
    stopped_at = wall_ms()
    await recorder.stop()
    assert len(segments) == 2, segments
    last = segments[-1]
    assert last["end_ms"] >= stopped_at
    video = tmp_path / f"rec_still-{last['seq']:06d}.seg"
    assert _duration_ms(video) >= stopped_at - start - 1
