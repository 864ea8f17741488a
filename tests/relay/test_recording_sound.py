"""A segment's sound track (relay/recording/encoder.py): the captured frames land at their
capture time on the pictures' clock, a gap in the capture stays silent, and both codecs'
files carry a track a decoder reads (docs/recording.md)."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from relay.recording.encoder import CODECS, SegmentWriter

pytestmark = pytest.mark.unit

START_MS = 1_000_000
FRAME_MS = 20
SAMPLES = 960  # 20 ms at 48 kHz, per channel


def frame(index: int, loud: bool) -> bytes:
    """One captured 20-ms frame (s16le stereo): a 440 Hz tone or digital silence."""
    t = (np.arange(SAMPLES) + index * SAMPLES) / 48_000
    mono = (np.sin(2 * np.pi * 440 * t) * 8000 * loud).astype(np.int16)
    return np.repeat(mono[:, None], 2, axis=1).tobytes()


def loudest(path: Path, start_s: float, end_s: float) -> float:
    """The RMS (of full scale) of the loudest decoded frame that starts in the window."""
    found = 0.0
    with av.open(str(path), "r") as container:
        for decoded in container.decode(audio=0):
            if decoded.time is None or not start_s <= decoded.time < end_s:
                continue
            samples = decoded.to_ndarray().astype(np.float64)
            found = max(found, float(np.sqrt(np.mean(samples**2))))
    return found


@pytest.mark.parametrize(("codec", "track"), [("h264", "aac"), ("vp8", "opus")])
def test_the_sound_is_where_it_was_heard_and_the_pictures_keep_their_times(
    tmp_path: Path, codec: str, track: str
) -> None:
    path = tmp_path / f"segment.{codec}"
    writer = SegmentWriter(path, START_MS, 320, 240, CODECS[codec], audio=True)
    picture = np.zeros((240, 320, 4), np.uint8)
    for index in range(300):  # 6 s of capture; a picture every 250 ms
        heard_ms = START_MS + (index + 1) * FRAME_MS
        if index % 12 == 0:
            picture[:] = index % 250
            writer.add(picture, heard_ms, keyframe=index == 0)
        if 150 <= index < 200:
            continue  # the capture paused for a second (3 s to 4 s)
        loud = 50 <= index < 100 or 200 <= index < 250  # 1 s to 2 s, and 4 s to 5 s
        writer.add_audio(frame(index, loud), heard_ms * 1000)
    writer.close(START_MS + 6000)

    with av.open(str(path), "r") as container:
        assert [s.codec_context.name for s in container.streams.audio] == [track]
        shown = [round(f.time * 1000) for f in container.decode(video=0) if f.time is not None]
    # The pictures' own times (ms since the recording's start), as without sound.
    assert shown[:3] == [20, 260, 500] and shown[-1] == 6000, shown
    for start_s, end_s in ((1.1, 1.9), (4.1, 4.9)):
        assert loudest(path, start_s, end_s) > 0.05, (start_s, end_s)
    # Before, between (the gap in the capture too) and after the tones: silence.
    for start_s, end_s in ((0.0, 0.9), (2.1, 2.9), (3.1, 3.9), (5.1, 6.0)):
        assert loudest(path, start_s, end_s) < 0.001, (start_s, end_s)


def test_a_desktop_without_sound_has_no_track(tmp_path: Path) -> None:
    path = tmp_path / "segment.h264"
    writer = SegmentWriter(path, START_MS, 320, 240, CODECS["h264"])
    writer.add(np.zeros((240, 320, 4), np.uint8), START_MS + 20, keyframe=True)
    writer.add_audio(frame(0, True), (START_MS + 40) * 1000)  # ignored: no track
    writer.close(START_MS + 1000)
    with av.open(str(path), "r") as container:
        assert len(container.streams.video) == 1 and not container.streams.audio
