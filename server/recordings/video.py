"""A recording's video: its segments joined into one file (MP4 for H.264, WebM for VP8), and
pictures decoded from it.

Segments carry presentation times on the recording's own clock, so joining them is a remux
(packets copied, nothing re-encoded). The joined file is kept beside the segments and made
again when more segments arrived. A desktop recorded with its sound has an audio track in
its segments (AAC in MP4, Opus in WebM); it is joined the same way. Decoding for the
trajectory export seeks to the keyframe before a moment and decodes up to it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import av
import numpy as np
import numpy.typing as npt

from server.recordings.files import Recording, RecordingFiles

# codec → (container, media type); MP4's index goes first, so a player starts at once.
CONTAINERS: Final = {"h264": ("mp4", "video/mp4"), "vp8": ("webm", "video/webm")}
CONTAINER_OPTIONS: Final = {"mp4": {"movflags": "+faststart"}, "webm": {}}


def media_type(recording: Recording) -> str:
    return CONTAINERS[recording.codec][1]


def joined_video(files: RecordingFiles, recording: Recording) -> Path | None:
    """The recording's segments as one video file (None while it has none)."""
    if not recording.segments:
        return None
    container = CONTAINERS[recording.codec][0]
    folder = files.folder(recording.recording_id)
    target = folder / f"joined-{len(recording.segments)}.{container}"
    if target.exists():
        return target
    for stale in folder.glob("joined-*"):
        stale.unlink(missing_ok=True)
    tmp = folder / f".{target.name}.{os.getpid()}.tmp"
    paths = [files.segment_path(recording.recording_id, s.seq) for s in recording.segments]
    _remux(paths, tmp, container)
    tmp.replace(target)
    return target


def _remux(paths: Sequence[Path], target: Path, container: str) -> None:
    out: Any = av.open(str(target), "w", format=container, options=CONTAINER_OPTIONS[container])
    try:
        # Every track the file will have is declared before the first packet is written.
        streams: dict[str, Any] = {}
        for path in paths:
            with av.open(str(path)) as probe:
                for kind, found in (
                    ("video", probe.streams.video),
                    ("audio", probe.streams.audio),
                ):
                    if kind not in streams and found:
                        streams[kind] = out.add_stream_from_template(found[0])
            if len(streams) == 2:
                break
        last_dts: dict[str, int] = {}
        for path in paths:
            source: Any = av.open(str(path))
            try:
                tracks = [
                    s
                    for s in (*source.streams.video[:1], *source.streams.audio[:1])
                    if s.type in streams
                ]
                for packet in source.demux(tracks):
                    kind = packet.stream.type
                    if packet.dts is None or packet.dts <= last_dts.get(kind, -1):
                        continue
                    last_dts[kind] = packet.dts
                    packet.stream = streams[kind]
                    out.mux(packet)
            finally:
                source.close()
    finally:
        out.close()


def frames_at(video: Path, moments_ms: Sequence[int]) -> list[npt.NDArray[np.uint8] | None]:
    """The picture shown at each moment (ms on the recording's clock): the last frame whose
    time is at or before it (None before the first frame)."""
    container: Any = av.open(str(video))
    try:
        stream = container.streams.video[0]
        unit = float(stream.time_base) * 1000
        pictures: list[npt.NDArray[np.uint8] | None] = []
        for moment in moments_ms:
            container.seek(int(moment / unit), stream=stream, backward=True, any_frame=False)
            shown = None
            for frame in container.decode(stream):
                if frame.pts is not None and frame.pts * unit > moment:
                    break
                shown = frame
            pictures.append(None if shown is None else shown.to_ndarray(format="rgb24"))
        return pictures
    finally:
        container.close()
