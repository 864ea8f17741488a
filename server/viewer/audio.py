"""``WS /vnc/{sid}/{token}/audio``: a desktop's sound, one Opus packet per binary message.

Admission is the video stream's: the same capability check (``server.viewer.access``) runs
before any relay channel opens. Each listener gets its own relay channel
(``channel.open {target: {type: audio}}``); the relay runs one capture per desktop and fans it
out. The channel is read eagerly into a small drop-oldest queue, so credit keeps flowing to the
relay and a listener that stops reading loses its oldest audio here instead of holding a
window's worth of it: memory per listener stays bounded, and nothing waits on it.

Message format (big-endian): ``u64`` capture time (µs since the epoch, relay clock), ``u32``
sequence number, then one Opus packet (48 kHz, stereo, 20 ms). See docs/audio.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from server.db.rows import DesktopRow
from server.relays.router import RelayChannel
from server.viewer.access import ViewerRefused, ViewerTarget, check_viewer, refusal_for_state
from server.viewer.registry import DesktopKey, desktop_key
from server.viewer.service import SUBPROTOCOL, ViewerService, origin_allowed
from wire.errors import ChannelCloseCode, ChannelClosedError, CloseCode, ErrorCode, OpError
from wire.frames import Payload

log = logging.getLogger(__name__)

OPEN_TIMEOUT_S: Final = 10.0
# 15 packets of 20 ms: a listener more than 300 ms behind loses its oldest audio.
QUEUE_PACKETS: Final = 15
_UNREACHABLE = frozenset(
    {ErrorCode.RELAY_UNREACHABLE, ErrorCode.TIMEOUT, ErrorCode.CANCELLED, ErrorCode.RELAY_TIMEOUT}
)
_SEND_ERRORS = (WebSocketDisconnect, OSError, RuntimeError)


class PacketSource(Protocol):
    """Where a listener's packets come from (a relay channel)."""

    async def read(self) -> Payload: ...

    async def close(self, code: ChannelCloseCode, reason: str) -> None: ...


Judge = Callable[[ChannelClosedError], Awaitable[ViewerRefused]]


def audio_unavailable(detail: str) -> ViewerRefused:
    return ViewerRefused(CloseCode.AUDIO_UNAVAILABLE, detail)


class AudioSession:
    """One listener: channel → bounded queue → WebSocket, until either side ends."""

    def __init__(
        self,
        websocket: WebSocket,
        source: PacketSource,
        row: DesktopRow,
        judge: Judge,
        max_packets: int = QUEUE_PACKETS,
    ) -> None:
        self.websocket = websocket
        self.source = source
        self.row = row
        self.desktop_session_id = row.desktop_session_id
        self._judge = judge
        self._queue: deque[Payload] = deque(maxlen=max_packets)
        self._ready = asyncio.Event()
        self._ended = asyncio.Event()
        self._close: tuple[CloseCode, str] | None = None
        self._listener_gone = False
        self.received = 0
        self.sent = 0
        self.dropped = 0
        self.max_queued = 0

    @property
    def queued(self) -> int:
        return len(self._queue)

    def end(self, code: CloseCode, reason: str, *, listener_gone: bool = False) -> None:
        """Ask the session to close with ``code``; the first caller's reason wins."""
        if self._close is None:
            self._close = (code, reason)
            self._listener_gone = listener_gone
        self._ended.set()

    async def run(self) -> tuple[CloseCode, str]:
        tasks = [
            asyncio.create_task(self._receive(), name="audio-in"),
            asyncio.create_task(self._send(), name="audio-out"),
            asyncio.create_task(self._watch_listener(), name="audio-listener"),
        ]
        try:
            await self._ended.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._release()
        assert self._close is not None
        return self._close

    async def _release(self) -> None:
        try:
            await self.source.close(ChannelCloseCode.VIEWER_GONE, "listener closed")
        except Exception:
            log.exception("closing an audio channel failed")
        code, reason = self._close or (CloseCode.GOING_AWAY, "server shutting down")
        if not self._listener_gone:
            with contextlib.suppress(*_SEND_ERRORS):
                await self.websocket.close(code, reason[:120])

    async def _receive(self) -> None:
        """Relay → queue, as fast as packets come (credit goes straight back)."""
        try:
            while True:
                packet = await self.source.read()
                self.received += 1
                if len(self._queue) == self._queue.maxlen:
                    self.dropped += 1
                self._queue.append(packet)
                self.max_queued = max(self.max_queued, len(self._queue))
                self._ready.set()
        except ChannelClosedError as closed:
            verdict = await self._judge(closed)
            self.end(verdict.close_code, verdict.reason)

    async def _send(self) -> None:
        """Queue → listener, one packet per message, at the listener's pace."""
        try:
            while True:
                while not self._queue:
                    self._ready.clear()
                    await self._ready.wait()
                await self.websocket.send_bytes(bytes(self._queue.popleft()))  # small packets
                self.sent += 1
        except _SEND_ERRORS:
            self.end(CloseCode.GOING_AWAY, "listener gone", listener_gone=True)

    async def _watch_listener(self) -> None:
        """Listeners only listen: their messages are ignored, their going away ends us."""
        try:
            while (await self.websocket.receive())["type"] != "websocket.disconnect":
                pass
        except _SEND_ERRORS:
            pass
        self.end(CloseCode.NORMAL, "listener closed", listener_gone=True)


