"""Where a viewer's VNC bytes go: a relay channel, or a TCP connection straight to the backend.

Both ends are bounded: a relay channel buffers at most its credit window (the relay sends no
more until :meth:`ServerChannel.read` hands bytes on), and a TCP backend is read one chunk at a
time, only when the viewer's socket has taken the previous one.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

from server.relays.channel import ChannelClosedError, ServerChannel
from wire.errors import ChannelCloseCode
from wire.frames import Payload

READ_CHUNK = 256 * 1024
CONNECT_TIMEOUT_S = 5.0


class BackendEnded(Exception):
    """The backend side of the stream ended; ``code`` says how (a channel close code)."""

    def __init__(self, code: ChannelCloseCode, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(f"backend ended ({code.name}): {reason}")


class VncBackend(Protocol):
    """An ordered byte stream to a VNC server."""

    async def read(self) -> Payload:
        """Next chunk; raises :class:`BackendEnded` once the backend closed."""
        ...

    async def write(self, data: bytes) -> None:
        """Send ``data``, waiting while the backend cannot take more."""
        ...

    async def close(self) -> None:
        """Release the stream (idempotent)."""
        ...


class RelayBackend:
    """A relay channel (``channel.open {target: vnc}``)."""

    def __init__(self, channel: ServerChannel) -> None:
        self.channel = channel

    async def read(self) -> Payload:
        try:
            return await self.channel.read()
        except ChannelClosedError as err:
            raise BackendEnded(err.code, err.reason) from None

    async def write(self, data: bytes) -> None:
        try:
            await self.channel.write(data)
        except ChannelClosedError as err:
            raise BackendEnded(err.code, err.reason) from None

    async def close(self) -> None:
        await self.channel.close(ChannelCloseCode.VIEWER_GONE, "viewer closed")


class TcpBackend:
    """A VNC server the server reaches itself (the direct path)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def connect(cls, host: str, port: int) -> TcpBackend:
        """Connect or raise :class:`BackendEnded` (``TARGET_UNAVAILABLE``)."""
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as err:
            raise BackendEnded(
                ChannelCloseCode.TARGET_UNAVAILABLE, "the VNC server does not answer"
            ) from err
        return cls(reader, writer)

    async def read(self) -> Payload:
        try:
            data = await self._reader.read(READ_CHUNK)
        except OSError:
            data = b""
        if not data:
            raise BackendEnded(ChannelCloseCode.TARGET_CLOSED, "the VNC server closed the stream")
        return data

    async def write(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError as err:
            raise BackendEnded(ChannelCloseCode.TARGET_CLOSED, "the VNC server is gone") from err

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()
