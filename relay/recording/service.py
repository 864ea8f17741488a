"""The relay's recordings: which desktops it records, the ops that turn them on and off,
the channel that hands a finished segment to the server, and what a restart picks up.

Finished segments stay in the spool (``<state dir>/recordings/<desktop session>/``) until
the server acknowledges them (``recording.ack``); unacknowledged ones are announced again
every :data:`REANNOUNCE_S`, so a segment finished while the server was away is handed over
once it is back. Nothing here depends on the kind of desktop: frames come from the screen
service the screen tool uses, and a desktop with sound is heard through the relay's audio
capture (relay/audio.py), the one its listeners use.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from relay.channels import Chunk, StreamChannel
from relay.recording.recorder import (
    Listen,
    Recorder,
    RecordingSettings,
    RecordingState,
    segment_path,
    wall_ms,
)
from relay.wsframes import HEADROOM
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.frames import Payload
from wire.ids import ChannelId
from wire.ops import ChannelOpenResult, RecordingSegment, RelayRow
from wire.recording import (
    SEGMENT_EVENT,
    RecordingAckArgs,
    RecordingAckResult,
    RecordingSetArgs,
    RecordingSetResult,
    SegmentInfo,
    check_recording_id,
    check_seq,
)

if TYPE_CHECKING:
    from relay.link import ServerLink

log = logging.getLogger(__name__)

REANNOUNCE_S: Final = 30.0
FIRST_REANNOUNCE_S: Final = 3.0
READ_CHUNK: Final = 256 * 1024
# Grabs the screen of a desktop's display, as BGRA (the screen tool's capture).
DisplayGrab = Callable[[str, str], Awaitable[npt.NDArray[np.uint8]]]
SendEvent = Callable[[str, dict[str, Any]], Awaitable[None]]
FindRow = Callable[[str], Awaitable[RelayRow]]
# Hands a desktop's captured sound to a sink until the answer is called (relay/audio.py).
HearDesktop = Callable[[RelayRow, Callable[[bytes, int], None]], Awaitable[Callable[[], None]]]
ENDED_STATES: Final = frozenset({"stopped", "failed", "stopping"})


class SegmentStream:
    """A :class:`relay.channels.ByteStream` over one finished segment: a header line, then
    the file's bytes."""

    def __init__(self, header: bytes, path: Path) -> None:
        self._pending = header
        self._file = path.open("rb")

    async def read(self) -> Chunk:
        data, self._pending = self._pending, b""
        data = data or await asyncio.to_thread(self._file.read, READ_CHUNK)
        chunk = bytearray(HEADROOM + len(data))
        chunk[HEADROOM:] = data
        return chunk if data else bytearray()

    async def write(self, data: Payload) -> None:
        raise ConnectionResetError("a recording channel carries nothing to the relay")

    async def aclose(self) -> None:
        self._file.close()


