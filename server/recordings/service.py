"""The server's side of recording: turning a desktop's recording on and off, taking the
finished segments the relays announce, marking recorded rows, and purging old recordings.

A segment announced by a relay is fetched over a ``recording`` channel of that relay (the
same credit-controlled channels as viewers and files), written beside the recording's
manifest, added to it, and acknowledged so the relay deletes its copy. A relay's
announcement is taken only for a recording that relay was asked to make, of that desktop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import defaultdict
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from server.control.audit import AuditQueue
from server.control.model import DesktopKey
from server.control.publish import desktop_topic
from server.db.audit import AuditRow
from server.db.records import UserRecord
from server.db.rows import ControlInfo, DesktopRow
from server.events.bus import EventBus
from server.recordings.files import Recording, RecordingFiles, Segment
from server.relays.calls import call
from server.relays.router import RelayRouter
from server.tasks import cancel_and_wait
from wire.errors import ChannelClosedError, OpError
from wire.ids import RelayId
from wire.messages import Event, Hello
from wire.recording import (
    RECORDING_ACK,
    RECORDING_SET,
    SEGMENT_EVENT,
    RecordingAckArgs,
    RecordingSetArgs,
)

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S: Final = 120.0
MAX_HEADER: Final = 16 * 1024
MAX_SEGMENT_BYTES: Final = 1024 * 1024 * 1024
# How long the list of recorded desktops is trusted before the directory is read again (a
# replica learns of recordings another one turned on within this).
ACTIVE_TTL_S: Final = 3.0
ENDED_STATES: Final = frozenset({"stopped", "failed"})
# The audit op of a change of who is in control of a recorded desktop.
CONTROL_OP: Final = "control.changed"
VIEWER_JOINED: Final = "viewer.joined"
VIEWER_LEFT: Final = "viewer.left"


class AuditStore(AuditQueue, Protocol):
    """The ``Store`` methods the recordings' audit rows need."""

    async def get_user(self, user_id: str) -> UserRecord | None: ...


class ViewerGrantLike(Protocol):
    """What the timeline notes of a viewer (``server.auth.capability.ViewerGrant``)."""

    @property
    def user_id(self) -> str: ...
    @property
    def conversation_id(self) -> str: ...
    @property
    def relay_id(self) -> str: ...
    @property
    def desktop_session_id(self) -> str: ...
    @property
    def person(self) -> bool: ...


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def new_recording_id() -> str:
    return f"rec_{secrets.token_hex(12)}"


