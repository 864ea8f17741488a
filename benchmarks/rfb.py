"""A tiny asyncio RFB 3.8 client for benchmarks and tests.

Speaks just enough of RFC 6143: banner, security type None or VNC authentication,
ClientInit/ServerInit, SetPixelFormat (32 bpp true colour), SetEncodings (Raw only),
FramebufferUpdateRequest and Raw FramebufferUpdate parsing. Transports: direct TCP or
websockify's WebSocket.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from wire.rfb import vnc_auth_response

SECURITY_NONE = 1
SECURITY_VNC_AUTH = 2
ENCODING_RAW = 0
MSG_FRAMEBUFFER_UPDATE = 0
MSG_SET_COLOUR_MAP = 1
MSG_BELL = 2
MSG_SERVER_CUT_TEXT = 3
# 32 bpp, depth 24, little endian, true colour, 8 bits per channel, red at bit 16.
PIXEL_FORMAT = struct.pack(">BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)


class RFBError(Exception):
    """The server broke the protocol or refused us."""


class Transport(Protocol):
    async def read_exactly(self, n: int) -> bytes: ...
    async def write(self, data: bytes) -> None: ...
    async def close(self) -> None: ...


class TCPTransport:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    @classmethod
    async def connect(cls, host: str, port: int) -> TCPTransport:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 24)
        return cls(reader, writer)

    async def read_exactly(self, n: int) -> bytes:
        return await self._reader.readexactly(n)

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def close(self) -> None:
        self._writer.close()


class WebSocketTransport:
    """RFB bytes carried in binary WebSocket messages (websockify, subprotocol ``binary``)."""

    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse):
        self._session, self._ws = session, ws
        self._buf = bytearray()

    @classmethod
    async def connect(cls, url: str) -> WebSocketTransport:
        session = aiohttp.ClientSession()
        try:
            ws = await session.ws_connect(url, protocols=("binary",), max_msg_size=0)
        except BaseException:
            await session.close()
            raise
        return cls(session, ws)

    async def read_exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            msg = await self._ws.receive()
            if msg.type != aiohttp.WSMsgType.BINARY:
                raise RFBError(f"websocket closed: {msg.type.name} {msg.data} {msg.extra}")
            self._buf += msg.data
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    async def write(self, data: bytes) -> None:
        await self._ws.send_bytes(data)

    async def close(self) -> None:
        try:
            await self._ws.close()
        finally:
            await self._session.close()


@dataclass
class Rect:
    x: int
    y: int
    width: int
    height: int
    pixels: bytes

    def contains(self, x: int, y: int) -> bool:
        return self.x <= x < self.x + self.width and self.y <= y < self.y + self.height

    def pixel(self, x: int, y: int) -> bytes:
        offset = ((y - self.y) * self.width + (x - self.x)) * 4
        return self.pixels[offset : offset + 4]


class RFBClient:
    """One RFB connection after the handshake."""

    def __init__(self, transport: Transport) -> None:
        self.t = transport
        self.width = 0
        self.height = 0
        self.name = ""
        # Send our version before the server's banner, as the relay does (wire.rfb).
        self.version_first = False

    @classmethod
    async def open_tcp(
        cls,
        port: int,
        host: str = "127.0.0.1",
        secret: bytes | None = None,
        *,
        version_first: bool = False,
    ) -> RFBClient:
        """Connect straight to x11vnc (``secret``: the desktop's VNC secret, which it needs;
        ``version_first``: send our version before its banner, as the relay does)."""
        transport = await TCPTransport.connect(host, port)
        return await cls._opened(transport, secret, version_first)

    @classmethod
    async def open_websocket(cls, url: str, secret: bytes | None = None) -> RFBClient:
        """Connect through a WebSocket: websockify (``secret`` needed) or the server (None)."""
        return await cls._opened(await WebSocketTransport.connect(url), secret)

    @classmethod
    async def _opened(
        cls, transport: Transport, secret: bytes | None, version_first: bool = False
    ) -> RFBClient:
        """A client after its handshake; a failed handshake closes the transport."""
        client = cls(transport)
        client.version_first = version_first
        try:
            await client.handshake(secret)
        except BaseException:
            await transport.close()
            raise
        return client

    async def handshake(self, secret: bytes | None = None) -> None:
        """RFB 3.8 with security type None, or VNC authentication when ``secret`` is given."""
        if self.version_first:
            await self.t.write(b"RFB 003.008\n")
        banner = await self.t.read_exactly(12)
        if not banner.startswith(b"RFB 003."):
            raise RFBError(f"bad banner {banner!r}")
        if not self.version_first:
            await self.t.write(b"RFB 003.008\n")
        (count,) = await self.t.read_exactly(1)
        if count == 0:
            raise RFBError("server refused the connection")
        wanted = SECURITY_NONE if secret is None else SECURITY_VNC_AUTH
        if wanted not in await self.t.read_exactly(count):
            raise RFBError(f"security type {wanted} not offered")
        await self.t.write(bytes([wanted]))
        if secret is not None:
            challenge = await self.t.read_exactly(16)
            await self.t.write(vnc_auth_response(secret, challenge))
        (result,) = struct.unpack(">I", await self.t.read_exactly(4))
        if result != 0:
            raise RFBError("security handshake failed")
        await self.t.write(b"\x01")  # ClientInit: shared
        self.width, self.height = struct.unpack(">HH", await self.t.read_exactly(4))
        await self.t.read_exactly(16)  # server pixel format; we set ours next
        (name_len,) = struct.unpack(">I", await self.t.read_exactly(4))
        self.name = (await self.t.read_exactly(name_len)).decode("latin-1")
        await self.t.write(b"\x00\x00\x00\x00" + PIXEL_FORMAT)
        await self.t.write(struct.pack(">BxHi", 2, 1, ENCODING_RAW))

    async def request_update(
        self, incremental: bool, x: int = 0, y: int = 0, w: int = 0, h: int = 0
    ) -> None:
        w, h = w or self.width, h or self.height
        await self.t.write(struct.pack(">BBHHHH", 3, int(incremental), x, y, w, h))

    async def read_update(self) -> list[Rect]:
        """Next FramebufferUpdate (Raw rectangles); other server messages are skipped."""
        while True:
            (msg_type,) = await self.t.read_exactly(1)
            if msg_type == MSG_FRAMEBUFFER_UPDATE:
                return await self._read_rects()
            await self._skip_message(msg_type)

    async def _read_rects(self) -> list[Rect]:
        (count,) = struct.unpack(">xH", await self.t.read_exactly(3))
        rects = []
        for _ in range(count):
            x, y, w, h, enc = struct.unpack(">HHHHi", await self.t.read_exactly(12))
            if enc != ENCODING_RAW:
                raise RFBError(f"unexpected encoding {enc}")
            rects.append(Rect(x, y, w, h, await self.t.read_exactly(w * h * 4)))
        return rects

    async def _skip_message(self, msg_type: int) -> None:
        if msg_type == MSG_BELL:
            return
        if msg_type == MSG_SET_COLOUR_MAP:
            _, count = struct.unpack(">xHH", await self.t.read_exactly(5))
            await self.t.read_exactly(count * 6)
        elif msg_type == MSG_SERVER_CUT_TEXT:
            (length,) = struct.unpack(">3xI", await self.t.read_exactly(7))
            await self.t.read_exactly(length)
        else:
            raise RFBError(f"unknown server message {msg_type}")

    async def close(self) -> None:
        await self.t.close()

    async def __aenter__(self) -> RFBClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Closed where it was opened: its WebSocket and that socket's session, while the
        event loop that made them runs (a session left open is finalized later, in whichever
        loop is closed by then, and its finalizer raises)."""
        await self.close()