class RelayRecordings:
    """Every recording of this relay's desktops."""

    def __init__(
        self,
        spool: Path,
        grab: DisplayGrab,
        send_event: SendEvent,
        find_row: FindRow,
        settings: RecordingSettings | None = None,
        hear: HearDesktop | None = None,
    ) -> None:
        self.spool = spool
        self._hear = hear
        self._grab = grab
        self._send_event = send_event
        self._find_row = find_row
        self.settings = settings or RecordingSettings.from_env()
        self.recorders: dict[str, Recorder] = {}
        self._reannounce: asyncio.Task[None] | None = None

    # -- ops --------------------------------------------------------------------------

    async def set(self, link: ServerLink, args: RecordingSetArgs) -> RecordingSetResult:
        """``recording.set``: start (or go on with) or stop recording one desktop."""
        session_id = args["desktop_session_id"]
        recording_id = check_recording_id(args["recording_id"])
        current = self.recorders.get(session_id)
        if not args["on"]:
            if current is not None:
                await self.recorders.pop(session_id).stop()
            return {"recording": False, "recording_id": None}
        if current is not None and current.recording_id == recording_id:
            return {"recording": True, "recording_id": recording_id}
        row = await self._find_row(session_id)
        if not isinstance(row.get("display"), str):
            raise OpError(ErrorCode.UNAVAILABLE, "this desktop has no display to record")
        if current is not None:
            await self.recorders.pop(session_id).stop()
        state = RecordingState(session_id, recording_id, wall_ms(), 0)
        self._start(state, row)
        return {"recording": True, "recording_id": recording_id}

    async def ack(self, link: ServerLink, args: RecordingAckArgs) -> RecordingAckResult:
        """``recording.ack``: the server keeps the segment; the relay's copy goes."""
        check_recording_id(args["recording_id"])
        check_seq(args["seq"])
        path = self._segment(args["desktop_session_id"], args["recording_id"], args["seq"])
        existed = path.exists()
        path.unlink(missing_ok=True)
        path.with_suffix(".json").unlink(missing_ok=True)
        self._drop_empty(path.parent)
        return {"deleted": existed}

    async def open_channel(
        self,
        link: ServerLink,
        channel_id: ChannelId,
        desktop_session_id: str,
        ref: RecordingSegment,
    ) -> ChannelOpenResult:
        """A ``recording`` channel: the segment ``ref`` names, then the channel ends."""
        check_recording_id(ref["recording_id"], "target.segment.recording_id")
        check_seq(ref["seq"], "target.segment.seq")
        path = self._segment(desktop_session_id, ref["recording_id"], ref["seq"])
        try:
            header = path.with_suffix(".json").read_bytes()
            stream = SegmentStream(header.strip() + b"\n", path)
        except OSError:
            raise OpError(ErrorCode.NOT_FOUND, "no such finished segment on this relay") from None
        link.start_channel(StreamChannel(channel_id, link, stream))
        return {"channel_id": channel_id}

    async def acted(self, desktop_session_id: str) -> None:
        """An action ran on the desktop: a recorded one captures its screen now."""
        recorder = self.recorders.get(desktop_session_id)
        if recorder is not None:
            try:
                await recorder.capture_now()
            except Exception:
                log.exception("recording %s: capturing after an action failed", desktop_session_id)

    # -- lifecycle --------------------------------------------------------------------

    def _start(self, state: RecordingState, row: RelayRow) -> None:
        session_id = state.desktop_session_id
        display = str(row["display"])

        async def grab() -> npt.NDArray[np.uint8]:
            return await self._grab(display, session_id)

        listen: Listen | None = None
        hear = self._hear
        if hear is not None and row.get("audio"):

            async def listen(sink: Callable[[bytes, int], None]) -> Callable[[], None]:
                assert hear is not None
                return await hear(row, sink)

        recorder = Recorder(
            self.spool / session_id, state, grab, self._announce, self.settings, listen
        )
        self.recorders[session_id] = recorder
        recorder.start()
        log.info("recording %s as %s", session_id, state.recording_id)

    async def desktop_changed(self, row: Mapping[str, Any]) -> None:
        """A desktop that ended on its own (failed) ends its recording."""
        if row.get("state") in ENDED_STATES:
            await self.desktop_left(str(row.get("desktop_session_id")))

    async def desktop_left(self, desktop_session_id: str) -> None:
        """A desktop is ending (a stop, a reset, a failure): its recording ends with it, the
        open segment finished while its screen is still there. A recorder left running would
        go on grabbing a display number the next desktop may take."""
        recorder = self.recorders.pop(desktop_session_id, None)
        if recorder is not None:
            await recorder.stop()

    def adopt(self, rows: Iterable[RelayRow]) -> None:
        """After a restart: go on recording the re-adopted desktops that were recorded; the
        unfinished segment of the last run is dropped (``.part``)."""
        live = {row["desktop_session_id"]: row for row in rows}
        if not self.spool.is_dir():
            return
        for folder in self.spool.iterdir():
            for part in folder.glob("*.part"):
                part.unlink(missing_ok=True)
            state = RecordingState.load(folder)
            row = live.get(folder.name)
            if state is not None and row is not None and isinstance(row.get("display"), str):
                self._start(state, row)
            elif state is not None:
                (folder / "state.json").unlink(missing_ok=True)
            self._drop_empty(folder)

    def start_reannouncing(self) -> None:
        self._reannounce = asyncio.get_running_loop().create_task(
            self._reannounce_forever(), name="recording-reannounce"
        )

    async def aclose(self) -> None:
        """Shutdown: finish every open segment (announced on the next run if not acked)."""
        if self._reannounce is not None:
            self._reannounce.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reannounce
        for session_id in list(self.recorders):
            recorder = self.recorders.pop(session_id)
            state = recorder.state
            await recorder.stop()
            if state is not None:  # the desktop may be re-adopted: keep recording it then
                recorder.folder.mkdir(parents=True, exist_ok=True)
                state.save(recorder.folder)

    # -- segments ---------------------------------------------------------------------

    def _segment(self, desktop_session_id: str, recording_id: str, seq: int) -> Path:
        if "/" in desktop_session_id or desktop_session_id.startswith("."):
            raise InvalidArgs("desktop_session_id", "not a desktop session id")
        return segment_path(self.spool / desktop_session_id, recording_id, seq)

    async def _announce(self, info: SegmentInfo) -> None:
        await self._send_event(SEGMENT_EVENT, dict(info))

    def pending(self) -> list[SegmentInfo]:
        """Finished segments the server has not acknowledged yet."""
        found: list[SegmentInfo] = []
        if self.spool.is_dir():
            for meta in sorted(self.spool.glob("*/*.json")):
                if meta.name == "state.json":
                    continue
                with contextlib.suppress(OSError, ValueError):
                    found.append(json.loads(meta.read_text(encoding="utf-8")))
        return found

    async def _reannounce_forever(self) -> None:
        wait = FIRST_REANNOUNCE_S  # a restarted relay hands over what the last run finished
        while True:
            await asyncio.sleep(wait)
            wait = REANNOUNCE_S
            try:
                for info in await asyncio.to_thread(self.pending):
                    await self._announce(info)
            except Exception:
                log.exception("announcing the waiting segments failed")

    @staticmethod
    def _drop_empty(folder: Path) -> None:
        with contextlib.suppress(OSError):
            if folder.is_dir() and not any(folder.iterdir()):
                shutil.rmtree(folder)
