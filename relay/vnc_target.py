"""The relay's connection to a desktop's x11vnc, authenticated on the viewer's behalf.

x11vnc demands VNC authentication with the desktop's secret (docs/desktops.md). A ``vnc``
channel's target completes that handshake itself (``wire.rfb.VncClientHandshake``), then
speaks the server side of a second handshake, offering security type None, to the viewer at
the other end of the channel (``wire.rfb.NoneSecurityServer``); from then on bytes pass
unchanged. Viewers (noVNC) see an ordinary VNC server without a password: who may view was
decided by the server's capability check before the channel opened.
"""

from __future__ import annotations

import asyncio
import logging

from relay.channels import TargetStream
from relay.wsframes import HEADROOM
from wire.errors import RfbHandshakeError
from wire.frames import Payload
from wire.rfb import NoneSecurityServer, VncClientHandshake

log = logging.getLogger(__name__)


class VncTarget(TargetStream):
    """A :class:`TargetStream` to x11vnc that owns both security handshakes."""

    def __init__(self) -> None:
        super().__init__()
        self._viewer: NoneSecurityServer | None = None
        self._server_leftover = b""

    @classmethod
    async def open(cls, host: str, port: int, secret: bytes) -> VncTarget:
        """Connect and authenticate; raises ``OSError`` or :class:`RfbHandshakeError`."""
        loop = asyncio.get_running_loop()
        _, stream = await loop.create_connection(cls, host, port)
        return await stream._authenticated(secret)

    @classmethod
    async def open_unix(cls, path: str, secret: bytes) -> VncTarget:
        """The same through a unix socket (a container desktop's x11vnc, docs/docker.md)."""
        loop = asyncio.get_running_loop()
        _, stream = await loop.create_unix_connection(cls, path)
        return await stream._authenticated(secret)

    async def _authenticated(self, secret: bytes) -> VncTarget:
        try:
            await self._authenticate(secret)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def _authenticate(self, secret: bytes) -> None:
        server = VncClientHandshake(secret, version_first=True)
        await super().write(server.data_to_send())
        while not server.done:
            chunk = await self.read()
            if not chunk:
                raise RfbHandshakeError("the VNC server hung up during the handshake")
            server.receive_data(memoryview(chunk)[HEADROOM:])
            if out := server.data_to_send():
                await super().write(out)
        self._server_leftover = server.leftover
        self._viewer = NoneSecurityServer()
        self.push_received(self._viewer.data_to_send())

    async def write(self, data: Payload) -> None:
        """Viewer bytes: to the None handshake until it is done, then straight to x11vnc."""
        viewer = self._viewer
        if viewer is None:
            await super().write(data)
            return
        try:
            viewer.receive_data(data)
        except RfbHandshakeError as err:
            log.warning("a viewer broke the RFB handshake: %s", err.reason)
            raise ConnectionResetError("viewer broke the RFB handshake") from err
        self.push_received(viewer.data_to_send())
        if viewer.done:
            self._viewer = None
            self.push_received(self._server_leftover)
            if viewer.leftover:
                await super().write(viewer.leftover)