class AudioService:
    """Every audio listener of this server process, by desktop session."""

    def __init__(self, viewer: ViewerService) -> None:
        self.viewer = viewer
        self.sessions: dict[DesktopKey, set[AudioSession]] = {}
        if viewer.directory is not None:
            viewer.directory.add_listener(self.row_changed)

    def count(self, desktop_session_id: str | None = None) -> int:
        return sum(
            len(group)
            for (_, session_id), group in self.sessions.items()
            if desktop_session_id is None or session_id == desktop_session_id
        )

    async def serve(self, websocket: WebSocket, desktop_session_id: str, token: str) -> None:
        """The whole life of one audio WebSocket."""
        offered = websocket.scope.get("subprotocols", [])
        await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        try:
            target = await self._admit(websocket, desktop_session_id, token)
            channel = await self._open(target)
        except ViewerRefused as refused:
            log.info("audio refused (session %s…): %s", desktop_session_id[:8], refused.reason)
            await websocket.close(refused.close_code, refused.reason[:120])
            return
        session = AudioSession(websocket, channel, target.row, self._judge_for(target))
        self.sessions.setdefault(desktop_key(target.row), set()).add(session)
        log.info("audio listener opened (session %s…)", desktop_session_id[:8])
        try:
            code, reason = await session.run()
        finally:
            self._discard(session)
        log.info("audio listener closed (session %s…): %d %s", desktop_session_id[:8], code, reason)

    def _discard(self, session: AudioSession) -> None:
        key = desktop_key(session.row)
        group = self.sessions.get(key)
        if group is not None:
            group.discard(session)
            if not group:
                del self.sessions[key]

    async def _admit(self, websocket: WebSocket, session_id: str, token: str) -> ViewerTarget:
        """Exactly the video stream's checks (``check_viewer``), before any channel opens."""
        settings = self.viewer.settings
        if not origin_allowed(websocket.headers, settings.public_url):
            raise ViewerRefused(CloseCode.VIEWER_FORBIDDEN, "cross-origin request")
        return await check_viewer(
            secret_key=settings.secret_key,
            token=token,
            desktop_session_id=session_id,
            directory=self.viewer.directory,
            store=self.viewer.store,
            relays=self.viewer.relays,
        )

    async def _open(self, target: ViewerTarget) -> RelayChannel:
        if "audio" not in self.viewer.relays.capabilities(target.relay_id):
            raise audio_unavailable("this desktop's relay has no audio support")
        try:
            link = self.viewer.relays.get(target.relay_id)
            return await link.open_channel(
                {"type": "audio", "desktop_session_id": target.row.desktop_session_id},
                OPEN_TIMEOUT_S,
            )
        except OpError as err:
            raise _refusal_for_error(err) from None

    def _judge_for(self, target: ViewerTarget) -> Judge:
        async def judge(closed: ChannelClosedError) -> ViewerRefused:
            if closed.close_code is ChannelCloseCode.RELAY_GONE:
                return ViewerRefused(CloseCode.RELAY_UNREACHABLE)
            if closed.close_code is ChannelCloseCode.DESKTOP_STOPPED:
                return ViewerRefused(CloseCode.DESKTOP_STOPPED)
            directory = self.viewer.directory
            sid = target.row.desktop_session_id
            row = await directory.row(target.relay_id, sid) if directory is not None else None
            if row is None:
                return ViewerRefused(CloseCode.DESKTOP_STOPPED)
            return refusal_for_state(row.state) or audio_unavailable(closed.reason)

        return judge

    async def row_changed(self, row: DesktopRow) -> None:
        """Inventory listener: a desktop that stops or fails ends its listeners with a reason."""
        refusal = refusal_for_state(row.state)
        if refusal is None:
            return
        for session in list(self.sessions.get(desktop_key(row), ())):
            session.end(refusal.close_code, refusal.reason)


def _refusal_for_error(err: OpError) -> ViewerRefused:
    if err.code in _UNREACHABLE:
        return ViewerRefused(CloseCode.RELAY_UNREACHABLE)
    if err.code is ErrorCode.NOT_RUNNING:
        return ViewerRefused(CloseCode.DESKTOP_STOPPED)
    if err.code is ErrorCode.UNAVAILABLE:
        return audio_unavailable(err.message)
    return ViewerRefused(CloseCode.INTERNAL_ERROR, err.message)
