"""Where a viewer's VNC bytes go: a relay channel, or (co-located relays) loopback x11vnc.

Both ends are bounded: a relay channel buffers at most its credit window (the relay sends no
more until :meth:`ServerChannel.read` hands bytes on), and a TCP backend is read one chunk at a
time, only when the viewer's socket has taken the previous one.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

from server.relays.router import RelayChannel
from wire.errors import ChannelCloseCode, ChannelClosedError, RfbHandshakeError
from wire.frames import Payload
from wire.rfb import NoneSecurityServer, VncClientHandshake

READ_CHUNK = 256 * 1024
CONNECT_TIMEOUT_S = 5.0
LOOPBACK = "127.0.0.1"


class VncBackend(Protocol):
    """An ordered byte stream to a VNC server."""

    async def read(self) -> Payload:
        """Next chunk; raises :class:`ChannelClosedError` once the backend closed."""
        ...

    async def write(self, data: bytes) -> None:
        """Send ``data``, waiting while the backend cannot take more."""
        ...

    async def close(self) -> None:
        """Release the stream (idempotent)."""
        ...


class RelayBackend:
    """A relay channel (``channel.open {target: vnc}``)."""

    def __init__(self, channel: RelayChannel) -> None:
        self.channel = channel

    async def read(self) -> Payload:
        return await self.channel.read()

    async def write(self, data: bytes) -> None:
        await self.channel.write(data)

    async def close(self) -> None:
        await self.channel.close(ChannelCloseCode.VIEWER_GONE, "viewer closed")


class DirectBackend:
    """x11vnc of a co-located relay's desktop, reached by the server itself (the direct path).

    Only ever on loopback, and only once the server has completed the RFB handshake with the
    desktop's VNC secret: a port that is not that desktop's x11vnc fails the handshake before
    a single viewer byte is spliced. The viewer then gets its own handshake offering security
    type None, as on the relay path (``wire.rfb``).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._viewer: NoneSecurityServer | None = NoneSecurityServer()
        self._pending = self._viewer.data_to_send()
        # Until the viewer's handshake is done, x11vnc is silent (it awaits ClientInit): reads
        # wait for handshake bytes of our own instead.
        self._wake = asyncio.Event()
        self._server_leftover = b""

    @classmethod
    async def connect(cls, port: int, secret: bytes) -> DirectBackend:
        """Connect to ``LOOPBACK:port`` and authenticate, or raise :class:`ChannelClosedError`."""
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(LOOPBACK, port)
                backend = cls(reader, writer)
                await backend._authenticate(secret)
        except (OSError, TimeoutError, RfbHandshakeError) as err:
            raise ChannelClosedError(
                ChannelCloseCode.TARGET_UNAVAILABLE, "the desktop's VNC server did not accept us"
            ) from err
        return backend

    async def _authenticate(self, secret: bytes) -> None:
        server = VncClientHandshake(secret, version_first=True)
        try:
            self._writer.write(server.data_to_send())
            await self._writer.drain()
            while not server.done:
                chunk = await self._reader.read(READ_CHUNK)
                if not chunk:
                    raise RfbHandshakeError("the VNC server hung up during the handshake")
                server.receive_data(chunk)
                if out := server.data_to_send():
                    self._writer.write(out)
                    await self._writer.drain()
        except BaseException:
            self._writer.close()
            raise
        self._server_leftover = server.leftover

    async def read(self) -> Payload:
        while not self._pending and self._viewer is not None:
            self._wake.clear()
            await self._wake.wait()
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        try:
            data = await self._reader.read(READ_CHUNK)
        except OSError:
            data = b""
        if not data:
            raise ChannelClosedError(
                ChannelCloseCode.TARGET_CLOSED, "the VNC server closed the stream"
            )
        return data

    async def write(self, data: bytes) -> None:
        if self._viewer is not None:
            data = self._viewer_handshake(data)
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError as err:
            raise ChannelClosedError(
                ChannelCloseCode.TARGET_CLOSED, "the VNC server is gone"
            ) from err

    def _viewer_handshake(self, data: bytes) -> bytes:
        """Feed the viewer's handshake; returns what is left for x11vnc (the session's start)."""
        viewer = self._viewer
        assert viewer is not None
        try:
            viewer.receive_data(data)
        except RfbHandshakeError as err:
            raise ChannelClosedError(ChannelCloseCode.TARGET_CLOSED, err.reason) from err
        self._pending += viewer.data_to_send()
        if viewer.done:
            self._viewer = None
            self._pending += self._server_leftover
        self._wake.set()
        return viewer.leftover if viewer.done else b""

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()
