"""One video segment as a file: H.264 in MP4 (libx264) by default, or VP8 in WebM (libvpx),
encoded with PyAV, change-driven.

A :class:`SegmentWriter` is used from one thread. Frames carry their wall-clock time;
presentation times count milliseconds from the recording's start, so the segments of one
recording join into one video without re-timing (``server/recordings/video.py``). The
codecs and their settings were measured with ``benchmarks/bench_recording.py``
(docs/recording.md): on a scrolling page at 1280x800, x264's ``ultrafast`` took about a sixth
of libvpx's fastest realtime CPU per frame, for a fifth of the bytes.

A desktop with sound gets an audio track in the same file (AAC in MP4, Opus in WebM): the
captured frames are placed by their capture time on the same clock as the pictures, and
the video's own timing is untouched.
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
class AudioCodec:
    encoder: str
    bit_rate: int
    sample_format: str  # what the encoder takes: planar float (AAC) or interleaved s16 (Opus)
    frame_samples: int
    options: dict[str, str]


@dataclass(frozen=True)
class Codec:
    name: str
    encoder: str
    container: str
    options: dict[str, str]
    audio: AudioCodec


CODECS: Final = {
    # No B-frames or look-ahead (a frame is written as it comes); crf 26 keeps text legible.
    "h264": Codec(
        "h264",
        "libx264",
        "mp4",
        {"preset": "ultrafast", "tune": "zerolatency", "crf": "26"},
        # FFmpeg's own AAC encoder; its "fast" coder takes half the CPU of the default one
        # (about 1.6 % of a core for 48 kHz stereo) at the same size.
        AudioCodec("aac", 64_000, "fltp", 1024, {"aac_coder": "fast"}),
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
        AudioCodec("libopus", 48_000, "s16", 960, {}),
    ),
}
DEFAULT_CODEC: Final = "h264"
# The encoder never puts a keyframe on its own between ours.
GOP: Final = 100_000
# The desktop's sound as the relay captures it (relay/audio.py): 48 kHz, s16le, stereo.
AUDIO_RATE: Final = 48_000
AUDIO_CHANNELS: Final = 2
AUDIO_TIME_BASE: Final = fractions.Fraction(1, AUDIO_RATE)
# Captured sound further than this from where its capture time puts it is re-placed: a gap
# (the capture paused) becomes silence, sound ahead of its time is dropped.
AUDIO_SLACK: Final = AUDIO_RATE // 5


class SegmentWriter:
    """Writes frames to ``path``; :meth:`close` finishes the file."""

    def __init__(
        self,
        path: Path,
        recording_start_ms: int,
        width: int,
        height: int,
        codec: Codec = CODECS[DEFAULT_CODEC],
        *,
        audio: bool = False,
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
        self._audio: Any = None
        if audio:
            sound: Any = self._container.add_stream(codec.audio.encoder, rate=AUDIO_RATE)
            sound.layout = "stereo"
            sound.bit_rate = codec.audio.bit_rate
            sound.codec_context.options = dict(codec.audio.options)
            sound.time_base = AUDIO_TIME_BASE
            self._audio = sound
        # Samples waiting for a whole encoder frame, and the position of the first of them
        # (samples since the recording's start).
        self._pending = np.zeros((0, AUDIO_CHANNELS), dtype=np.int16)
        self._pending_at: int | None = None
        self.audio_samples = 0

    @property
    def has_audio(self) -> bool:
        return self._audio is not None

    def add_audio(self, pcm: bytes, captured_us: int) -> None:
        """Add captured sound (s16le stereo) whose last sample was heard at ``captured_us``."""
        if self._audio is None:
            return
        samples = np.frombuffer(pcm, dtype=np.int16).reshape(-1, AUDIO_CHANNELS)
        at = (captured_us - self.recording_start_ms * 1000) * AUDIO_RATE // 1_000_000
        at -= len(samples)
        if self._pending_at is None:
            self._pending_at = max(0, at)
        else:
            follows = self._pending_at + len(self._pending)
            if at > follows + AUDIO_SLACK:
                self._flush_audio()  # a gap: the next sound starts where it was heard
                self._pending_at = at
            elif at < follows - AUDIO_SLACK:
                return
        self._pending = np.concatenate((self._pending, samples))
        size = self.codec.audio.frame_samples
        while len(self._pending) >= size:
            self._encode_audio(self._pending[:size])
            self._pending = self._pending[size:]

    def _encode_audio(self, samples: npt.NDArray[np.int16]) -> None:
        assert self._pending_at is not None
        if self.codec.audio.sample_format == "fltp":
            planes = np.ascontiguousarray(samples.T, dtype=np.float32) / 32768.0
            frame = av.AudioFrame.from_ndarray(planes, format="fltp", layout="stereo")
        else:
            packed = np.ascontiguousarray(samples).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(packed, format="s16", layout="stereo")
        frame.sample_rate = AUDIO_RATE
        frame.pts, frame.time_base = self._pending_at, AUDIO_TIME_BASE
        for packet in self._audio.encode(frame):
            self._container.mux(packet)
        self._pending_at += len(samples)
        self.audio_samples += len(samples)

    def _flush_audio(self) -> None:
        """Encode what waits, the last frame filled up with silence."""
        if self._audio is None or not len(self._pending):
            return
        size = self.codec.audio.frame_samples
        padded = np.zeros((size, AUDIO_CHANNELS), dtype=np.int16)
        padded[: len(self._pending)] = self._pending
        self._encode_audio(padded)
        self._pending = self._pending[:0]

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
        if self._audio is not None:
            self._flush_audio()
            for packet in self._audio.encode():
                self._container.mux(packet)
        self._container.close()

    def abort(self) -> None:
        """Close the file without finishing it (its desktop or relay is going away)."""
        try:
            self._container.close()
        except (OSError, av.FFmpegError) as err:
            log.info("an unfinished segment closed with %s (deleted)", err)
        self.path.unlink(missing_ok=True)
