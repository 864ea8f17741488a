"""One recorded desktop: its capture loop, its segments on disk, its state for a restart.

Every ``1/fps`` seconds the loop grabs the desktop's screen through the relay's screen
service (the screen tool's own capture, denied apps' windows black) and encodes a frame only
when the picture changed; a frame after ``keyframe_s`` without a keyframe is one, so a seek
decodes at most that much. Every ``segment_s`` the segment is finished, renamed into place
and announced. A relay killed mid-segment loses that segment's part only: the finished ones
wait in the spool until the server acknowledges them, and the state file lets a restarted
relay go on recording a re-adopted desktop under the same recording id.

A desktop with sound is heard too: its captured frames wait here and go into the open
segment on each turn of the loop. Sound keeps a segment open like a changing picture does
(a segment opened for it starts with the picture as it is); silence opens none.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from relay.recording.encoder import CODECS, DEFAULT_CODEC, Codec, SegmentWriter
from wire.recording import SegmentInfo

log = logging.getLogger(__name__)

Grab = Callable[[], Awaitable[npt.NDArray[np.uint8]]]
Announce = Callable[[SegmentInfo], Awaitable[None]]
# Hands captured sound frames (s16le stereo, their capture time in µs) to the given sink
# until the answer is called.
Sink = Callable[[bytes, int], None]
Listen = Callable[[Sink], Awaitable[Callable[[], None]]]
STATE_FILE: Final = "state.json"
# After an input action the screen is looked at this often, for this long (an app repaints a
# few frames after the input that caused it).
FAST_PERIOD_S: Final = 0.05
FAST_FOR_S: Final = 1.0
STOP_TIMEOUT_S: Final = 10.0
# Sound waiting for the loop, at most this many captured frames (20 ms each): 10 s.
MAX_WAITING_SOUND: Final = 500


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class RecordingSettings:
    """``RELAYDESK_RECORDING_FPS`` (most frames a second), ``…_KEYFRAME_S``, ``…_SEGMENT_S``,
    ``…_CODEC`` (``h264`` or ``vp8``)."""

    fps: float = 4.0
    keyframe_s: float = 5.0
    segment_s: float = 60.0
    codec: str = DEFAULT_CODEC

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f"RELAYDESK_RECORDING_CODEC: one of {', '.join(CODECS)}")

    @property
    def encoding(self) -> Codec:
        return CODECS[self.codec]

    @classmethod
    def from_env(cls) -> RecordingSettings:
        env = os.environ
        return cls(
            fps=float(env.get("RELAYDESK_RECORDING_FPS", cls.fps)),
            keyframe_s=float(env.get("RELAYDESK_RECORDING_KEYFRAME_S", cls.keyframe_s)),
            segment_s=float(env.get("RELAYDESK_RECORDING_SEGMENT_S", cls.segment_s)),
            codec=env.get("RELAYDESK_RECORDING_CODEC", DEFAULT_CODEC),
        )


@dataclass
class RecordingState:
    """What a restarted relay needs to go on recording a desktop."""

    desktop_session_id: str
    recording_id: str
    recording_start_ms: int
    next_seq: int

    def save(self, folder: Path) -> None:
        tmp = folder / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(vars(self)), encoding="utf-8")
        tmp.replace(folder / STATE_FILE)

    @classmethod
    def load(cls, folder: Path) -> RecordingState | None:
        try:
            data = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
            return cls(
                str(data["desktop_session_id"]),
                str(data["recording_id"]),
                int(data["recording_start_ms"]),
                int(data["next_seq"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


def segment_path(folder: Path, recording_id: str, seq: int) -> Path:
    return folder / f"{recording_id}-{seq:06d}.seg"


class Recorder:
    """Records one desktop until :meth:`stop`."""

    def __init__(
        self,
        folder: Path,
        state: RecordingState,
        grab: Grab,
        announce: Announce,
        settings: RecordingSettings,
        listen: Listen | None = None,
    ) -> None:
        self.folder = folder
        self.state = state
        self._grab = grab
        self._announce = announce
        self.settings = settings
        self._writer: SegmentWriter | None = None
        self._previous: npt.NDArray[np.uint8] | None = None
        self._last_key_ms = 0
        self._segment_started = 0.0
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._fast_until = 0.0
        self._stopping = asyncio.Event()
        self._listen = listen
        self._unlisten: Callable[[], None] | None = None
        self._listening: asyncio.Task[None] | None = None
        self._sound: deque[tuple[bytes, int]] = deque(maxlen=MAX_WAITING_SOUND)

    @property
    def recording_id(self) -> str:
        return self.state.recording_id

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.state.save(self.folder)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"recording-{self.state.desktop_session_id}"
        )

    async def stop(self, *, finish: bool = True) -> None:
        """End the loop; ``finish``: the open segment is finished and announced, else dropped.

        The loop ends after the frame it is encoding (never cancelled inside the encoder,
        which a closing segment would then race)."""
        self._stopping.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), STOP_TIMEOUT_S)
            except TimeoutError:
                log.warning("recording %s: the capture loop did not end", self.recording_id)
                self._task.cancel()
            self._task = None
        if self._listening is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._listening, STOP_TIMEOUT_S)
            self._listening = None
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        async with self._lock:
            if finish and self._writer is None and self._previous is not None:
                # A still screen ends the video where the recording ends: its last picture
                # once more, so every event of the recording lies within the video.
                await asyncio.to_thread(self._last_picture_again, self._previous, wall_ms())
            if self._writer is not None:
                if finish:
                    await self._finish_segment()
                else:
                    await asyncio.to_thread(self._writer.abort)
                    self._writer = None
        with contextlib.suppress(OSError):
            (self.folder / STATE_FILE).unlink()
        with contextlib.suppress(OSError):
            self.folder.rmdir()  # only once the server took every segment

    def _hear(self, pcm: bytes, captured_us: int) -> None:
        self._sound.append((pcm, captured_us))

    async def _start_listening(self) -> None:
        if self._listen is None:
            return
        try:
            self._unlisten = await self._listen(self._hear)
        except Exception as err:  # sound is never essential: the picture is recorded anyway
            log.warning(
                "recording %s: the desktop's sound is not recorded (%s)", self.recording_id, err
            )
            self._listen = None

    def _take_sound(self) -> list[tuple[bytes, int]]:
        sound = list(self._sound)
        self._sound.clear()
        return sound

    async def _run(self) -> None:
        period = 1.0 / max(0.1, self.settings.fps)
        # The sound joins when its capture is there; the pictures do not wait for it.
        self._listening = asyncio.get_running_loop().create_task(self._start_listening())
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("recording %s: a frame failed", self.state.recording_id)
            step = FAST_PERIOD_S if began < self._fast_until else period
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._stopping.wait(), max(0.0, step - (time.monotonic() - began))
                )

    async def capture_now(self) -> None:
        """Record the screen as it is now, then closely for a moment: after an input action,
        its effect is on the video within :data:`FAST_PERIOD_S` of showing on the screen."""
        if self._task is not None and not self._stopping.is_set():
            self._fast_until = time.monotonic() + FAST_FOR_S
            await self._tick()

    async def _tick(self) -> None:
        async with self._lock:
            bgra = await self._grab()
            now = wall_ms()
            if self._writer is not None and self._segment_due():
                await self._finish_segment()
            await asyncio.to_thread(self._encode_if_changed, bgra, now, self._take_sound())

    def _segment_due(self) -> bool:
        return time.monotonic() - self._segment_started >= self.settings.segment_s

    def _encode_if_changed(
        self, bgra: npt.NDArray[np.uint8], now: int, sound: list[tuple[bytes, int]]
    ) -> None:
        previous = self._previous
        unchanged = (
            previous is not None and previous.shape == bgra.shape and np.array_equal(previous, bgra)
        )
        if unchanged and self._writer is None and not _heard(sound):
            return  # a still, silent desktop costs nothing
        if self._writer is not None and (self._writer.width, self._writer.height) != (
            bgra.shape[1],
            bgra.shape[0],
        ):
            self._add_sound(sound)
            return  # the screen was resized: the next segment takes the new size
        if self._writer is None:
            self._open_segment(bgra, now)
            unchanged = False  # a segment starts with a picture
        assert self._writer is not None
        self._add_sound(sound)
        if unchanged:
            return
        keyframe = now - self._last_key_ms >= self.settings.keyframe_s * 1000
        self._writer.add(bgra, now, keyframe=keyframe)
        if keyframe or self._writer.frames == 1:
            self._last_key_ms = now
        self._previous = bgra

    def _last_picture_again(self, bgra: npt.NDArray[np.uint8], now: int) -> None:
        self._open_segment(bgra, now)
        assert self._writer is not None
        self._writer.add(bgra, now, keyframe=True)

    def _add_sound(self, sound: list[tuple[bytes, int]]) -> None:
        if self._writer is not None:
            for pcm, captured_us in sound:
                self._writer.add_audio(pcm, captured_us)

    def _open_segment(self, bgra: npt.NDArray[np.uint8], now: int) -> None:
        path = segment_path(self.folder, self.recording_id, self.state.next_seq)
        part = path.with_suffix(".seg.part")
        height, width = int(bgra.shape[0]) & ~1, int(bgra.shape[1]) & ~1
        self._writer = SegmentWriter(
            part,
            self.state.recording_start_ms,
            width,
            height,
            self.settings.encoding,
            audio=self._listen is not None,
        )
        self._segment_started = time.monotonic()
        self._last_key_ms = now

    async def _finish_segment(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        end = wall_ms()
        seq = self.state.next_seq
        self.state.next_seq += 1
        # A still screen opens no new segment: the next one starts at the next change (the
        # player shows the last picture meanwhile).
        info = await asyncio.to_thread(self._write_out, writer, seq, end, self._take_sound())
        await self._announce(info)

    def _write_out(
        self, writer: SegmentWriter, seq: int, end: int, sound: list[tuple[bytes, int]]
    ) -> SegmentInfo:
        for pcm, captured_us in sound:
            writer.add_audio(pcm, captured_us)
        writer.close(end)
        path = segment_path(self.folder, self.recording_id, seq)
        info = SegmentInfo(
            desktop_session_id=self.state.desktop_session_id,
            recording_id=self.recording_id,
            seq=seq,
            start_ms=writer.start_ms or end,
            end_ms=end,
            recording_start_ms=self.state.recording_start_ms,
            bytes=writer.path.stat().st_size,
            frames=writer.frames,
            codec=writer.codec.name,
            width=writer.width,
            height=writer.height,
        )
        path.with_suffix(".json").write_text(json.dumps(info), encoding="utf-8")
        writer.path.replace(path)
        self.state.save(self.folder)
        return info


def _heard(sound: list[tuple[bytes, int]]) -> bool:
    """Whether any of the captured frames is not digital silence."""
    return any(pcm.strip(b"\0") for pcm, _ in sound)
