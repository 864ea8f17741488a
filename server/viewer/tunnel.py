"""One viewer stream: bytes between the browser's WebSocket and a VNC backend.

Two pumps, one per direction. Each waits on the side it writes to before it reads again:
``websocket.send_bytes`` waits while the viewer's socket is above its high-water mark, and the
backend's ``write`` waits for relay credit. So a viewer that stops reading holds at most one
credit window plus one chunk on the server, and the relay stops reading x11vnc for that viewer
alone. Whoever ends first (either pump, or :meth:`ViewerSession.end` from the registry) names
the close code; the other pump is cancelled and both ends are released.

What the viewer sends is either watched for a person's input (``InputWatch``: a person's
capability) or filtered down to what only asks to see (``ViewOnlyFilter``: an agent's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from starlette.websockets import WebSocket, WebSocketDisconnect

from server.viewer.access import ViewerRefused, ViewerTarget
from server.viewer.backends import VncBackend
from server.viewer.input import InputWatch
from server.viewer.view_only import ViewOnlyBroken, ViewOnlyFilter
from wire.errors import ChannelClosedError, CloseCode

log = logging.getLogger(__name__)

# Decides what a backend end means for the viewer (e.g. "desktop stopped" vs "VNC hung up").
Judge = Callable[[ChannelClosedError], Awaitable[ViewerRefused]]
_SEND_ERRORS = (WebSocketDisconnect, OSError, RuntimeError)
# A viewer that stopped reading never lets the close frame out (the send waits for its socket
# to drain): give up after this, so the session and its backend are released regardless.
CLOSE_TIMEOUT_S = 2.0


class ViewerSession:
    """Pumps one viewer's stream until either side ends or the registry ends it."""

    def __init__(
        self,
        websocket: WebSocket,
        backend: VncBackend,
        target: ViewerTarget,
        judge: Judge,
        watch: InputWatch | None = None,
        view_only: ViewOnlyFilter | None = None,
    ) -> None:
        self.websocket = websocket
        self.backend = backend
        self.target = target
        self._judge = judge
        self._watch = watch
        self._view_only = view_only
        self._ended = asyncio.Event()
        self._close: tuple[CloseCode, str] | None = None
        self._viewer_gone = False
        self.bytes_down = 0
        self.bytes_up = 0

    @property
    def desktop_session_id(self) -> str:
        return self.target.row.desktop_session_id

    def end(self, code: CloseCode, reason: str, *, viewer_gone: bool = False) -> None:
        """Ask the session to close with ``code``; the first caller's reason wins."""
        if self._close is None:
            self._close = (code, reason)
            self._viewer_gone = viewer_gone
        self._ended.set()

    async def run(self) -> tuple[CloseCode, str]:
        """Pump until the end; returns the close code and reason that were sent."""
        pumps = [
            asyncio.create_task(self._downstream(), name="viewer-down"),
            asyncio.create_task(self._upstream(), name="viewer-up"),
        ]
        try:
            await self._ended.wait()
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            await self._release()
        assert self._close is not None
        return self._close

    async def _release(self) -> None:
        try:
            await self.backend.close()
        except Exception:
            log.exception("closing a viewer backend failed")
        code, reason = self._close or (CloseCode.GOING_AWAY, "server shutting down")
        if not self._viewer_gone:
            with contextlib.suppress(*_SEND_ERRORS, TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await self.websocket.close(code, reason[:120])

    async def _downstream(self) -> None:
        """Backend → viewer."""
        try:
            while True:
                data = await self.backend.read()
                # ``send_bytes`` with a view of the relay's frame: no copy on the way through.
                await self.websocket.send({"type": "websocket.send", "bytes": data})
                self.bytes_down += len(data)
        except ChannelClosedError as ended:
            verdict = await self._judge(ended)
            self.end(verdict.close_code, verdict.reason)
        except _SEND_ERRORS:
            self.end(CloseCode.GOING_AWAY, "viewer gone", viewer_gone=True)

    async def _upstream(self) -> None:
        """Viewer → backend, in order; waits for credit before reading the next message."""
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    self.end(CloseCode.NORMAL, "viewer closed", viewer_gone=True)
                    return
                data = message.get("bytes")
                if data is None:
                    self.end(CloseCode.UNSUPPORTED_DATA, "binary frames only")
                    return
                if self._view_only is not None:
                    try:
                        data = self._view_only.filter(data)
                    except ViewOnlyBroken as err:
                        self.end(CloseCode.VIEWER_FORBIDDEN, f"view only: {err.message}")
                        return
                    if not data:
                        continue
                elif self._watch is not None:
                    self._watch.observe(data)
                await self.backend.write(data)
                self.bytes_up += len(data)
        except ChannelClosedError as ended:
            verdict = await self._judge(ended)
            self.end(verdict.close_code, verdict.reason)
        except _SEND_ERRORS:
            self.end(CloseCode.GOING_AWAY, "viewer gone", viewer_gone=True)