class RecordingService:
    """Every recording this server (and its replicas, through the shared folder) keeps."""

    def __init__(
        self,
        files: RecordingFiles,
        relays: RelayRouter,
        timeout_s: float,
        audit: AuditStore | None = None,
        bus: EventBus | None = None,
    ) -> None:
        self.files = files
        self._relays = relays
        self._timeout_s = timeout_s
        self._audit = audit
        self._bus = bus
        self._writes: set[asyncio.Task[None]] = set()
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._fetching: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._active: dict[str, str] = {}
        self._active_read = 0.0

    # -- on and off -------------------------------------------------------------------

    async def turn_on(self, row: DesktopRow, conversation_id: str, actor: str) -> Recording:
        """Record ``row``'s desktop (the recording it already has, if any)."""
        current = await self.active_recording(row.desktop_session_id)
        recording = current or Recording(
            recording_id=new_recording_id(),
            conversation_id=conversation_id,
            relay_id=row.relay_id,
            desktop_session_id=row.desktop_session_id,
            kind=row.kind,
            slot=row.slot,
            started_by=actor,
            start_ms=wall_ms(),
        )
        if current is None:
            await asyncio.to_thread(self.files.save, recording)
        args = RecordingSetArgs(
            desktop_session_id=row.desktop_session_id,
            on=True,
            recording_id=recording.recording_id,
        )
        try:
            await call(self._relays, RelayId(row.relay_id), RECORDING_SET, args, self._timeout_s)
        except OpError:
            if current is None:
                await asyncio.to_thread(self.files.delete, recording.recording_id)
            raise
        self._active[row.desktop_session_id] = recording.recording_id
        await self._tell_viewers(row.relay_id, row.desktop_session_id, True)
        return recording

    async def turn_off(self, row: DesktopRow) -> Recording | None:
        """Stop recording ``row``'s desktop; its last segment follows from the relay."""
        current = await self.active_recording(row.desktop_session_id)
        if current is None:
            return None
        args = RecordingSetArgs(
            desktop_session_id=row.desktop_session_id,
            on=False,
            recording_id=current.recording_id,
        )
        await call(self._relays, RelayId(row.relay_id), RECORDING_SET, args, self._timeout_s)
        return await self._end(current.recording_id)

    async def _end(self, recording_id: str) -> Recording | None:
        async with self._locks[recording_id]:
            recording = await asyncio.to_thread(self.files.load, recording_id)
            if recording is None or not recording.active:
                return recording
            recording.end_ms = wall_ms()
            await asyncio.to_thread(self.files.save, recording)
        self._active = {k: v for k, v in self._active.items() if v != recording_id}
        await self._tell_viewers(recording.relay_id, recording.desktop_session_id, False)
        return recording

    async def _tell_viewers(self, relay_id: str, desktop_session_id: str, on: bool) -> None:
        """The desktop's viewers show whether it is recorded (their control feed)."""
        if self._bus is not None:
            topic = desktop_topic(DesktopKey(relay_id, desktop_session_id))
            await self._bus.publish(topic, "recording", {"recording": on})

    async def row_changed(self, row: DesktopRow) -> None:
        """A desktop that ended ends its recording (inventory listener)."""
        if row.state in ENDED_STATES:
            current = await self.active_recording(row.desktop_session_id)
            if current is not None:
                await self._end(current.recording_id)

    def control_changed(self, key: DesktopKey, info: ControlInfo) -> None:
        """Who is in control of a recorded desktop changed: an audit row for its timeline
        (takeovers and hand-backs through a viewer are not otherwise audited)."""
        if self._audit is None or key.desktop_session_id not in self._active:
            return
        row = AuditRow(
            op=CONTROL_OP,
            actor=info.get("name") or info.get("agent") or "-",
            outcome=info["state"],
            relay_id=key.relay_id,
            desktop_session_id=key.desktop_session_id,
            details={"held": info["held"], "agent": info.get("agent")},
        )
        self._queue(row)

    async def records_by_default(self, conversation_id: str) -> bool:
        return await asyncio.to_thread(self.files.records_by_default, conversation_id)

    def viewer_changed(self, grant: ViewerGrantLike, opened: bool) -> None:
        """A viewer of a recorded desktop opened or closed: an audit row for its timeline."""
        if self._audit is None or grant.desktop_session_id not in self._active:
            return
        self._queue(self._viewer_row(grant, opened))

    async def _viewer_row(self, grant: ViewerGrantLike, opened: bool) -> AuditRow:
        user = await self._audit.get_user(grant.user_id) if self._audit is not None else None
        return AuditRow(
            op=VIEWER_JOINED if opened else VIEWER_LEFT,
            actor=user.username if user is not None else grant.user_id,
            outcome="person" if grant.person else "view_only",
            conversation_id=grant.conversation_id,
            relay_id=grant.relay_id,
            desktop_session_id=grant.desktop_session_id,
        )

    def _queue(self, row: AuditRow | Awaitable[AuditRow]) -> None:
        assert self._audit is not None
        audit = self._audit

        async def write() -> None:
            await audit.queue_audit(row if isinstance(row, AuditRow) else await row)

        task = asyncio.get_running_loop().create_task(write())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    # -- which desktops are recorded ---------------------------------------------------

    async def _active_map(self) -> dict[str, str]:
        if time.monotonic() - self._active_read > ACTIVE_TTL_S:
            found = await asyncio.to_thread(
                lambda: {r.desktop_session_id: r.recording_id for r in self.files.all() if r.active}
            )
            self._active, self._active_read = found, time.monotonic()
        return self._active

    async def active_recording(self, desktop_session_id: str) -> Recording | None:
        recording_id = (await self._active_map()).get(desktop_session_id)
        if recording_id is None:
            return None
        recording = await asyncio.to_thread(self.files.load, recording_id)
        return recording if recording is not None and recording.active else None

    async def annotate(self, rows: Sequence[DesktopRow]) -> list[DesktopRow]:
        """``rows`` with ``recording: true`` on those recorded now."""
        active = await self._active_map()
        return [row.with_recording() if row.desktop_session_id in active else row for row in rows]

    # -- segments from relays ----------------------------------------------------------

    async def relay_connected(self, relay_id: RelayId, hello: Hello) -> None:
        return None

    async def relay_disconnected(self, relay_id: RelayId) -> None:
        return None

    async def relay_event(self, relay_id: RelayId, event: Event) -> None:
        if event.name != SEGMENT_EVENT:
            return
        try:
            recording_id, seq = str(event.data["recording_id"]), int(event.data["seq"])
        except (KeyError, TypeError, ValueError):
            log.warning("relay %s announced a segment without its id", relay_id)
            return
        key = (recording_id, seq)
        if key not in self._fetching:
            task = asyncio.get_running_loop().create_task(
                self._fetch(relay_id, event.data, recording_id, seq), name="recording-fetch"
            )
            self._fetching[key] = task
            task.add_done_callback(lambda _: self._fetching.pop(key, None))

    async def _fetch(
        self, relay_id: RelayId, data: dict[str, Any], recording_id: str, seq: int
    ) -> None:
        try:
            recording = await asyncio.to_thread(self.files.load, recording_id)
        except ValueError:
            recording = None
        session_id = data.get("desktop_session_id")
        if recording is None or recording.relay_id != relay_id:
            log.warning("relay %s announced a segment of no recording of its own", relay_id)
            return
        if session_id != recording.desktop_session_id:
            log.warning("relay %s announced a segment of another desktop", relay_id)
            return
        try:
            if not any(s.seq == seq for s in recording.segments):
                await self._receive(relay_id, recording, seq)
            ack = RecordingAckArgs(
                desktop_session_id=session_id, recording_id=recording_id, seq=seq
            )
            await call(self._relays, relay_id, RECORDING_ACK, ack, self._timeout_s)
        except (OpError, OSError, ValueError) as err:
            log.warning("segment %d of %s not taken yet: %s", seq, recording_id, err)
        except Exception:
            log.exception("taking segment %d of %s failed", seq, recording_id)

    async def _receive(self, relay_id: RelayId, recording: Recording, seq: int) -> None:
        target = {
            "type": "recording",
            "desktop_session_id": recording.desktop_session_id,
            "segment": {"recording_id": recording.recording_id, "seq": seq},
        }
        channel = await self._relays.get(relay_id).open_channel(target, self._timeout_s)
        path = self.files.segment_path(recording.recording_id, seq)
        part = path.with_suffix(".part")
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_S):
                header = await self._copy(channel, part)
        finally:
            await channel.close()
        if part.stat().st_size != header["bytes"]:
            part.unlink(missing_ok=True)
            raise ValueError("the segment arrived cut short")
        part.replace(path)
        await self._add_segment(recording.recording_id, header, seq)

    @staticmethod
    async def _copy(channel: Any, part: Path) -> dict[str, Any]:
        buffer = bytearray()
        header: dict[str, Any] | None = None
        written = 0
        with part.open("wb") as out:
            while True:
                try:
                    chunk = bytes(await channel.read())
                except ChannelClosedError:
                    break
                if header is None:
                    buffer += chunk
                    if b"\n" not in buffer:
                        if len(buffer) > MAX_HEADER:
                            raise ValueError("the segment's header is too long")
                        continue
                    line, _, chunk = bytes(buffer).partition(b"\n")
                    header = json.loads(line)
                written += len(chunk)
                if written > MAX_SEGMENT_BYTES:
                    raise ValueError("the segment is too large")
                await asyncio.to_thread(out.write, chunk)
        if header is None:
            raise ValueError("the segment arrived without its header")
        return header

    async def _add_segment(self, recording_id: str, header: dict[str, Any], seq: int) -> None:
        async with self._locks[recording_id]:
            recording = await asyncio.to_thread(self.files.load, recording_id)
            if recording is None:
                return
            segment = Segment(
                seq=seq,
                start_ms=int(header["start_ms"]),
                end_ms=int(header["end_ms"]),
                bytes=int(header["bytes"]),
                frames=int(header["frames"]),
            )
            recording.segments = sorted(
                [*(s for s in recording.segments if s.seq != seq), segment], key=lambda s: s.seq
            )
            recording.width, recording.height = int(header["width"]), int(header["height"])
            recording.video_start_ms = int(header["recording_start_ms"])
            recording.codec = str(header.get("codec", recording.codec))
            await asyncio.to_thread(self.files.save, recording)

    # -- retention ---------------------------------------------------------------------

    async def purge(self, older_than_ms: int) -> int:
        """Delete recordings that ended before ``older_than_ms``; return how many went."""
        gone = 0
        for recording in await asyncio.to_thread(lambda: list(self.files.all())):
            if not recording.active and recording.last_ms < older_than_ms:
                await asyncio.to_thread(self.files.delete, recording.recording_id)
                gone += 1
        return gone

    async def aclose(self) -> None:
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        await cancel_and_wait(*self._fetching.values())
