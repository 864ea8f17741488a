"""One video segment as a file: H.264 in MP4 (libx264) by default, or VP8 in WebM (libvpx),
encoded with PyAV, change-driven.

A :class:`SegmentWriter` is used from one thread. Frames carry their wall-clock time;
presentation times count milliseconds from the recording's start, so the segments of one
recording join into one video without re-timing (``server/recordings/video.py``). The
codecs and their settings were measured with ``benchmarks/bench_recording.py``
(docs/recording.md): on a scrolling page at 1280x800, x264's ``ultrafast`` took about a sixth
of libvpx's fastest realtime CPU per frame, for a fifth of the bytes.
"""

from __future__ import annotations

import fractions
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import av
import numpy as np
import numpy.typing as npt
from av.video.frame import PictureType

log = logging.getLogger(__name__)

TIME_BASE: Final = fractions.Fraction(1, 1000)


@dataclass(frozen=True)
class Codec:
    name: str
    encoder: str
    container: str
    options: dict[str, str]


CODECS: Final = {
    # No B-frames or look-ahead (a frame is written as it comes); crf 26 keeps text legible.
    "h264": Codec(
        "h264", "libx264", "mp4", {"preset": "ultrafast", "tune": "zerolatency", "crf": "26"}
    ),
    # libvpx's realtime mode at its fastest speed, constant quality.
    "vp8": Codec(
        "vp8",
        "libvpx",
        "webm",
        {
            "deadline": "realtime",
            "cpu-used": "16",
            "lag-in-frames": "0",
            "crf": "10",
            "b": "1500k",
            "auto-alt-ref": "0",
        },
    ),
}
DEFAULT_CODEC: Final = "h264"
# The encoder never puts a keyframe on its own between ours.
GOP: Final = 100_000


class SegmentWriter:
    """Writes frames to ``path``; :meth:`close` finishes the file."""

    def __init__(
        self,
        path: Path,
        recording_start_ms: int,
        width: int,
        height: int,
        codec: Codec = CODECS[DEFAULT_CODEC],
    ) -> None:
        self.path = path
        self.recording_start_ms = recording_start_ms
        self.width, self.height = width, height
        self.frames = 0
        self.start_ms: int | None = None
        self.last_ms: int | None = None
        self._last_pts = -1
        self.codec = codec
        self._container: Any = av.open(str(path), "w", format=codec.container)
        stream: Any = self._container.add_stream(codec.encoder, rate=1000)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        stream.time_base = TIME_BASE
        stream.codec_context.time_base = TIME_BASE
        stream.codec_context.gop_size = GOP
        stream.codec_context.options = dict(codec.options)
        self._stream = stream
        self._last: npt.NDArray[np.uint8] | None = None

    def add(self, bgra: npt.NDArray[np.uint8], wall_ms: int, *, keyframe: bool) -> None:
        """Encode one frame captured at ``wall_ms`` (the first of a segment is a keyframe)."""
        picture = np.ascontiguousarray(bgra[: self.height, : self.width])
        frame = av.VideoFrame.from_ndarray(picture, format="bgra")
        pts = max(self._last_pts + 1, wall_ms - self.recording_start_ms)
        frame.pts, frame.time_base = pts, TIME_BASE
        if keyframe or self.frames == 0:
            frame.pict_type = PictureType.I
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self._last_pts = pts
        self._last = bgra
        self.frames += 1
        self.start_ms = wall_ms if self.start_ms is None else self.start_ms
        self.last_ms = wall_ms

    def close(self, end_ms: int) -> None:
        """Finish the file; the last picture is repeated at ``end_ms`` so the segment lasts
        until then (a still screen adds no frame of its own)."""
        if self._last is not None and end_ms - self.recording_start_ms > self._last_pts + 1:
            self.add(self._last, end_ms, keyframe=False)
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()

    def abort(self) -> None:
        """Close the file without finishing it (its desktop or relay is going away)."""
        try:
            self._container.close()
        except (OSError, av.FFmpegError) as err:
            log.info("an unfinished segment closed with %s (deleted)", err)
        self.path.unlink(missing_ok=True)
